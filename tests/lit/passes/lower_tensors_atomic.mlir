// xla-lower-tensors: xla_gpu.atomic_rmw. Combiners LLVM has an atomicrmw
// for become that (monotonic), a value independent of %current an
// exchange; anything else a compare-and-swap loop. Elements narrower than
// 32 bits go through their aligned 32-bit word.
// RUN: xla-gpu-opt %s --split-input-file --xla-lower-tensors | FileCheck %s

// CHECK-LABEL: func.func @hardware(
// CHECK-SAME: %[[F:[a-z0-9]+]]: !llvm.ptr, %[[D:[a-z0-9]+]]: !llvm.ptr, %[[I:[a-z0-9]+]]: !llvm.ptr, %[[L:[a-z0-9]+]]: !llvm.ptr, %{{.*}}: index, %[[V:[a-z0-9]+]]: f32, %[[W:[a-z0-9]+]]: f64, %[[K:[a-z0-9]+]]: i32, %[[M:[a-z0-9]+]]: i64)
// CHECK: %[[PF:.*]] = llvm.getelementptr inbounds %[[F]][%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, f32
// CHECK: llvm.atomicrmw fadd %[[PF]], %[[V]] monotonic : !llvm.ptr, f32
// CHECK: llvm.atomicrmw fadd %{{.*}}, %[[W]] monotonic : !llvm.ptr, f64
// CHECK: llvm.atomicrmw fmaximum %{{.*}}, %[[V]] monotonic : !llvm.ptr, f32
// CHECK: llvm.atomicrmw fmin %{{.*}}, %[[W]] monotonic : !llvm.ptr, f64
// CHECK: llvm.atomicrmw add %{{.*}}, %[[K]] monotonic : !llvm.ptr, i32
// CHECK: llvm.atomicrmw umax %{{.*}}, %[[M]] monotonic : !llvm.ptr, i64
// CHECK: llvm.atomicrmw min %{{.*}}, %[[K]] monotonic : !llvm.ptr, i32
// CHECK: llvm.atomicrmw _xor %{{.*}}, %[[M]] monotonic : !llvm.ptr, i64
// Ops independent of %current run once, before the atomic.
// CHECK: %[[C7:.*]] = arith.constant 7 : i32
// CHECK: %[[KC:.*]] = arith.addi %[[K]], %[[C7]] : i32
// CHECK: llvm.atomicrmw _or %{{.*}}, %[[KC]] monotonic : !llvm.ptr, i32
// A value that ignores %current: an exchange.
// CHECK: llvm.atomicrmw xchg %{{.*}}, %[[W]] monotonic : !llvm.ptr, f64
// CHECK-NOT: llvm.cmpxchg
// CHECK: return{{$}}
func.func @hardware(%f: tensor<64xf32>, %d: tensor<64xf64>, %i: tensor<64xi32>, %l: tensor<64xi64>,
                    %j: index, %v: f32, %w: f64, %k: i32, %m: i64)
    -> (tensor<64xf32>, tensor<64xf64>, tensor<64xi32>, tensor<64xi64>) {
  %f1 = xla_gpu.atomic_rmw %f[%j] : tensor<64xf32> {
  ^bb0(%c: f32):
    %n = arith.addf %c, %v : f32
    xla_gpu.yield %n : f32
  }
  %d1 = xla_gpu.atomic_rmw %d[%j] : tensor<64xf64> {
  ^bb0(%c: f64):
    %n = arith.addf %w, %c : f64
    xla_gpu.yield %n : f64
  }
  %f2 = xla_gpu.atomic_rmw %f1[%j] : tensor<64xf32> {
  ^bb0(%c: f32):
    %n = arith.maximumf %c, %v : f32
    xla_gpu.yield %n : f32
  }
  %d2 = xla_gpu.atomic_rmw %d1[%j] : tensor<64xf64> {
  ^bb0(%c: f64):
    %n = arith.minnumf %c, %w : f64
    xla_gpu.yield %n : f64
  }
  %i1 = xla_gpu.atomic_rmw %i[%j] : tensor<64xi32> {
  ^bb0(%c: i32):
    %n = arith.addi %c, %k : i32
    xla_gpu.yield %n : i32
  }
  %l1 = xla_gpu.atomic_rmw %l[%j] : tensor<64xi64> {
  ^bb0(%c: i64):
    %n = arith.maxui %m, %c : i64
    xla_gpu.yield %n : i64
  }
  %i2 = xla_gpu.atomic_rmw %i1[%j] : tensor<64xi32> {
  ^bb0(%c: i32):
    %n = arith.minsi %c, %k : i32
    xla_gpu.yield %n : i32
  }
  %l2 = xla_gpu.atomic_rmw %l1[%j] : tensor<64xi64> {
  ^bb0(%c: i64):
    %n = arith.xori %c, %m : i64
    xla_gpu.yield %n : i64
  }
  %i3 = xla_gpu.atomic_rmw %i2[%j] : tensor<64xi32> {
  ^bb0(%c: i32):
    %c7 = arith.constant 7 : i32
    %k7 = arith.addi %k, %c7 : i32
    %n = arith.ori %c, %k7 : i32
    xla_gpu.yield %n : i32
  }
  %d3 = xla_gpu.atomic_rmw %d2[%j] : tensor<64xf64> {
  ^bb0(%c: f64):
    xla_gpu.yield %w : f64
  }
  return %f2, %d3, %i3, %l2 : tensor<64xf32>, tensor<64xf64>, tensor<64xi32>, tensor<64xi64>
}

