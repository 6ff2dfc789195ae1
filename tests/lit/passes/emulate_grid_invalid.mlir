// What xla-emulate-grid refuses.
// RUN: xla-gpu-opt %s --split-input-file --xla-emulate-grid --verify-diagnostics

// A barrier under control flow: the kernel cannot be cut there.
func.func @barrier_in_if(%p: !llvm.ptr) {
  %c = llvm.load %p : !llvm.ptr -> i1
  scf.if %c {
    // expected-error @+1 {{'gpu.barrier' op inside 'scf.if' cannot be emulated on the host: the kernel is cut into phases at barriers, which must be at the top level of the kernel or of a loop there with constant bounds}}
    gpu.barrier
  }
  return
}

// -----

// A loop's barriers: only where every thread reaches them the same number
// of times, known when the pass runs (constant bounds).
func.func @barrier_in_loop_of_unknown_trip_count(%p: !llvm.ptr) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n64 = llvm.load %p : !llvm.ptr -> i64
  %n = arith.index_cast %n64 : i64 to index
  scf.for %i = %c0 to %n step %c1 {
    // expected-error @+1 {{'gpu.barrier' op inside 'scf.for' cannot be emulated on the host: the kernel is cut into phases at barriers, which must be at the top level of the kernel or of a loop there with constant bounds}}
    gpu.barrier
  }
  return
}

// -----

// Loops with barriers do not nest.
func.func @barrier_in_nested_loop() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  scf.for %i = %c0 to %c4 step %c1 {
    gpu.barrier
    scf.for %j = %c0 to %c4 step %c1 {
      // expected-error @+1 {{'gpu.barrier' op inside 'scf.for' cannot be emulated}}
      gpu.barrier
    }
  }
  return
}

// -----

func.func private @add(%a: f32, %b: f32) -> f32 {
  %s = arith.addf %a, %b : f32
  return %s : f32
}
func.func @shuffle_in_loop(%p: !llvm.ptr) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %tid = gpu.thread_id x {xla.range = [0 : index, 31 : index]}
  scf.for %i = %c0 to %c4 step %c1 {
    %x = llvm.load %p : !llvm.ptr -> f32
    gpu.barrier
    // expected-error @+1 {{'xla_gpu.shuffle_reduce' op inside 'scf.for' cannot be emulated on the host: the kernel is cut into phases at warp shuffles, which must be at the top level of the kernel}}
    %r = xla_gpu.shuffle_reduce(%x) to 16 combiner=@add : f32
    llvm.store %r, %p : f32, !llvm.ptr
  }
  return
}

// -----

// A value kept across a barrier must be storable.
func.func @unstorable(%p: !llvm.ptr) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'memref.alloca' op result is used after a barrier and must be kept per thread, but its type 'memref<4xf32>' cannot be stored}}
  %m = memref.alloca() : memref<4xf32>
  gpu.barrier
  %v = memref.load %m[%c0] : memref<4xf32>
  llvm.store %v, %p : f32, !llvm.ptr
  return
}

// -----

func.func @no_range() {
  // expected-error @+1 {{'gpu.thread_id' op has no xla.range: give the launch dimension to xla-emulate-grid (threads=N)}}
  %t = gpu.thread_id x
  return
}

// -----

func.func @two_dimensional() {
  // expected-error @+1 {{'gpu.block_id' op ranges beyond 0 in dimension y: only one-dimensional (x) launches are emulated}}
  %b = gpu.block_id y {xla.range = [0 : index, 3 : index]}
  return
}

// -----

func.func @shuffle(%p: !llvm.ptr) {
  %x = llvm.load %p : !llvm.ptr -> f32
  %c1 = arith.constant 1 : i32
  %c32 = arith.constant 32 : i32
  // expected-error @+1 {{'gpu.shuffle' op has no host emulation}}
  %r, %ok = gpu.shuffle xor %x, %c1, %c32 : f32
  return
}

// -----

// Device code outside the kernel has no thread to run on.
func.func @kernel() {
  return
}
func.func private @callee() -> index {
  // expected-error @+1 {{'gpu.thread_id' op outside a kernel cannot be emulated on the host (inline @callee into its kernel)}}
  %t = gpu.thread_id x {xla.range = [0 : index, 31 : index]}
  return %t : index
}

