//===- Passes.td - xla_gpu passes ------------------------------*- tablegen -*-===//
//
// Passes are registered under XLA's names so that XLA-style RUN lines work.
// One C++ file per pass.
//
//===----------------------------------------------------------------------===//

#ifndef XLA_GPU_PASSES_TD
#define XLA_GPU_PASSES_TD

include "mlir/Pass/PassBase.td"

def ConvertPureCallOpsPass
    : Pass<"xla-convert-pure-call-ops", "mlir::func::FuncOp"> {
  let summary = "Turns xla_gpu.pure_call into func.call";
  let description = [{
    Run after inlining, before lowering to LLVM: the remaining pure calls
    (callees with several call sites) become ordinary `func.call`s, which the
    upstream func-to-LLVM conversion knows.
  }];
  let dependentDialects = ["mlir::func::FuncDialect"];
}

def LowerXlaLoopsToScfPass
    : Pass<"xla-lower-xla-loops-to-scf", "mlir::func::FuncOp"> {
  let summary = "Lowers xla_gpu.loop to scf.for + scf.if + apply_indexing";
  let description = [{
    Each `xla_gpu.loop` becomes one `scf.for` per symbol (over the symbol's
    range, outermost first), then an `scf.if` that checks the dimension
    operands and the constraints against the domain, and inside it one
    single-result `xla_gpu.apply_indexing` per map result followed by the
    loop body. Iterations outside the domain yield their iteration
    arguments unchanged.
  }];
  let dependentDialects = ["mlir::arith::ArithDialect",
                           "mlir::scf::SCFDialect"];
}

def LowerXlaToScfPass : Pass<"xla-lower-xla-to-scf", "mlir::func::FuncOp"> {
  let summary = "Lowers the xla_gpu ops that have no LLVM lowering to scf";
  let description = [{
    Everything `xla-lower-xla-loops-to-scf` does, and the predicated tensor
    accesses: `xla_gpu.predicated_insert` / `predicated_extract` become an
    `scf.if` around `tensor.insert` / `tensor.extract` (else the tensor /
    the fallback). After it only apply_indexing, allocate_shared,
    sync_threads, atomic_rmw and shuffle_reduce (lowered later, per target)
    remain.
  }];
  let dependentDialects = ["mlir::arith::ArithDialect",
                           "mlir::scf::SCFDialect",
                           "mlir::tensor::TensorDialect"];
}

def LowerShuffleReducePass
    : Pass<"xla-lower-shuffle-reduce", "mlir::func::FuncOp"> {
  let summary = "Lowers xla_gpu.shuffle_reduce to gpu.shuffle xor and calls "
                "of the combiner (the cuda target)";
  let description = [{
    For each distance d = max_distance, ..., 2, 1 every operand goes through
    `gpu.shuffle xor %v, d, 32` (one 32-bit shuffle per piece: 64-bit values
    as two halves, narrower ones zero-extended; floats through their bits,
    index through i64) and a `func.call` of the combiner takes the lane's
    own values, then the other lane's. Runs in the cuda pipeline before
    xla-lower-to-llvm; the cpu target emulates the op in xla-emulate-grid
    instead.
  }];
  let dependentDialects = ["mlir::arith::ArithDialect",
                           "mlir::gpu::GPUDialect",
                           "mlir::func::FuncDialect"];
}

def SimplifyArithPass : Pass<"xla-simplify-arith", "mlir::func::FuncOp"> {
  let summary = "Folds integer comparisons and min/max whose outcome the "
                "ranges decide";
  let description = [{
    Ranges come from constants, `xla.range` on gpu ids, scf.for bounds and
    apply_indexing domains: `arith.cmpi sle %thread_id_x, %c127` with
    `xla.range = [0 : index, 127 : index]` is `true`, so the bounds checks of
    a lowered loop disappear once canonicalize folds the scf.if.
  }];
  let dependentDialects = ["mlir::arith::ArithDialect"];
}

def FlattenTensorsPass : Pass<"xla-flatten-tensors", "mlir::ModuleOp"> {
  let summary = "Makes every statically shaped tensor one-dimensional";
  let description = [{
    `tensor<6x512x4096xbf16>` becomes `tensor<12582912xbf16>` in function
    signatures, calls and returns, scf.for/scf.if carried values,
    constants, allocate_shared, sync_threads and pure_call; every
    tensor.extract / tensor.insert / xla_gpu.atomic_rmw indexes through an `xla_gpu.apply_indexing`
    of the row-major linearization, which the canonicalizer composes with
    the indexing that produced the indices. Rank-0 tensors become one
    element. Ops it does not know that carry such tensors are an error.
  }];
  let dependentDialects = ["mlir::xla_gpu::XlaGpuDialect"];
}

