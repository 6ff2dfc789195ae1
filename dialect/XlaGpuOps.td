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
    Pure, ReturnLike, Terminator, HasParent<"::mlir::xla_gpu::LoopOp">]> {
  let summary = "Yields the next iteration arguments of an xla_gpu.loop";
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

#endif  // XLA_GPU_OPS_TD
