//===- XlaGpuOps.td - xla_gpu operations -----------------------*- tablegen -*-===//

#ifndef XLA_GPU_OPS_TD
#define XLA_GPU_OPS_TD

include "mlir/IR/OpAsmInterface.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/CallInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "XlaGpuDialect.td"
include "XlaGpuAttrs.td"

//===----------------------------------------------------------------------===//
// apply_indexing
//===----------------------------------------------------------------------===//

def XlaGpu_ApplyIndexingOp : XlaGpu_Op<"apply_indexing", [Pure]> {
  let summary = "Evaluates an indexing map";
  let description = [{
    `%r:2 = xla_gpu.apply_indexing #map(%d0, %d1)[%s0]` applies the map to its
    dimension operands (in parentheses) and symbol operands (in brackets) and
    yields one `index` per map result. Operands outside the map's domain give
    undefined results.
  }];
  let arguments = (ins Variadic<Index>:$operands,
                       XlaGpu_IndexingMapAttr:$indexing_map_attr);
  let results = (outs Variadic<Index>);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let hasFolder = 1;
  let hasCanonicalizer = 1;
  let builders = [
    OpBuilder<(ins "::mlir::ValueRange":$operands,
                   "const ::mlir::xla_gpu::IndexingMap&":$map)>,
  ];
  let extraClassDeclaration = [{
    const ::mlir::xla_gpu::IndexingMap& getIndexingMap() {
      return getIndexingMapAttr().getIndexingMap();
    }
    ::mlir::OperandRange getDimOperands() {
      return getOperands().take_front(getIndexingMap().getNumDims());
    }
    ::mlir::OperandRange getSymbolOperands() {
      return getOperands().drop_front(getIndexingMap().getNumDims());
    }
  }];
}

//===----------------------------------------------------------------------===//
// loop + yield
//===----------------------------------------------------------------------===//

def XlaGpu_LoopOp : XlaGpu_Op<"loop", [
    AttrSizedOperandSegments, RecursiveMemoryEffects,
    SingleBlockImplicitTerminator<"::mlir::xla_gpu::YieldOp">,
    DeclareOpInterfaceMethods<OpAsmOpInterface,
        ["getAsmResultNames", "getAsmBlockArgumentNames"]>]> {
  let summary = "A loop over the domain of an indexing map";
  let description = [{
    ```
    %r = xla_gpu.loop (%tid, %bid)[%i, %j] -> (%d0, %d1) in #map
        iter_args(%it = %init) -> (tensor<...>) {
      ...
      xla_gpu.yield %v : tensor<...>
    }
    ```
    Iterates the symbols (`%i`, `%j`, the induction variables) over their
    ranges, for the given dimension operands; iterations outside the domain
    (ranges and constraints) are skipped. `%d0, %d1` are the map's results.
    The region's arguments are the induction variables, then the map results,
    then the iteration arguments.
  }];
  let arguments = (ins Variadic<Index>:$dims,
                       XlaGpu_IndexingMapAttr:$indexing_map_attr,
                       Variadic<AnyType>:$inits);
  let results = (outs Variadic<AnyType>);
  let regions = (region SizedRegion<1>:$region);
  let hasCustomAssemblyFormat = 1;
  let hasRegionVerifier = 1;
  let hasCanonicalizeMethod = 1;
  let skipDefaultBuilders = 1;
  let builders = [
    // Builds the loop with an empty body block of the right arguments.
    OpBuilder<(ins "::mlir::xla_gpu::IndexingMapAttr":$map,
                   "::mlir::ValueRange":$dims, "::mlir::ValueRange":$inits)>,
  ];
  let extraClassDeclaration = [{
    const ::mlir::xla_gpu::IndexingMap& getIndexingMap() {
      return getIndexingMapAttr().getIndexingMap();
    }
    int64_t getNumInductionVars() {
      return getIndexingMap().getNumSymbols();
    }
    ::mlir::Block::BlockArgListType getInductionVars() {
      return getBody()->getArguments().take_front(getNumInductionVars());
    }
    ::mlir::Block::BlockArgListType getIndexingMapResults() {
      return getBody()->getArguments().drop_front(getNumInductionVars())
          .drop_back(getInits().size());
    }
    ::mlir::Block::BlockArgListType getRegionIterArgs() {
      return getBody()->getArguments().take_back(getInits().size());
    }
    ::mlir::Block* getBody() { return &getRegion().front(); }
  }];
}

def XlaGpu_YieldOp : XlaGpu_Op<"yield", [
    Pure, ReturnLike, Terminator,
    ParentOneOf<["::mlir::xla_gpu::LoopOp", "::mlir::xla_gpu::AtomicRMWOp"]>]> {
  let summary = "Yields the next iteration arguments of an xla_gpu.loop, or "
                "the new value of an xla_gpu.atomic_rmw";
  let arguments = (ins Variadic<AnyType>:$values);
  let builders = [OpBuilder<(ins), [{ /* nothing to yield */ }]>];
  let assemblyFormat = "attr-dict ($values^ `:` type($values))?";
}