// -----

// Anything else: a CAS loop that runs the region on the value seen.
// CHECK-LABEL: func.func @cas_loop(
// CHECK-SAME: %[[T:[a-z0-9]+]]: !llvm.ptr, %{{.*}}: index, %[[V:[a-z0-9]+]]: f32)
// CHECK: %[[P:.*]] = llvm.getelementptr inbounds %[[T]][%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, f32
// CHECK: %[[INIT:.*]] = llvm.load %[[P]] atomic monotonic {alignment = 4 : i64} : !llvm.ptr -> i32
// CHECK: scf.while (%[[OLD:.*]] = %[[INIT]]) : (i32) -> i32 {
// CHECK-NEXT: %[[CUR:.*]] = arith.bitcast %[[OLD]] : i32 to f32
// CHECK-NEXT: %[[MUL:.*]] = arith.mulf %[[CUR]], %[[V]] : f32
// CHECK-NEXT: %[[NEW:.*]] = arith.bitcast %[[MUL]] : f32 to i32
// CHECK-NEXT: %[[PAIR:.*]] = llvm.cmpxchg %[[P]], %[[OLD]], %[[NEW]] monotonic monotonic : !llvm.ptr, i32
// CHECK-NEXT: %[[SEEN:.*]] = llvm.extractvalue %[[PAIR]][0]
// CHECK-NEXT: %[[OK:.*]] = llvm.extractvalue %[[PAIR]][1]
// CHECK: %[[RETRY:.*]] = arith.xori %[[OK]], %{{.*}} : i1
// CHECK-NEXT: scf.condition(%[[RETRY]]) %[[SEEN]] : i32
// CHECK-NEXT: } do {
// CHECK-NEXT: ^bb0(%[[X:.*]]: i32):
// CHECK-NEXT: scf.yield %[[X]] : i32
// CHECK: return{{$}}
func.func @cas_loop(%t: tensor<64xf32>, %j: index, %v: f32) -> tensor<64xf32> {
  %r = xla_gpu.atomic_rmw %t[%j] : tensor<64xf32> {
  ^bb0(%c: f32):
    %n = arith.mulf %c, %v : f32
    xla_gpu.yield %n : f32
  }
  return %r : tensor<64xf32>
}

// -----

// A region with control flow, and one with two steps: CAS loops too.
// CHECK-LABEL: func.func @cas_regions(
// CHECK: scf.while
// CHECK: scf.if
// CHECK: llvm.cmpxchg %{{.*}} monotonic monotonic : !llvm.ptr, i64
// CHECK: scf.while
// CHECK: arith.addi
// CHECK: arith.muli
// CHECK: llvm.cmpxchg %{{.*}} monotonic monotonic : !llvm.ptr, i64
// CHECK-NOT: llvm.atomicrmw
func.func @cas_regions(%t: tensor<64xi64>, %j: index, %v: i64, %p: i1) -> tensor<64xi64> {
  %r = xla_gpu.atomic_rmw %t[%j] : tensor<64xi64> {
  ^bb0(%c: i64):
    %n = scf.if %p -> (i64) {
      scf.yield %c : i64
    } else {
      scf.yield %v : i64
    }
    xla_gpu.yield %n : i64
  }
  %s = xla_gpu.atomic_rmw %r[%j] : tensor<64xi64> {
  ^bb0(%c: i64):
    %a = arith.addi %c, %v : i64
    %m = arith.muli %a, %v : i64
    xla_gpu.yield %m : i64
  }
  return %s : tensor<64xi64>
}

// -----

