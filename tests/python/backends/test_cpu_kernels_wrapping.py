"""Power-of-two remainders that wrap inside a thread loop on the cpu
target: XLA's rotated shared-memory tiles (slot = (column + row) mod 32,
wrapping inside a warp). LLVM's loop vectorizer took the addresses built
from such a remainder for consecutive ones (wrong results at -O1..-O3);
xla-emulate-grid rewrites each remainder it can bound as a select and keeps
a loop with one it cannot bound scalar. Checked against numpy and the
reference interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import xla_gpu
from xla_gpu import hlo
from xla_gpu.analysis.fusion import select_fusion
from xla_gpu.backends import cpu
from xla_gpu.hlo.numerics import compare, random_inputs

# A 32x32 i32 transpose through a shared tile whose columns are rotated by
# the row: 4 warps of 32 lanes, 8 rows per thread, index math in i32 with
# overflow flags as the emitters write it.
_ROTATED_TRANSPOSE = """
llvm.mlir.global private @tile() {addr_space = 3 : i32, alignment = 16 : i64} : !llvm.array<1024 x i32>
func.func @rotated_transpose(%in: !llvm.ptr, %out: !llvm.ptr) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %c4_i32 = arith.constant 4 : i32
  %c32_i32 = arith.constant 32 : i32
  %tile3 = llvm.mlir.addressof @tile : !llvm.ptr<3>
  %tile = llvm.addrspacecast %tile3 : !llvm.ptr<3> to !llvm.ptr
  %tid = gpu.thread_id x {xla.range = [0 : index, 127 : index]}
  %t = arith.index_castui %tid : index to i32
  %warp = arith.divui %t, %c32_i32 : i32
  %lane = arith.remui %t, %c32_i32 : i32
  scf.for %i = %c0 to %c8 step %c1 {
    %i32 = arith.index_castui %i : index to i32
    %r4 = arith.muli %i32, %c4_i32 overflow<nsw, nuw> : i32
    %row = arith.addi %r4, %warp overflow<nsw, nuw> : i32
    %rowbase = arith.muli %row, %c32_i32 overflow<nsw, nuw> : i32
    %src = arith.addi %rowbase, %lane overflow<nsw, nuw> : i32
    %p = llvm.getelementptr inbounds %in[%src] : (!llvm.ptr, i32) -> !llvm.ptr, i32
    %v = llvm.load %p : !llvm.ptr -> i32
    %sum = arith.addi %lane, %row overflow<nsw, nuw> : i32
    %slot = arith.remui %sum, %c32_i32 : i32
    %dst = arith.addi %rowbase, %slot overflow<nsw, nuw> : i32
    %q = llvm.getelementptr inbounds %tile[%dst] : (!llvm.ptr, i32) -> !llvm.ptr, i32
    llvm.store %v, %q : i32, !llvm.ptr
  }
  gpu.barrier
  scf.for %i = %c0 to %c8 step %c1 {
    %i32 = arith.index_castui %i : index to i32
    %r4 = arith.muli %i32, %c4_i32 overflow<nsw, nuw> : i32
    %row = arith.addi %r4, %warp overflow<nsw, nuw> : i32
    %colbase = arith.muli %lane, %c32_i32 overflow<nsw, nuw> : i32
    %sum = arith.addi %lane, %row overflow<nsw, nuw> : i32
    %slot = arith.remui %sum, %c32_i32 : i32
    %src = arith.addi %colbase, %slot overflow<nsw, nuw> : i32
    %p = llvm.getelementptr inbounds %tile[%src] : (!llvm.ptr, i32) -> !llvm.ptr, i32
    %v = llvm.load %p : !llvm.ptr -> i32
    %rowbase = arith.muli %row, %c32_i32 overflow<nsw, nuw> : i32
    %dst = arith.addi %rowbase, %lane overflow<nsw, nuw> : i32
    %q = llvm.getelementptr inbounds %out[%dst] : (!llvm.ptr, i32) -> !llvm.ptr, i32
    llvm.store %v, %q : i32, !llvm.ptr
  }
  return
}
"""

# Lane l writes its value to tile slot (3 l) mod 32 (its operand reaches
# 93: not bounded below 64, the loop stays scalar), and reads slot l back.
_SCATTERED = """
llvm.mlir.global private @tile() {addr_space = 3 : i32, alignment = 16 : i64} : !llvm.array<32 x i32>
func.func @scattered(%in: !llvm.ptr, %out: !llvm.ptr) {
  %c3_i32 = arith.constant 3 : i32
  %c32_i32 = arith.constant 32 : i32
  %tile3 = llvm.mlir.addressof @tile : !llvm.ptr<3>
  %tile = llvm.addrspacecast %tile3 : !llvm.ptr<3> to !llvm.ptr
  %tid = gpu.thread_id x {xla.range = [0 : index, 31 : index]}
  %lane = arith.index_castui %tid : index to i32
  %p = llvm.getelementptr inbounds %in[%lane] : (!llvm.ptr, i32) -> !llvm.ptr, i32
  %v = llvm.load %p : !llvm.ptr -> i32
  %l3 = arith.muli %lane, %c3_i32 overflow<nsw, nuw> : i32
  %slot = arith.remui %l3, %c32_i32 : i32
  %q = llvm.getelementptr inbounds %tile[%slot] : (!llvm.ptr, i32) -> !llvm.ptr, i32
  llvm.store %v, %q : i32, !llvm.ptr
  gpu.barrier
  %r = llvm.getelementptr inbounds %tile[%lane] : (!llvm.ptr, i32) -> !llvm.ptr, i32
  %w = llvm.load %r : !llvm.ptr -> i32
  %o = llvm.getelementptr inbounds %out[%lane] : (!llvm.ptr, i32) -> !llvm.ptr, i32
  llvm.store %w, %o : i32, !llvm.ptr
  return
}
"""


@pytest.mark.parametrize("opt_level", [0, 1, 2, 3])
def test_rotated_tile_transpose_at_every_opt_level(opt_level):
    kernel = cpu.compile_module(_ROTATED_TRANSPOSE, entry="rotated_transpose",
                                threads=128, blocks=1, opt_level=opt_level)
    assert "arith.remui" not in kernel.llvm_ir and "urem" not in kernel.llvm_ir
    x = np.random.default_rng(7).integers(-2**31, 2**31 - 1, (32, 32), dtype=np.int32)
    out = np.zeros_like(x)
    kernel.run([x, out])
    np.testing.assert_array_equal(out, x.T)


def test_unbounded_wrapping_remainder_keeps_the_loop_scalar():
    kernel = cpu.compile_module(_SCATTERED, entry="scattered", threads=32, blocks=1)
    assert "disable = true" in kernel.llvm_ir
    x = np.arange(100, 132, dtype=np.int32)
    out = np.zeros_like(x)
    kernel.run([x, out])
    want = np.zeros_like(x)
    want[(3 * np.arange(32)) % 32] = x
    np.testing.assert_array_equal(out, want)


_PACKED = """HloModule m
fused {
  p = s16[64,64] parameter(0)
  ROOT t = s16[64,64] transpose(p), dimensions={1,0}
}
"""


def test_packed_transpose_with_xla_rotation_matches_the_interpreter(monkeypatch):
    # The packed transpose's tile with XLA's rotation instead of its own
    # XOR swizzle: the emitted kernel that was miscompiled.
    from mlir.dialects import arith
    from xla_gpu.emitters import packed_transpose

    def rotated_slot(self, row_group, column_group):
        total = arith.addi(column_group, row_group)
        return arith.remui(total, packed_transpose._index(32))

    monkeypatch.setattr(packed_transpose.PackedTransposeEmitter, "_slot", rotated_slot)
    exe = xla_gpu.compile(_PACKED, target="cpu", cache=False)
    comp = select_fusion(hlo.parse_module(_PACKED)).computation
    inputs = random_inputs(comp, seed=5)
    (want,) = hlo.evaluate(comp, *inputs)
    (got,) = exe.run(*inputs)
    assert compare(np.asarray(got), want, "s16", 0) is None
