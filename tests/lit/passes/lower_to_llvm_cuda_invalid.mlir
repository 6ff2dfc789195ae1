// Launches CUDA cannot make: xla-lower-to-llvm refuses them at compile time.
// RUN: xla-gpu-opt %s --split-input-file --xla-lower-to-llvm --verify-diagnostics

func.func @huge_grid(%p: !llvm.ptr) attributes {xla.entry} {
  // expected-error @+1 {{'gpu.block_id' op a grid of 34359738368 blocks exceeds CUDA's limit of 2147483647 blocks in x (only the loop emitter splits such a grid over y)}}
  %b = gpu.block_id x {xla.range = [0 : index, 34359738367 : index]}
  %i = arith.index_castui %b : index to i64
  %q = llvm.getelementptr inbounds %p[%i] : (!llvm.ptr, i64) -> !llvm.ptr, f32
  %c = arith.constant 0.0 : f32
  llvm.store %c, %q : f32, !llvm.ptr
  return
}

// -----

func.func @huge_grid_y(%p: !llvm.ptr) attributes {xla.entry} {
  %b = gpu.block_id x {xla.range = [0 : index, 1023 : index]}
  // expected-error @+1 {{'gpu.block_id' op a grid of 70000 blocks in y exceeds CUDA's limit of 65535}}
  %y = gpu.block_id y {xla.range = [0 : index, 69999 : index]}
  %s = arith.addi %b, %y : index
  %i = arith.index_castui %s : index to i64
  %q = llvm.getelementptr inbounds %p[%i] : (!llvm.ptr, i64) -> !llvm.ptr, f32
  %c = arith.constant 0.0 : f32
  llvm.store %c, %q : f32, !llvm.ptr
  return
}

// -----

func.func @huge_block(%p: !llvm.ptr) attributes {xla.entry} {
  // expected-error @+1 {{'gpu.thread_id' op a block of 2048 threads exceeds CUDA's limit of 1024 threads per block}}
  %t = gpu.thread_id x {xla.range = [0 : index, 2047 : index]}
  %i = arith.index_castui %t : index to i64
  %q = llvm.getelementptr inbounds %p[%i] : (!llvm.ptr, i64) -> !llvm.ptr, f32
  %c = arith.constant 0.0 : f32
  llvm.store %c, %q : f32, !llvm.ptr
  return
}