// 16 bits: the CAS loop works on the aligned word holding the element.
// CHECK-LABEL: func.func @bf16_add(
// CHECK-SAME: %[[T:[a-z0-9]+]]: !llvm.ptr, %{{.*}}: index, %[[V:[a-z0-9]+]]: bf16)
// CHECK: %[[P:.*]] = llvm.getelementptr inbounds %[[T]][%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, bf16
// CHECK: %[[ADDR:.*]] = llvm.ptrtoint %[[P]] : !llvm.ptr to i64
// CHECK: %[[OFF:.*]] = arith.andi %[[ADDR]], %{{.*}} : i64
// CHECK: %[[BACK:.*]] = arith.subi %{{.*}}, %[[OFF]] : i64
// CHECK: %[[WORD:.*]] = llvm.getelementptr %[[P]][%[[BACK]]] : (!llvm.ptr, i64) -> !llvm.ptr, i8
// CHECK: %[[SH64:.*]] = arith.shli %[[OFF]], %{{.*}} : i64
// CHECK: %[[SHIFT:.*]] = arith.trunci %[[SH64]] : i64 to i32
// CHECK: %[[ONES:.*]] = arith.constant 65535 : i32
// CHECK: %[[MASK:.*]] = arith.shli %[[ONES]], %[[SHIFT]] : i32
// CHECK: %[[OTHERS:.*]] = arith.xori %[[MASK]], %{{.*}} : i32
// CHECK: %[[INIT:.*]] = llvm.load %[[WORD]] atomic monotonic {alignment = 4 : i64} : !llvm.ptr -> i32
// CHECK: scf.while (%[[OLD:.*]] = %[[INIT]]) : (i32) -> i32 {
// CHECK-NEXT: %[[S:.*]] = arith.shrui %[[OLD]], %[[SHIFT]] : i32
// CHECK-NEXT: %[[E:.*]] = arith.trunci %[[S]] : i32 to i16
// CHECK-NEXT: %[[CUR:.*]] = arith.bitcast %[[E]] : i16 to bf16
// CHECK-NEXT: %[[SUM:.*]] = arith.addf %[[CUR]], %[[V]] : bf16
// CHECK-NEXT: %[[SB:.*]] = arith.bitcast %[[SUM]] : bf16 to i16
// CHECK-NEXT: %[[SW:.*]] = arith.extui %[[SB]] : i16 to i32
// CHECK-NEXT: %[[PLACED:.*]] = arith.shli %[[SW]], %[[SHIFT]] : i32
// CHECK-NEXT: %[[KEEP:.*]] = arith.andi %[[OLD]], %[[OTHERS]] : i32
// CHECK-NEXT: %[[NEW:.*]] = arith.ori %[[KEEP]], %[[PLACED]] : i32
// CHECK-NEXT: llvm.cmpxchg %[[WORD]], %[[OLD]], %[[NEW]] monotonic monotonic : !llvm.ptr, i32
func.func @bf16_add(%t: tensor<64xbf16>, %j: index, %v: bf16) -> tensor<64xbf16> {
  %r = xla_gpu.atomic_rmw %t[%j] : tensor<64xbf16> {
  ^bb0(%c: bf16):
    %n = arith.addf %c, %v : bf16
    xla_gpu.yield %n : bf16
  }
  return %r : tensor<64xbf16>
}

// -----

// Narrow or/and/xor: the same atomic on the word, the other bytes kept
// (and: ones there).
// CHECK-LABEL: func.func @narrow_bitwise(
// CHECK-SAME: %[[T:[a-z0-9]+]]: !llvm.ptr, %[[B:[a-z0-9]+]]: !llvm.ptr, %{{.*}}: index, %[[V:[a-z0-9]+]]: i8, %[[P:[a-z0-9]+]]: i1)
// CHECK: %[[SHIFT:.*]] = arith.trunci %{{.*}} : i64 to i32
// CHECK: %[[MASK:.*]] = arith.shli %{{.*}}, %[[SHIFT]] : i32
// CHECK: %[[OTHERS:.*]] = arith.xori %[[MASK]], %{{.*}} : i32
// CHECK: %[[W:.*]] = arith.extui %[[V]] : i8 to i32
// CHECK: %[[PLACED:.*]] = arith.shli %[[W]], %[[SHIFT]] : i32
// CHECK: %[[AND:.*]] = arith.ori %[[PLACED]], %[[OTHERS]] : i32
// CHECK: llvm.atomicrmw _and %{{.*}}, %[[AND]] monotonic : !llvm.ptr, i32
// i1 is a byte in memory.
// CHECK: %[[PB:.*]] = arith.extui %[[P]] : i1 to i8
// CHECK: %[[PW:.*]] = arith.extui %[[PB]] : i8 to i32
// CHECK: %[[PP:.*]] = arith.shli %[[PW]], %{{.*}} : i32
// CHECK: llvm.atomicrmw _or %{{.*}}, %[[PP]] monotonic : !llvm.ptr, i32
// CHECK-NOT: llvm.cmpxchg
func.func @narrow_bitwise(%t: tensor<64xi8>, %b: tensor<64xi1>, %j: index, %v: i8, %p: i1) -> (tensor<64xi8>, tensor<64xi1>) {
  %r = xla_gpu.atomic_rmw %t[%j] : tensor<64xi8> {
  ^bb0(%c: i8):
    %n = arith.andi %c, %v : i8
    xla_gpu.yield %n : i8
  }
  %s = xla_gpu.atomic_rmw %b[%j] : tensor<64xi1> {
  ^bb0(%c: i1):
    %n = arith.ori %p, %c : i1
    xla_gpu.yield %n : i1
  }
  return %r, %s : tensor<64xi8>, tensor<64xi1>
}