//===----------------------------------------------------------------------===//
// pure_call
//===----------------------------------------------------------------------===//

def XlaGpu_PureCallOp : XlaGpu_Op<"pure_call", [
    Pure, CallOpInterface, DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmResultNames"]>]> {
  let summary = "Calls a side-effect-free function";
  let description = [{
    `%v = xla_gpu.pure_call @f(%t, %i) : (tensor<4xf32>, index) -> f32` calls
    the `func.func @f` of the enclosing module. Unlike `func.call` it has no
    side effects, so CSE and LICM may move, merge or drop it. The inliner
    inlines a callee only while it has a single call site.
  }];
  let arguments = (ins FlatSymbolRefAttr:$callee,
                       Variadic<AnyType>:$operands,
                       OptionalAttr<DictArrayAttr>:$arg_attrs,
                       OptionalAttr<DictArrayAttr>:$res_attrs);
  let results = (outs Variadic<AnyType>);
  let assemblyFormat = [{
    $callee `(` $operands `)` attr-dict `:` functional-type($operands, results)
  }];
  let builders = [
    OpBuilder<(ins "::mlir::func::FuncOp":$callee,
                   "::mlir::ValueRange":$operands)>,
  ];
  let extraClassDeclaration = [{
    ::mlir::CallInterfaceCallable getCallableForCallee() {
      return (*this)->getAttrOfType<::mlir::SymbolRefAttr>("callee");
    }
    void setCalleeFromCallable(::mlir::CallInterfaceCallable callee) {
      (*this)->setAttr("callee", ::llvm::cast<::mlir::SymbolRefAttr>(
                                     callee.get<::mlir::SymbolRefAttr>()));
    }
    ::mlir::Operation::operand_range getArgOperands() { return getOperands(); }
    ::mlir::MutableOperandRange getArgOperandsMutable() {
      return getOperandsMutable();
    }
  }];
}

//===----------------------------------------------------------------------===//
// allocate_shared, sync_threads
//===----------------------------------------------------------------------===//

def XlaGpu_AllocateSharedOp : XlaGpu_Op<"allocate_shared", [
    DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmResultNames"]>]> {
  let summary = "Allocates a block-shared tensor (GPU shared memory)";
  let description = [{
    `%s = xla_gpu.allocate_shared : tensor<32x1x33xf32>`. Each evaluation is a
    distinct allocation, so it is never merged by CSE.
  }];
  let results = (outs Res<AnyStaticShapeTensor, "the shared tile",
                          [MemAlloc<DefaultResource>]>:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}

def XlaGpu_SyncThreadsOp : XlaGpu_Op<"sync_threads", [
    DeclareOpInterfaceMethods<InferTypeOpInterface>,
    DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmResultNames"]>]> {
  let summary = "A block-wide barrier over shared tensors";
  let description = [{
    `%t:2 = xla_gpu.sync_threads %a, %b : tensor<...>, tensor<...>`: every
    thread of the block has finished writing `%a` and `%b` before any thread
    reads the results. It has side effects so that it is never moved or dropped.
  }];
  let arguments = (ins Variadic<AnyRankedTensor>:$operands);
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let assemblyFormat = "$operands attr-dict `:` type($operands)";
}

//===----------------------------------------------------------------------===//
// shuffle_reduce
//===----------------------------------------------------------------------===//

// Result types are spelled out in builders (Python: ShuffleReduceOp(types,
// combiner, operands, max_distance)); the syntax prints them once.
def XlaGpu_ShuffleReduceOp : XlaGpu_Op<"shuffle_reduce", [
    NoMemoryEffect, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "A butterfly reduction over the lanes of a warp";
  let description = [{
    ```
    %r:2 = xla_gpu.shuffle_reduce(%v, %i) to 16 combiner=@argmax : f32, i32
    ```
    For each distance `d` = `max_distance`, `max_distance / 2`, ..., 1,
    every lane combines its values with those of lane `lane xor d`:
    `(v, i) = @argmax(v, i, v_other, i_other)` (the lane's own values first).
    Afterwards every lane of each group of `2 * max_distance` lanes holds
    the combined values. `max_distance` is a power of two, at most 16; the
    combiner is a `func.func` of type `(T..., T...) -> (T...)` for the
    operand types `T...` (integers, floats or index, at most 64 bits).

    Every lane of the warp must execute it together: the cpu target
    requires it at the top level of the kernel and blocks of whole warps.
  }];
  let arguments = (ins FlatSymbolRefAttr:$combiner,
                       Variadic<AnyType>:$operands,
                       I64Attr:$max_distance);
  let results = (outs Variadic<AnyType>:$results);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let builders = [
    OpBuilder<(ins "::mlir::func::FuncOp":$combiner,
                   "::mlir::ValueRange":$operands, "int64_t":$max_distance)>,
  ];
}

//===----------------------------------------------------------------------===//
// predicated_insert, predicated_extract
//===----------------------------------------------------------------------===//

def XlaGpu_PredicatedInsertOp : XlaGpu_Op<"predicated_insert", [
    Pure, AllTypesMatch<["dest", "result"]>,
    TypesMatchWith<"the value's type is the element type of dest", "dest",
                   "value",
                   "::llvm::cast<::mlir::TensorType>($_self).getElementType()">]> {
  let summary = "Inserts an element into a tensor if a condition holds";
  let description = [{
    `%r = xla_gpu.predicated_insert %v into %t[%i, %j] if %cond : tensor<4x8xf32>`
    is `%t` with `%v` at `[%i, %j]` when `%cond` is true, else `%t`
    unchanged (the indices need not be valid then).
  }];
  let arguments = (ins AnyType:$value, AnyRankedTensor:$dest,
                       Variadic<Index>:$indices, I1:$condition);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $value `into` $dest `[` $indices `]` `if` $condition attr-dict `:` type($dest)
  }];
  let hasVerifier = 1;
  let hasFolder = 1;
  let hasCanonicalizeMethod = 1;
}