def VectorizeLoadsStoresPass
    : Pass<"xla-vectorize-loads-stores", "mlir::func::FuncOp"> {
  let summary = "Turns per-element tensor accesses in small loops into "
                "vector transfers";
  let description = [{
    In an `scf.for %i = 0 to N step 1` (N * element bits <= 128), a
    `tensor.extract %t[%idx]` of a loop-invariant 1-d tensor whose index is
    an `xla_gpu.apply_indexing` equal to `base + %i` with `base` a multiple of
    N becomes one `vector.transfer_read` hoisted before the loop and a
    `vector.extract` inside it. A `tensor.insert` into an iteration argument,
    yielded right back, becomes a `vector.insert` into a new vector
    iteration argument and one `vector.transfer_write` after the loop.
  }];
  let dependentDialects = ["mlir::vector::VectorDialect",
                           "mlir::arith::ArithDialect"];
}

def OptimizeLoopsPass : Pass<"xla-gpu-optimize-loops", "mlir::func::FuncOp"> {
  let summary = "Fully unrolls small loops, software-pipelines loads in "
                "the others";
  let description = [{
    An `scf.for` with constant bounds whose trip count is at most
    `max-trip-count` and whose unrolled body stays under `max-unrolled-ops`
    operations is unrolled completely: the loop over a vector's elements
    disappears and its `vector.extract`/`vector.insert` get constant
    positions. Innermost loops first.

    In a loop that stays, the first load of its body (`tensor.extract` or
    `vector.transfer_read` of a loop-invariant tensor, indexed by pure
    computations of the induction variable) is pipelined: the load of the
    first iteration moves before the loop, and each iteration loads the next
    iteration's value (guarded by the upper bound), so the load's latency
    overlaps the iteration's work.
  }];
  let options = [
    Option<"maxTripCount", "max-trip-count", "int64_t", /*default=*/"16",
           "Unroll loops with at most this many iterations">,
    Option<"maxUnrolledOps", "max-unrolled-ops", "int64_t", /*default=*/"512",
           "Unroll only while trip count * body size stays under this">,
  ];
  let dependentDialects = ["mlir::arith::ArithDialect"];
}

def LowerTensorsPass : Pass<"xla-lower-tensors", "mlir::ModuleOp"> {
  let summary = "Lowers tensors to bare LLVM pointers, loads and stores";
  let description = [{
    The kernel ABI: every tensor argument becomes a bare `!llvm.ptr` and
    functions return nothing (a returned tensor must be one of the
    arguments, written in place). `tensor.extract`/`tensor.insert` and 1-d
    `vector.transfer_read`/`transfer_write` become a `getelementptr` and an
    `llvm.load`/`llvm.store` (vector-wide where vectorized; `invariant` on
    arguments the function never writes; `i1` stored as `i8`; `complex<T>`
    as a struct of its parts, taken apart by `llvm.extractvalue` into
    `complex.create` and put together from `complex.re` / `complex.im`);
    `xla_gpu.allocate_shared` becomes a global in shared memory (address
    space 3), `xla_gpu.sync_threads` a `gpu.barrier`, tensor constants
    private globals.

    `xla_gpu.atomic_rmw` becomes one monotonic `llvm.atomicrmw` when its
    region combines `%current` with one other value by an op LLVM has (f32
    and f64 `addf`, `maxnumf`/`minnumf`/`maximumf`/`minimumf`; i32 and i64
    `addi`, `max/minsi`, `max/minui`; `ori`/`andi`/`xori`), an exchange when
    the yielded value does not depend on `%current`, nothing when it yields
    `%current`; region ops that do not depend on `%current` run once,
    before. Anything else is a compare-and-swap loop (`scf.while` around
    `llvm.cmpxchg`) that runs the region on the value seen. Elements of 8
    or 16 bits (and i1, a byte) are updated through the aligned 32-bit word
    that holds them: the CAS loop replaces their bits in the word, and
    or/and/xor are word-wide atomics that leave the other bits unchanged.
    A `complex.add` on a complex element is two float `fadd` atomics, one
    per part (as XLA does); any other complex update is a CAS loop on the
    whole element as one integer (i64 for complex<f32>, i128 for
    complex<f64>: NVPTX's `atom.cas.b128`, sm_90+; x86's `cmpxchg16b`), the
    real part in its low half.

    With `native-16bit-float-add` (the cuda pipeline), f16 and bf16 `addf`
    is one `llvm.atomicrmw fadd` on the element too: NVPTX emits the native
    `atom.add.noftz.f16` (sm_70+) / `atom.add.noftz.bf16` (sm_90+) and
    expands it to a CAS loop itself on older GPUs. The host keeps the CAS
    loop (x86 has no 16-bit float atomics, and bf16 rounding there needs a
    runtime library call).

    An `atomic_rmw` on a vector of N consecutive elements is one atomic per
    lane, except that with `vector-float-add` (the cuda pipeline) N = 2 or
    4 f32 adds are one `red.global.add.v{2,4}.f32` (sm_90, PTX ISA 8.1),
    written as inline PTX: NVPTX has no vector atomicrmw.
  }];
  let options = [
    Option<"native16BitFloatAdd", "native-16bit-float-add", "bool",
           /*default=*/"false",
           "Lower f16/bf16 atomic adds to llvm.atomicrmw fadd (NVPTX)">,
    Option<"vectorFloatAdd", "vector-float-add", "bool", /*default=*/"false",
           "Lower f32 atomic adds of 2 or 4 lanes to one red.global.add.v4.f32 "
           "(NVPTX, sm_90)">,
  ];
  let dependentDialects = ["mlir::LLVM::LLVMDialect", "mlir::gpu::GPUDialect",
                           "mlir::arith::ArithDialect", "mlir::scf::SCFDialect",
                           "mlir::complex::ComplexDialect"];
}