// -----

// Narrow add and exchange: CAS on the word; i1 through its byte.
// CHECK-LABEL: func.func @narrow_cas(
// CHECK: llvm.load %{{.*}} atomic monotonic {alignment = 4 : i64} : !llvm.ptr -> i32
// CHECK: scf.while
// CHECK: arith.trunci %{{.*}} : i32 to i16
// CHECK: arith.addi %{{.*}} : i16
// CHECK: llvm.cmpxchg %{{.*}} : !llvm.ptr, i32
// CHECK: scf.while
// CHECK: %[[BIT:.*]] = arith.trunci %{{.*}} : i32 to i8
// CHECK: arith.trunci %[[BIT]] : i8 to i1
// CHECK: arith.extui %{{.*}} : i1 to i8
// CHECK: llvm.cmpxchg %{{.*}} : !llvm.ptr, i32
// CHECK-NOT: llvm.atomicrmw
func.func @narrow_cas(%t: tensor<64xi16>, %b: tensor<64xi1>, %j: index, %v: i16, %p: i1) -> (tensor<64xi16>, tensor<64xi1>) {
  %r = xla_gpu.atomic_rmw %t[%j] : tensor<64xi16> {
  ^bb0(%c: i16):
    %n = arith.addi %c, %v : i16
    xla_gpu.yield %n : i16
  }
  %s = xla_gpu.atomic_rmw %b[%j] : tensor<64xi1> {
  ^bb0(%c: i1):
    xla_gpu.yield %p : i1
  }
  return %r, %s : tensor<64xi16>, tensor<64xi1>
}

// -----

// Writing back the current value changes nothing: no atomic at all. The
// argument counts as written (its loads are not invariant).
// CHECK-LABEL: func.func @unchanged(
// CHECK: llvm.load %{{.*}} : !llvm.ptr -> f32
// CHECK-NOT: llvm.atomicrmw
// CHECK-NOT: llvm.cmpxchg
// CHECK: return{{$}}
func.func @unchanged(%t: tensor<64xf32>, %o: tensor<64xf32>, %j: index) -> (tensor<64xf32>, tensor<64xf32>) {
  %e = tensor.extract %t[%j] : tensor<64xf32>
  %r = xla_gpu.atomic_rmw %t[%j] : tensor<64xf32> {
  ^bb0(%c: f32):
    xla_gpu.yield %c : f32
  }
  %w = tensor.insert %e into %o[%j] : tensor<64xf32>
  return %r, %w : tensor<64xf32>, tensor<64xf32>
}

// -----

// In a loop over an iteration argument, and in an scf.if (a scatter's
// bounds check): the pointer is carried, as tensors are.
// CHECK-LABEL: func.func @in_loop(
// CHECK-SAME: %[[T:[a-z0-9]+]]: !llvm.ptr
// CHECK: scf.for %{{.*}} iter_args(%[[IT:.*]] = %[[T]]) -> (!llvm.ptr) {
// CHECK: scf.if %{{.*}} -> (!llvm.ptr) {
// CHECK: %[[P:.*]] = llvm.getelementptr inbounds %[[IT]]
// CHECK: llvm.atomicrmw fadd %[[P]]
// CHECK: scf.yield %[[IT]] : !llvm.ptr
func.func @in_loop(%t: tensor<64xf32>, %v: f32, %p: i1) -> tensor<64xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %r = scf.for %i = %c0 to %c64 step %c1 iter_args(%it = %t) -> (tensor<64xf32>) {
    %n = scf.if %p -> (tensor<64xf32>) {
      %u = xla_gpu.atomic_rmw %it[%i] : tensor<64xf32> {
      ^bb0(%c: f32):
        %s = arith.addf %c, %v : f32
        xla_gpu.yield %s : f32
      }
      scf.yield %u : tensor<64xf32>
    } else {
      scf.yield %it : tensor<64xf32>
    }
    scf.yield %n : tensor<64xf32>
  }
  return %r : tensor<64xf32>
}