def XlaGpu_PredicatedExtractOp : XlaGpu_Op<"predicated_extract", [
    Pure,
    TypesMatchWith<"the result's type is the element type of src", "src",
                   "result",
                   "::llvm::cast<::mlir::TensorType>($_self).getElementType()">,
    TypesMatchWith<"the fallback's type is the element type of src", "src",
                   "fallback",
                   "::llvm::cast<::mlir::TensorType>($_self).getElementType()">]> {
  let summary = "Extracts an element of a tensor if a condition holds";
  let description = [{
    `%e = xla_gpu.predicated_extract %t[%i] if %cond else %default : tensor<8xf32>`
    is `%t[%i]` when `%cond` is true, else `%default` (the indices need not
    be valid then).
  }];
  let arguments = (ins AnyRankedTensor:$src, Variadic<Index>:$indices,
                       I1:$condition, AnyType:$fallback);
  let results = (outs AnyType:$result);
  let assemblyFormat = [{
    $src `[` $indices `]` `if` $condition `else` $fallback attr-dict `:` type($src)
  }];
  let hasVerifier = 1;
  let hasFolder = 1;
  let hasCanonicalizeMethod = 1;
}

//===----------------------------------------------------------------------===//
// atomic_rmw
//===----------------------------------------------------------------------===//

def XlaGpu_AtomicRMWOp : XlaGpu_Op<"atomic_rmw", [
    RecursiveMemoryEffects, AllTypesMatch<["input", "result"]>]> {
  let summary = "Atomically updates one element of a tensor";
  let description = [{
    ```
    %r = xla_gpu.atomic_rmw %t[%i, %j] : tensor<4x8xf32> {
    ^bb0(%current: f32):
      %new = arith.addf %current, %v : f32
      xla_gpu.yield %new : f32
    }
    ```
    Reads the element at `[%i, %j]`, runs the region on it and writes back
    the yielded value, atomically with respect to the other threads that
    update the same element; the result is the updated tensor. The region
    may run more than once (a compare-and-swap loop); what it computes from
    values other than `%current` must not have side effects.

    With a `vector<N x T>` argument the op updates the N consecutive
    elements of the innermost dimension from `[%i, %j]` on, each
    atomically (not the N as one update), the region combining them lane
    by lane. sm_90 adds N f32 at once (`red.global.add.v4.f32`), which a
    scatter-add of contiguous rows uses; N must fit the innermost
    dimension, and the region must map to a hardware atomic (one add, min,
    max, or, and, xor or an exchange of 32- or 64-bit elements).
  }];
  let arguments = (ins AnyRankedTensor:$input, Variadic<Index>:$indices);
  let results = (outs AnyRankedTensor:$result);
  let regions = (region SizedRegion<1>:$computation);
  let assemblyFormat = [{
    $input `[` $indices `]` `:` type($input) $computation attr-dict
  }];
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
  let skipDefaultBuilders = 1;
  let builders = [
    // Builds the op with a body block of one argument, the current value.
    OpBuilder<(ins "::mlir::Value":$input, "::mlir::ValueRange":$indices)>,
  ];
  let extraClassDeclaration = [{
    ::mlir::Block *getBody() { return &getComputation().front(); }
    ::mlir::BlockArgument getCurrentValue() { return getBody()->getArgument(0); }
    ::mlir::Type getElementType() {
      return ::llvm::cast<::mlir::TensorType>(getInput().getType())
          .getElementType();
    }
  }];
}

#endif  // XLA_GPU_OPS_TD