def ComplexToStandardPass : Pass<"xla-complex-to-standard", "mlir::ModuleOp"> {
  let summary = "convert-complex-to-standard where a complex value is";
  let description = [{
    Runs the upstream `convert-complex-to-standard` on a module that has a
    value or function signature of complex type, and leaves any other
    module as it is without visiting its ops: the upstream conversion
    walks every op of every kernel, most of which have no complex value.
  }];
  let dependentDialects = ["mlir::arith::ArithDialect",
                           "mlir::complex::ComplexDialect",
                           "mlir::math::MathDialect"];
}

def ExpandComplexPass : Pass<"xla-expand-complex", "mlir::ModuleOp"> {
  let summary = "Replaces complex values by their real and imaginary parts";
  let description = [{
    Runs after `convert-complex-to-standard`: every `complex<T>` value that
    is left (function arguments and results, scf-carried values, selects,
    `complex.create` / `re` / `im` / `constant`) becomes its two `T` parts,
    so that the target lowerings see floats only.
  }];
  let dependentDialects = ["mlir::arith::ArithDialect",
                           "mlir::complex::ComplexDialect"];
}

def SimplifyAffinePass : Pass<"xla-simplify-affine", "mlir::ModuleOp"> {
  let summary = "Lowers apply_indexing to arith, narrowed by ranges";
  let description = [{
    Every `xla_gpu.apply_indexing` becomes arith ops. Its operands' ranges
    (from `xla.range`, loop bounds, the map's domain) simplify the
    expressions first; a computation whose every intermediate value fits in
    32 bits is done in i32 (then cast to index), divisions and remainders of
    non-negative values are unsigned, and adds and multiplies carry
    nsw/nuw where the ranges prove them.
  }];
  let dependentDialects = ["mlir::arith::ArithDialect"];
}

def ExpandFloatOpsPass : Pass<"xla-expand-float-ops", "mlir::ModuleOp"> {
  let summary = "Computes in f32 what the GPU cannot do in narrow floats";
  let description = [{
    `math` ops on bf16, f16 and the f8/f6/f4 types, and `arith`
    arithmetic and comparisons on f8/f6/f4 types, extend their operands to
    f32, compute there and truncate the result back (as XLA:GPU does:
    `math.tanh` on bf16 becomes `__nv_tanhf` between `fpext` and `fptrunc`). bf16 and
    f16 arith stays native.
  }];
  let dependentDialects = ["mlir::arith::ArithDialect"];
}

def LowerToLLVMPass : Pass<"xla-lower-to-llvm", "mlir::ModuleOp"> {
  let summary = "Lowers what is left to the LLVM and NVVM dialects";
  let description = [{
    func/arith/cf/math/vector/index to the llvm dialect, gpu ids and
    barriers to `nvvm.read.ptx.sreg.*` / `nvvm.barrier0`, math functions
    without an LLVM intrinsic to libdevice `__nv_*` calls. Entry functions
    (`xla.entry`, else every public function without results) become NVPTX
    kernels (`nvvm.kernel`). Index arithmetic is 64-bit.
  }];
  let dependentDialects = ["mlir::LLVM::LLVMDialect", "mlir::NVVM::NVVMDialect"];
}

def EraseDeadFunctionsPass
    : Pass<"xla-erase-dead-functions", "mlir::ModuleOp"> {
  let summary = "Erases functions no public function reaches";
  let description = [{
    After inlining, the outlined subgraph functions whose calls were all
    inlined are dead: everything not reachable from a public function
    through symbol references (`func.call`, `xla_gpu.pure_call`, the
    combiner of `xla_gpu.shuffle_reduce`) is erased.
  }];
}

def PropagateSliceIndicesPass
    : Pass<"xla-propagate-slice-indices", "mlir::ModuleOp"> {
  let summary = "Copies xla.slice_index / xla.invariant to callee parameters";
  let description = [{
    A callee parameter that receives, at every call site, the same
    caller argument annotated with `xla.slice_index` (the buffer slice it
    lives in) gets that annotation too, and `xla.invariant` (read-only)
    likewise; repeated through the call graph. xla-lower-tensors marks
    loads through `xla.invariant` parameters invariant, and
    xla-merge-pointers relies on the slice indices.
  }];
}

def MergePointersPass : Pass<"xla-merge-pointers", "mlir::ModuleOp"> {
  let summary = "Passes arguments that share a buffer slice once";
  let description = [{
    In every function nothing calls (the kernels), arguments with the same
    `xla.slice_index` are the same buffer: later ones are replaced by the
    first and removed from the signature, which is XLA's kernel ABI.
  }];
}

def EmulateGridPass : Pass<"xla-emulate-grid", "mlir::ModuleOp"> {
  let summary = "Runs a kernel's whole launch grid as loops on the host";
  let description = [{
    The `cpu` target's replacement for the GPU launch. Each kernel `@k`
    (`xla.entry`, else every public function without results), after
    `xla-lower-tensors` and before `convert-scf-to-cf`, becomes
    `@k_host_blocks(args..., %first: index, %end: index)`, which runs blocks
    `[first, end)` one after the other, and `@k_host(%args: !llvm.ptr)`,
    which runs the whole grid on the kernel arguments that `%args` points
    to (an array of one pointer per argument: the packed ABI of a host
    kernel); both carry `llvm.emit_c_interface`. Kernel arguments must be
    `!llvm.ptr` (after `xla-lower-tensors`).

    Inside a block, the kernel is cut at its `gpu.barrier`s (what
    `xla_gpu.sync_threads` lowers to) into phases, and each phase is a loop
    over the block's threads in thread order: every thread finishes a phase
    before any thread starts the next one. A value computed in one phase and
    used in a later one is recomputed there when it is a pure computation
    of thread and block ids, constants and arguments (`gpu.thread_id` is
    the phase's loop counter), and otherwise kept per thread: stored to a
    buffer of one slot per thread at the end of its phase and loaded back in
    the phases that use it. Shared-memory globals (address space 3) become
    per-block buffers (stack allocations reused by every block, as a GPU
    reuses a multiprocessor's shared memory). A barrier nested in control
    flow cannot be cut there and is an error.

    An `xla_gpu.shuffle_reduce` (at the top level of the kernel, like a
    barrier) cuts the kernel too: the phase before stores each thread's
    operands, then one loop over the block's threads per distance d
    (max_distance, ..., 2, 1) computes `combiner(mine, lane t xor d's)` for
    every thread t into a second buffer, exactly the GPU's butterfly, and
    the phases after read their thread's result. With a combiner that is
    symmetric (proven on its body), only the 2m - 1 calls of a group of 2m
    lanes that its first lane depends on run, with the same bits. Blocks
    must be whole groups of 2 * max_distance lanes. Shuffles that follow
    each other with nothing between, none of another's results, run between
    the same two phases (symmetric ones of one distance in one loop nest).
    A phase whose only writes are under `lane == 0` (or `thread == 0`)
    runs that lane alone.

    For LLVM's loop vectorizer (the innermost loop, over consecutive
    threads, is the one that becomes SIMD code): a top-level `scf.for` with
    constant bounds is lifted into a block-level loop around its own phase
    (loop-carried values in per-thread buffers); a phase that divides the
    thread id by a divisor or multiple of 32 runs as warps x lanes with
    those divisions folded; every thread loop without atomics is marked
    parallel (its loads and stores in one access group, `parallelAccesses`
    in `llvm.loop_annotation`). `@k_host` runs the whole grid on one thread:
    a kernel with atomics gets a private copy for it,
    `@k_host_serial_blocks`, whose atomics are plain loads and stores.

    Launch dimensions are one-dimensional: `threads` per block and `blocks`
    (0: one more than the upper bound of `xla.range` on `gpu.thread_id x`
    / `gpu.block_id x`, or 1 where the kernel never reads that id); `y` and
    `z` ids are 0. An explicit dimension larger than the range is an error.
  }];
  let options = [
    Option<"threads", "threads", "int64_t", /*default=*/"0",
           "Threads per block (0: from the xla.range of gpu.thread_id x)">,
    Option<"blocks", "blocks", "int64_t", /*default=*/"0",
           "Blocks in the grid (0: from the xla.range of gpu.block_id x)">,
  ];
  let dependentDialects = ["mlir::LLVM::LLVMDialect", "mlir::scf::SCFDialect",
                           "mlir::arith::ArithDialect",
                           "mlir::func::FuncDialect",
                           "mlir::vector::VectorDialect"];
}

def ScalarizeVectorMemoryPass
    : Pass<"xla-scalarize-vector-memory", "mlir::ModuleOp"> {
  let summary = "Splits vector loads and stores into one per element (cpu)";
  let description = [{
    The `cpu` target, after `xla-emulate-grid`: every non-atomic,
    non-volatile `llvm.load` / `llvm.store` of a 1-D vector of whole-byte
    elements becomes one scalar
    access per element (same flags; alignments of the element offsets),
    joined by `vector.from_elements` / taken apart with `vector.extract`,
    which canonicalize folds away. LLVM's loop vectorizer then sees the loop
    over a block's threads with scalar values only and vectorizes it across
    threads (it rejects loops with vector-typed values).
  }];
  let dependentDialects = ["mlir::LLVM::LLVMDialect",
                           "mlir::vector::VectorDialect"];
}

def ApproximateHostMathPass
    : Pass<"xla-approximate-host-math", "mlir::ModuleOp"> {
  let summary = "f32 exp/expm1/log/log1p/tanh/erf as vectorizable arithmetic (cpu)";
  let description = [{
    The `cpu` target, before `xla-lower-to-host`: f32 `math.exp`,
    `math.expm1`, `math.log`, `math.log1p`, `math.tanh` and `math.erf`
    (scalar or vector) become arith ops (range reduction, polynomials,
    selects for the special cases) instead of libm calls, so that LLVM's
    loop vectorizer can run over a loop that uses them. Errors stay within
    2.5 ulp of the exact result over the whole f32 range, NaN, infinities,
    signed zeros and subnormals included (the bounds are in the source).
    Other math ops and f64 are left alone (libm).
  }];
  let dependentDialects = ["mlir::arith::ArithDialect",
                           "mlir::math::MathDialect"];
}

def LowerToHostPass : Pass<"xla-lower-to-host", "mlir::ModuleOp"> {
  let summary = "Lowers a grid-emulated module to the LLVM dialect for the "
                "host";
  let description = [{
    The `cpu` target's `xla-lower-to-llvm`: func/arith/cf/math/vector/index
    to the llvm dialect, with math functions that have an LLVM intrinsic as
    intrinsics and the others as libm calls (`tanhf`), which the JIT
    resolves in the process; no libdevice, no NVVM. Arithmetic on bf16 is
    computed in f32 and rounded back after every op (as the GPU rounds), and
    bf16 <-> f32 conversions become integer ops, since the JIT has no
    `__truncsfbf2`. `llvm.emit_c_interface` functions get their
    `_mlir_ciface_` wrappers. GPU or NVVM ops left over (no
    `xla-emulate-grid` before) are an error.
  }];
  let dependentDialects = ["mlir::LLVM::LLVMDialect", "mlir::func::FuncDialect",
                           "mlir::arith::ArithDialect"];
}

#endif  // XLA_GPU_PASSES_TD