// -----

// expected-error @+1 {{xla-emulate-grid: kernel @returns: a kernel returns nothing (run xla-lower-tensors first)}}
func.func @returns() -> index attributes {xla.entry} {
  %c0 = arith.constant 0 : index
  return %c0 : index
}

// -----

llvm.mlir.global private @shared_0() {addr_space = 3 : i32, alignment = 16 : i64} : !llvm.array<4 x f32>
func.func @shared_in_address_space_3() {
  %s = llvm.mlir.addressof @shared_0 : !llvm.ptr<3>
  // expected-error @+1 {{'llvm.load' op uses shared memory @shared_0 in address space 3; the host emulation needs it cast to the generic address space first}}
  %v = llvm.load %s : !llvm.ptr<3> -> f32
  return
}

// -----

// The kernel ABI: bare pointers only (xla-lower-tensors has run).
// expected-error @+1 {{xla-emulate-grid: kernel @tensor_argument: kernel arguments must be !llvm.ptr (run xla-lower-tensors first), got 'tensor<4xf32>'}}
func.func @tensor_argument(%t: tensor<4xf32>) {
  return
}

// -----

func.func private @add(%a: f32, %b: f32) -> f32 {
  %s = arith.addf %a, %b : f32
  return %s : f32
}
func.func @shuffle_in_if(%p: !llvm.ptr) {
  %tid = gpu.thread_id x {xla.range = [0 : index, 31 : index]}
  %x = llvm.load %p : !llvm.ptr -> f32
  %c = llvm.load %p : !llvm.ptr -> i1
  scf.if %c {
    // expected-error @+1 {{'xla_gpu.shuffle_reduce' op inside 'scf.if' cannot be emulated on the host: the kernel is cut into phases at warp shuffles, which must be at the top level of the kernel}}
    %r = xla_gpu.shuffle_reduce(%x) to 16 combiner=@add : f32
    llvm.store %r, %p : f32, !llvm.ptr
  }
  return
}

// -----

// A butterfly to distance 8 exchanges within groups of 16 lanes: a block of
// 40 threads has a partial group, with no defined shuffle on the GPU.
func.func private @add(%a: f32, %b: f32) -> f32 {
  %s = arith.addf %a, %b : f32
  return %s : f32
}
func.func @partial_group(%p: !llvm.ptr) {
  %tid = gpu.thread_id x {xla.range = [0 : index, 39 : index]}
  %x = llvm.load %p : !llvm.ptr -> f32
  // expected-error @+1 {{'xla_gpu.shuffle_reduce' op needs whole groups of 16 lanes (max_distance 8), but the block has 40 threads, not a multiple of 16 (the lanes a partial group lacks have no values to shuffle on the GPU either)}}
  %r = xla_gpu.shuffle_reduce(%x) to 8 combiner=@add : f32
  llvm.store %r, %p : f32, !llvm.ptr
  return
}

// -----

// To distance 16 the groups are warps: 48 threads are one and a half.
func.func private @add(%a: f32, %b: f32) -> f32 {
  %s = arith.addf %a, %b : f32
  return %s : f32
}
func.func @partial_warp(%p: !llvm.ptr) {
  %tid = gpu.thread_id x {xla.range = [0 : index, 47 : index]}
  %x = llvm.load %p : !llvm.ptr -> f32
  // expected-error @+1 {{'xla_gpu.shuffle_reduce' op needs whole warps, but the block has 48 threads, not a multiple of 32 (the lanes a partial group lacks have no values to shuffle on the GPU either)}}
  %r = xla_gpu.shuffle_reduce(%x) to 16 combiner=@add : f32
  llvm.store %r, %p : f32, !llvm.ptr
  return
}

// -----

func.func private @add(%a: f32, %b: f32) -> f32 {
  %s = arith.addf %a, %b : f32
  return %s : f32
}
func.func @kernel() {
  return
}
func.func private @not_a_kernel(%x: f32) -> f32 {
  // expected-error @+1 {{'xla_gpu.shuffle_reduce' op outside a kernel cannot be emulated on the host (inline @not_a_kernel into its kernel)}}
  %r = xla_gpu.shuffle_reduce(%x) to 16 combiner=@add : f32
  return %r : f32
}
