"""The GEMM emitter: a dot fusion (XLA:GPU's `__triton_gemm`: the dot, its
operand prologues and its elementwise epilogue) as one tiled kernel.

Each block computes a block_m x block_n tile of one batch's output (the
blocks: tiles along n fastest, then m, then the batch). Its threads each
own a tm x tn register tile (rows ty + i * TY, columns tx + j * TX of the
block's tile). The contracting dimension runs in steps of block_k:

    %acc = (tm * tn accumulators, f32 for 16- and 8-bit floats, s32 for
            s8 x s8 -> s32, the result type otherwise)
    scf.for %kt = 0 to k_steps iter_args(%acc, %a = %a_tile, %b = %b_tile) {
      %a1 = xla_gpu.loop (%th, %bl, %kt)[%s] -> (k, m, batch, m, k) {
              <lhs prologue at (batch, m, k): converts, broadcasts,
               transposes... elementally; 0 outside the dot>
              tensor.insert into %a[k, m] }          // [block_k, block_m + pad]
      %b1 = <the same for the rhs tile>              // [block_k, block_n + pad]
      %a2, %b2 = xla_gpu.sync_threads %a1, %b1
      %acc1 = scf.for %kk = 0 to block_k {            // from shared memory
                acc[i][j] += a2[kk, row_i] * b2[kk, col_j] }
      %a3, %b3 = xla_gpu.sync_threads %a2, %b2        // before the next loads
    }
    <per accumulator: the epilogue (scale, bias, activation, convert...)
     on the value converted to the dot's type, each output written at its
     index (xla_gpu.predicated_insert at the edges of the dot)>

The tiles are k-major, so that the threads of a warp read consecutive
elements of one k (padded rows: the loads along k write different banks).
Operand tiles hold the operand's own elements (s8, bf16...) where they are
plain bytes, converted to the accumulator when read.

Tensor cores (cuda; `analysis.gemm.MmaPlan`): for f16/bf16 operands (or
an 8-bit integer one converted to them by the tile loads: the seed's s8 x
bf16) accumulating in f32, and s8 x s8 -> s32, the tile product is warp-wide
`nvvm.mma.sync` (m16n8k16, m16n8k32 for s8; row.col): the block's warps
split its tile into warp tiles of whole instruction tiles, the operand
tiles are free-major and 1-d (row * (block_k + 16 bytes) + k: a fragment
register's elements adjacent, one 32-bit shared load each, the 8 rows a
load reads in 8 different bank groups), and each lane's accumulators sit
where PTX's fragment layout puts them (rows lane / 4 and + 8, columns
2 * (lane % 4) and + 1 of every instruction tile), which the epilogue
writes as it writes the scalar path's register tile. The host has no
warp-wide instruction: with `tensor_cores=True` (tests) it runs the same
kernel with each mma computed lane by lane from the registers the other
lanes loaded, found through the documented layouts, so that the cpu
target checks the fragment loads' index arithmetic and packing.

On the cpu target (grid emulation) small GEMMs
(`analysis.gemm.HOST_SHARED_MAX_MACS`) run the GPU's code, its k loop
around the two phases of a step (unrolled for one or two steps); larger
ones have each
thread read its operands directly (the prologue at each element, no shared
memory, `staging="registers"`): a loop over the steps of block_k, which
the emulation runs over all threads per step, around a loop over the
step's k with the thread's accumulators in registers, its columns side by
side (a SIMD vector).

split_k is done at the HLO level (`hlo.passes.gemm_fusion.split_k_rewrite`):
a split fusion's dot has the split as a batch dimension, so it is one more
batch here and a reduction kernel sums the partials.
"""

from __future__ import annotations


from mlir import ir
from mlir.dialects import arith, llvm, math, nvvm, scf, tensor, vector

from ..analysis.gemm import GemmPlan, GemmTiling, plan_gemm
from ..analysis.indexing import const, delinearize, dim, floordiv, indexing_map, linearize, sym
from ..dialects import xla_gpu
from ..hlo.shape import bit_width as bit_width_of, is_float
from .base import KernelEmitter, LaunchDims
from .elemental import FunctionEmitter, convert
from .types import element_type, scalar_attr

__all__ = ["GemmEmitter"]


def _index(value: int) -> ir.Value:
    return arith.constant(ir.IndexType.get(), value)


def _zero(t: str) -> ir.Value:
    return arith.constant(element_type(t), scalar_attr(t, 0))


def _prologue_members(dot) -> set[int]:
    """id() of the dot's operands and everything they read."""
    seen: set[int] = set()
    stack = list(dot.operands)
    while stack:
        inst = stack.pop()
        if id(inst) in seen:
            continue
        seen.add(id(inst))
        stack.extend(inst.operands)
    return seen


class GemmEmitter(KernelEmitter):
    """The tiled GEMM (see the module text). `staging` forces "shared"
    or "registers" (tests); by default the plan decides."""

    name = "gemm"

    def __init__(self, fusion, staging: str | None = None,
                 tensor_cores: bool | None = None):
        super().__init__(fusion)
        self.dot = fusion.heroes[0]
        tiling = fusion.config if isinstance(fusion.config, GemmTiling) else None
        device = getattr(fusion, "device", None)
        host = bool(device is not None and device.host_emulation)
        capability = device.compute_capability if device is not None else 90
        self.plan: GemmPlan = plan_gemm(self.dot, tiling, host=host, staging=staging,
                                        tensor_cores=tensor_cores,
                                        compute_capability=capability)
        # The host runs no warp-wide instruction: each lane computes its
        # mma results from the registers the other lanes loaded.
        self._emulate_mma = host
        self.notes.extend(self.plan.notes)
        self._prologue = _prologue_members(self.dot)
        self._operands = [o for o in self.dot.operands
                          if o.opcode not in ("parameter", "constant")]

    # -- launch and partitioning -------------------------------------------------------
    def launch_dims(self) -> LaunchDims:
        # The operand tiles are static shared memory (no dynamic bytes).
        return LaunchDims(self.plan.threads, self.plan.blocks)

    def root_groups(self):
        # The prologues are functions (called per tile element); the epilogue
        # is emitted inline on each accumulator.
        return [[o] for o in dict.fromkeys(self._operands)]

    def is_subgraph_root(self, inst) -> bool:
        return any(inst is o for o in self._operands)

    def is_excluded(self, inst) -> bool:
        return id(inst) not in self._prologue

    # -- index maps ----------------------------------------------------------------------
    def _block_exprs(self, bl):
        """(batch, tile along m, tile along n) of block `bl`."""
        p = self.plan
        per_batch = p.tiles_m * p.tiles_n
        return (floordiv(bl, per_batch) if p.dims.B > 1 else None,
                floordiv(bl, p.tiles_n) % p.tiles_m if p.tiles_m > 1 else None,
                bl % p.tiles_n if p.tiles_n > 1 else None)

    def _operand_map(self, operand: int) -> ir.Attribute:
        """(batch, free, contracting) linear indices -> operand index: free
        is m for the lhs and n for the rhs."""
        d = self.plan.dims
        if operand == 0:
            batch, free, contracting = d.lhs_batch, d.lhs_free, d.lhs_contracting
            free_sizes, free_size = d.m_sizes, d.M
        else:
            batch, free, contracting = d.rhs_batch, d.rhs_free, d.rhs_contracting
            free_sizes, free_size = d.n_sizes, d.N
        parts = {}
        for dims_, sizes, expr in ((batch, d.batch_sizes, dim(0)), (free, free_sizes, dim(1)),
                                   (contracting, d.k_sizes, dim(2))):
            for k, e in zip(dims_, delinearize(expr, list(sizes))):
                parts[k] = e
        rank = self.dot.operands[operand].shape.rank
        return self.index_map(indexing_map(
            [("b", d.B), ("f", free_size), ("k", d.K)], [], [parts[k] for k in range(rank)]))

    def _output_map(self) -> ir.Attribute:
        """(batch, m, n) linear indices -> the dot's output index."""
        d = self.plan.dims
        results = delinearize(dim(0), list(d.batch_sizes)) + \
            delinearize(dim(1), list(d.m_sizes)) + delinearize(dim(2), list(d.n_sizes))
        return self.index_map(indexing_map([("b", d.B), ("m", d.M), ("n", d.N)], [], results))

    def _reshape_map(self, src: list[int], dst: list[int]) -> ir.Attribute:
        """Row-major position in `src` -> the same position in `dst`."""
        linear = linearize([dim(k) for k in range(len(src))], src)
        return self.index_map(indexing_map([(f"d{k}", n) for k, n in enumerate(src)], [],
                                           delinearize(linear, dst) if dst else []))

    # -- the kernel ----------------------------------------------------------------------
    def emit_entry(self, params, outputs, thread_id, block_id):
        p = self.plan
        self._thread_id, self._block_id = thread_id, block_id
        if p.mma is not None:
            self._mma_positions(thread_id)
        else:
            self._thread_grid_positions(thread_id)
        accs = [_zero(p.accumulator)] * (p.tile_m * p.tile_n)
        if p.dims.K > 0:
            if p.staging == "shared":
                accs = self._staged(params, accs)
            else:
                accs = self._direct(params, accs)
        return self._write(params, outputs, accs)

    def _thread_grid_positions(self, thread_id):
        """The thread's rows and columns of the block tile (module text)."""
        p = self.plan
        ty, tx = xla_gpu.build_apply_indexing(self.index_map(indexing_map(
            [("th_x", p.threads)], [], [floordiv(dim(0), p.threads_x),
                                        dim(0) % p.threads_x])), [thread_id])
        self._rows = [arith.addi(ty, _index(i * p.threads_y)) if i else ty
                      for i in range(p.tile_m)]
        if p.contiguous_columns:   # a thread's columns side by side (host)
            first = arith.muli(tx, _index(p.tile_n))
            self._cols = [arith.addi(first, _index(j)) if j else first
                          for j in range(p.tile_n)]
        else:
            self._cols = [arith.addi(tx, _index(j * p.threads_x)) if j else tx
                          for j in range(p.tile_n)]

    # shared-memory staging -------------------------------------------------------------
    def _staged(self, params, accs):
        p = self.plan
        # mma's tiles are 1-d (row * stride + k): a fragment register is
        # one 32-bit vector read of them.
        tiles = [xla_gpu.AllocateSharedOp(ir.RankedTensorType.get(
            list(shape) if p.mma is None else [shape[0] * shape[1]],
            element_type(storage))).result
            for shape, storage in ((p.lhs_tile, p.lhs_storage), (p.rhs_tile, p.rhs_storage))]
        if p.unrolled:
            for kt in range(p.k_steps):
                accs, tiles = self._k_step(params, _index(kt), accs, tiles)
            return accs
        loop = scf.ForOp(_index(0), _index(p.k_steps), _index(1), [*accs, *tiles])
        with ir.InsertionPoint(loop.body):
            carried = list(loop.inner_iter_args)
            new_accs, new_tiles = self._k_step(params, loop.induction_variable,
                                               carried[:len(accs)], carried[len(accs):])
            scf.YieldOp([*new_accs, *new_tiles])
        return list(loop.results)[:len(accs)]

    def _k_step(self, params, kt, accs, tiles):
        """One step of block_k: both tiles loaded, the accumulators updated
        from them between two barriers."""
        loaded = [self._load_tile(params, 0, kt, tiles[0]),
                  self._load_tile(params, 1, kt, tiles[1])]
        a, b = xla_gpu.SyncThreadsOp(loaded).results
        accs = self._multiply_tiles(a, b, accs)
        return accs, list(xla_gpu.SyncThreadsOp([a, b]).results)

    def _load_tile(self, params, operand: int, kt, tile):
        """The tile of operand `operand` for k step `kt`, each element the
        operand's prologue at its index (0 outside the dot)."""
        p = self.plan
        d = p.dims
        free_block = p.block_m if operand == 0 else p.block_n
        free_size = d.M if operand == 0 else d.N
        k_fastest = p.lhs_k_fastest if operand == 0 else p.rhs_k_fastest
        storage = p.lhs_storage if operand == 0 else p.rhs_storage
        elements = free_block * p.block_k
        steps = -(-elements // p.threads)
        e = sym(0) * p.threads + dim(0) if steps > 1 else dim(0)
        if k_fastest:
            c, r = e % p.block_k, floordiv(e, p.block_k)
        else:
            r, c = e % free_block, floordiv(e, free_block)
        batch, tile_m, tile_n = self._block_exprs(dim(1))
        tile_index = tile_m if operand == 0 else tile_n
        free = r if tile_index is None else tile_index * free_block + r
        k = dim(2) * p.block_k + c
        constraints = [] if steps * p.threads == elements else [(e, 0, elements - 1)]
        # mma's tiles: free-major and 1-d, the tile position linearized.
        position = c if p.mma is None else r * self._mma_row_stride(operand) + c
        loop_map = self.index_map(indexing_map(
            [("th_x", p.threads), ("bl_x", p.blocks), ("kt", p.k_steps)],
            [("s", steps)] if steps > 1 else [],
            [position, r, batch if batch is not None else const(0), free, k], constraints))
        loop = xla_gpu.build_loop(loop_map, [self._thread_id, self._block_id, kt], [tile])
        block = loop.region.blocks[0]
        nsym = 1 if steps > 1 else 0
        source = self.dot.operands[operand]
        with ir.InsertionPoint(block), self.calls_shared():
            args = list(block.arguments)
            c_v, r_v, b_v, f_v, k_v = args[nsym:nsym + 5]
            (it,) = args[nsym + 5:]
            inside = []
            if free_size % free_block:
                f_v, ok = self._clamp(f_v, free_size)
                inside.append(ok)
            if d.K % p.block_k:
                k_v, ok = self._clamp(k_v, d.K)
                inside.append(ok)
            index = xla_gpu.build_apply_indexing(self._operand_map(operand), [b_v, f_v, k_v])
            value = self.value_at(source, params, index)
            value = convert(value, source.shape.element_type, storage) \
                if storage != source.shape.element_type else value
            if inside:
                ok = inside[0] if len(inside) == 1 else arith.andi(*inside)
                value = arith.select(ok, value, _zero(storage))
            # mma's tiles are free-major (k contiguous), the others k-major.
            at = [c_v] if p.mma is not None else [c_v, r_v]
            xla_gpu.YieldOp([tensor.insert(value, it, at)])
        return loop.results[0]

    def _clamp(self, value, size: int):
        """(min(value, size - 1), value < size)."""
        last = _index(size - 1)
        ok = arith.cmpi(arith.CmpIPredicate.ult, value, _index(size))
        return arith.minui(value, last), ok

    def _to_accumulator(self, value, source_type: str):
        p = self.plan
        return convert(convert(value, source_type, p.result_type), p.result_type,
                       p.accumulator)

    def _fma(self, acc, a, b):
        if is_float(self.plan.accumulator):
            return math.fma(a, b, acc)
        return arith.addi(acc, arith.muli(a, b))

    def _multiply_tiles(self, a_tile, b_tile, accs):
        p = self.plan
        if p.mma is not None:
            return self._multiply_tiles_mma(a_tile, b_tile, accs)
        loop = scf.ForOp(_index(0), _index(p.block_k), _index(1), list(accs))
        with ir.InsertionPoint(loop.body):
            kk = loop.induction_variable
            a = [self._to_accumulator(tensor.extract(a_tile, [kk, row]), p.lhs_storage)
                 for row in self._rows]
            b = [self._to_accumulator(tensor.extract(b_tile, [kk, col]), p.rhs_storage)
                 for col in self._cols]
            carried = list(loop.inner_iter_args)
            scf.YieldOp([self._fma(carried[i * p.tile_n + j], a[i], b[j])
                         for i in range(p.tile_m) for j in range(p.tile_n)])
        return list(loop.results)

    # tensor cores (cuda) ------------------------------------------------------------------
    def _mma_positions(self, thread_id):
        """The lane's rows and columns of the block tile (its accumulators)
        and the k offset of its fragment registers. PTX ISA, "Matrix
        Fragments for mma.m16n8k16 / m16n8k32": with groupID = lane / 4 and
        threadID_in_group = lane % 4, accumulator c_i of an instruction
        tile is at row groupID (+8 for i >= 2), column 2 * threadID_in_group
        + (i & 1); a multiplicand register holds the elements at k =
        threadID_in_group * (elements per register) + e (+ half the
        instruction's k for the upper registers)."""
        mma = self.plan.mma
        row0, col0, k0 = self._lane_positions(thread_id)
        # Row 2 * i + h: instruction tile i, half h; column 2 * j + e: tile
        # j, element e (the order _write and the accumulators share).
        self._rows = [arith.addi(row0, _index(i * mma.m + h * 8)) if i or h else row0
                      for i in range(mma.tiles_m) for h in range(2)]
        self._cols = [arith.addi(col0, _index(j * mma.n + e)) if j or e else col0
                      for j in range(mma.tiles_n) for e in range(2)]
        self._fragment_k = k0

    def _lane_positions(self, thread_id):
        """(row groupID, column 2 * threadID_in_group, k threadID_in_group *
        elements per register) of thread `thread_id`'s lane in its warp's
        first instruction tile, as block tile coordinates."""
        p = self.plan
        mma = p.mma
        per_register = 32 // bit_width_of(mma.operand_type)
        lane = dim(0) % 32
        warp = floordiv(dim(0), 32)
        group, in_group = floordiv(lane, 4), lane % 4
        return xla_gpu.build_apply_indexing(self.index_map(indexing_map(
            [("th_x", p.threads)], [],
            [floordiv(warp, mma.warps_n) * (mma.tiles_m * mma.m) + group,
             (warp % mma.warps_n) * (mma.tiles_n * mma.n) + in_group * 2,
             in_group * per_register])), [thread_id])

    def _b_columns(self, thread_id):
        """Column groupID of each of the warp's B instruction tiles, for
        thread `thread_id`'s lane."""
        p = self.plan
        mma = p.mma
        (lane_group,) = xla_gpu.build_apply_indexing(self.index_map(indexing_map(
            [("th_x", p.threads)], [],
            [(floordiv(dim(0), 32) % mma.warps_n) * (mma.tiles_n * mma.n) +
             floordiv(dim(0) % 32, 4)])), [thread_id])
        return [arith.addi(lane_group, _index(j * mma.n)) if j else lane_group
                for j in range(mma.tiles_n)]

    def _fragments(self, a_tile, b_tile, thread_id, kk, rows=None, cols=None):
        """(A registers per instruction tile along m, B registers per tile
        along n) that thread `thread_id`'s lane loads for the step of k at
        `kk`: A's register r holds row groupID (+8 for odd r) at k offset
        (r >= 2) * k / 2; B's register r column groupID at k offset r * k / 2."""
        mma = self.plan.mma
        if rows is None:
            row0, _, k0 = self._lane_positions(thread_id)
            rows = [arith.addi(row0, _index(i * mma.m)) if i else row0
                    for i in range(mma.tiles_m)]
        else:
            k0 = self._fragment_k
        cols = cols if cols is not None else self._b_columns(thread_id)
        k = arith.addi(kk, k0)
        k_upper = arith.addi(k, _index(mma.k // 2))
        a_frags = []
        for row in rows:
            row8 = arith.addi(row, _index(8))
            a_frags.append([self._fragment_register(a_tile, r, kq, 0)
                            for r, kq in ((row, k), (row8, k), (row, k_upper),
                                          (row8, k_upper))])
        b_frags = [[self._fragment_register(b_tile, col, kq, 1) for kq in (k, k_upper)]
                   for col in cols]
        return a_frags, b_frags

    def _mma_row_stride(self, operand: int) -> int:
        """The elements from one row of operand `operand`'s 1-d mma tile to
        the next (block_k and its pad)."""
        p = self.plan
        return (p.lhs_tile if operand == 0 else p.rhs_tile)[1]

    def _fragment_register(self, tile, row, k, operand: int):
        """One 32-bit multiplicand register: the elements of operand
        `operand`'s tile at row `row`, k, k + 1, ... (lowest k in the lowest
        bits, as PTX packs them), one 4-byte aligned vector read (rows are
        16-byte multiples, k a multiple of the elements per register): two
        f16 as a vector<2xf16>, else an i32."""
        mma = self.plan.mma
        per_register = 32 // bit_width_of(mma.operand_type)
        element = element_type(mma.operand_type)
        stride = self._mma_row_stride(operand)
        (at,) = xla_gpu.build_apply_indexing(self.index_map(indexing_map(
            [("row", self.plan.block_m if operand == 0 else self.plan.block_n),
             ("k", self.plan.block_k)], [], [dim(0) * stride + dim(1)])), [row, k])
        pair = vector.transfer_read(
            ir.VectorType.get([per_register], element), tile, [at],
            ir.AffineMapAttr.get(ir.AffineMap.get_minor_identity(1, 1)),
            arith.constant(element, scalar_attr(mma.operand_type, 0)), [True])
        if mma.operand_type == "f16":
            return pair
        i32 = ir.IntegerType.get_signless(32)
        word = vector.bitcast(ir.VectorType.get([1], i32), pair)
        return vector.extract(word, [], [0])

    def _multiply_tiles_mma(self, a_tile, b_tile, accs):
        """acc += a_tile x b_tile with mma.sync, one instruction k at a
        time: per warp, its tiles_m x tiles_n instruction tiles. Fragment
        registers (PTX ISA, m16n8k16 / m16n8k32, row.col): A's register r
        holds row groupID (+8 for odd r) at k offset (r >= 2) * k / 2; B's
        register r column groupID at k offset r * k / 2."""
        p = self.plan
        mma = p.mma
        if not self._emulate_mma:
            a_rows = self._rows[0::2]     # row groupID of each instruction tile
            b_cols = self._b_columns(self._thread_id)
        loop = scf.ForOp(_index(0), _index(p.block_k), _index(mma.k), list(accs))
        with ir.InsertionPoint(loop.body):
            kk = loop.induction_variable
            if self._emulate_mma:
                scf.YieldOp(self._emulated_step(a_tile, b_tile, kk, list(loop.inner_iter_args)))
                return list(loop.results)
            a_frags, b_frags = self._fragments(a_tile, b_tile, self._thread_id, kk,
                                               a_rows, b_cols)
            carried = list(loop.inner_iter_args)
            width = 2 * mma.tiles_n
            updated = list(carried)
            for i in range(mma.tiles_m):
                for j in range(mma.tiles_n):
                    slots = [(2 * i + h) * width + 2 * j + e for h in range(2)
                             for e in range(2)]
                    results = self._mma_sync(a_frags[i], b_frags[j],
                                             [carried[s] for s in slots])
                    for s, v in zip(slots, results):
                        updated[s] = v
            scf.YieldOp(updated)
        return list(loop.results)

    def _register_part(self, register, part: int):
        """Element `part` (0: the lowest bits) of a fragment register, in
        the accumulator type."""
        mma = self.plan.mma
        if mma.operand_type == "f16":
            value = vector.extract(register, [], [part])
        else:
            width = bit_width_of(mma.operand_type)
            i32 = ir.IntegerType.get_signless(32)
            bits = arith.shrui(register, arith.constant(i32, part * width)) if part else register
            value = arith.trunci(ir.IntegerType.get_signless(width), bits)
            if mma.operand_type != "s8":
                value = arith.bitcast(element_type(mma.operand_type), value)
        return self._to_accumulator(value, mma.operand_type)

    def _emulated_step(self, a_tile, b_tile, kk, accs):
        """One step of k of every instruction tile, as the warp's mma.sync
        computes it, for the host: the lane's accumulator (row, column)
        gathers row's A elements and column's B elements from the
        registers of the lanes that hold them as PTX documents the
        layouts, each such lane's registers loaded as that lane loads
        them (`_fragments` at its thread id). A's element (row groupID
        (+8), k) is in lane 4 * groupID + (k % half) / per_register,
        register (row >= 8) + 2 * (k >= half), part k % per_register;
        B's element (k, column c) in lane 4 * c + (k % half) /
        per_register, register k >= half, same part."""
        p = self.plan
        mma = p.mma
        per_register = 32 // bit_width_of(mma.operand_type)
        width = 2 * mma.tiles_n
        updated = list(accs)
        # The lanes of this lane's group (A: its rows) and of the groups
        # of its two columns (B), by threadID_in_group.
        holders_a, holders_b = [], []
        for t in range(4):
            (th,) = xla_gpu.build_apply_indexing(self.index_map(indexing_map(
                [("th_x", p.threads)], [], [floordiv(dim(0), 4) * 4 + t])), [self._thread_id])
            holders_a.append(self._fragments(a_tile, b_tile, th, kk)[0])
            holders_b.append([])
            for e in range(2):
                (th,) = xla_gpu.build_apply_indexing(self.index_map(indexing_map(
                    [("th_x", p.threads)], [],
                    [floordiv(dim(0), 32) * 32 + (dim(0) % 4) * 8 + e * 4 + t])),
                    [self._thread_id])
                holders_b[t].append(self._fragments(a_tile, b_tile, th, kk)[1])
        for i in range(mma.tiles_m):
            for j in range(mma.tiles_n):
                for h in range(2):
                    for e in range(2):
                        slot = (2 * i + h) * width + 2 * j + e
                        acc = updated[slot]
                        for t in range(4):
                            for q in range(2):
                                a_reg = holders_a[t][i][h + 2 * q]
                                b_reg = holders_b[t][e][j][q]
                                for part in range(per_register):
                                    acc = self._fma(acc, self._register_part(a_reg, part),
                                                    self._register_part(b_reg, part))
                        updated[slot] = acc
        return updated

    def _mma_sync(self, a, b, c):
        """One warp-wide nvvm.mma.sync (row.col): its four results."""
        mma = self.plan.mma
        acc_type = element_type(self.plan.accumulator)
        struct = ir.Type.parse("!llvm.struct<(" + ", ".join([str(acc_type)] * 4) + ")>")
        attrs = {}
        if mma.operand_type == "s8":
            attrs["intOverflowBehavior"] = ir.Attribute.parse("#nvvm.mma_int_overflow<wrapped>")
        op = nvvm.MmaOp(
            struct, ir.Attribute.parse(f"#nvvm.shape<m = {mma.m}, n = {mma.n}, k = {mma.k}>"),
            ir.Attribute.parse("#nvvm.mma_layout<row>"),
            ir.Attribute.parse("#nvvm.mma_layout<col>"), a, b, c,
            multiplicandAPtxType=ir.Attribute.parse(f"#nvvm.mma_type<{mma.operand_type}>"),
            multiplicandBPtxType=ir.Attribute.parse(f"#nvvm.mma_type<{mma.operand_type}>"),
            **attrs)
        return [llvm.extractvalue(acc_type, op.result, [i]) for i in range(4)]

    # direct reads (host, long k) -------------------------------------------------------
    def _direct(self, params, accs):
        """Each thread reads its rows of the lhs and columns of the rhs (the
        prologue per element), no shared memory: a loop over the steps of
        block_k around a loop over the step's k, so that the emulated
        grid runs the steps over all threads and each thread's step with
        its accumulators in registers."""
        p = self.plan
        d = p.dims
        batch, m_ids, n_ids = self._thread_positions()
        m_safe = [self._clamp(m, d.M)[0] if d.M % p.block_m else m for m in m_ids]
        n_safe = [self._clamp(n, d.N)[0] if d.N % p.block_n else n for n in n_ids]
        lhs, rhs = self.dot.operands
        lhs_map, rhs_map = self._operand_map(0), self._operand_map(1)
        steps = scf.ForOp(_index(0), _index(p.k_steps), _index(1), list(accs))
        with ir.InsertionPoint(steps.body):
            k0 = arith.muli(steps.induction_variable, _index(p.block_k))
            size = _index(p.block_k) if d.K % p.block_k == 0 else \
                arith.minui(_index(p.block_k), arith.subi(_index(d.K), k0))
            loop = scf.ForOp(_index(0), size, _index(1), list(steps.inner_iter_args))
            with ir.InsertionPoint(loop.body), self.calls_shared():
                k = arith.addi(k0, loop.induction_variable)
                a = [self._to_accumulator(self.value_at(
                    lhs, params, xla_gpu.build_apply_indexing(lhs_map, [batch, m, k])),
                    lhs.shape.element_type) for m in m_safe]
                b = [self._to_accumulator(self.value_at(
                    rhs, params, xla_gpu.build_apply_indexing(rhs_map, [batch, n, k])),
                    rhs.shape.element_type) for n in n_safe]
                carried = list(loop.inner_iter_args)
                scf.YieldOp([self._fma(carried[i * p.tile_n + j], a[i], b[j])
                             for i in range(p.tile_m) for j in range(p.tile_n)])
            scf.YieldOp(list(loop.results))
        return list(steps.results)

    # the epilogue ----------------------------------------------------------------------
    def _thread_positions(self):
        """(batch, [m of each row], [n of each column]) of this thread."""
        p = self.plan
        batch, tile_m, tile_n = self._block_exprs(dim(0))
        zero = const(0)
        b, m0, n0 = xla_gpu.build_apply_indexing(self.index_map(indexing_map(
            [("bl_x", p.blocks)], [],
            [batch if batch is not None else zero,
             tile_m * p.block_m if tile_m is not None else zero,
             tile_n * p.block_n if tile_n is not None else zero])), [self._block_id])
        return (b, [arith.addi(m0, r) for r in self._rows],
                [arith.addi(n0, c) for c in self._cols])

    def _write(self, params, outputs, accs):
        p = self.plan
        d = p.dims
        batch, m_ids, n_ids = self._thread_positions()
        out_map = self._output_map()
        dot_dims = list(self.dot.shape.dims)
        reshape_maps: dict[tuple[int, ...], ir.Attribute] = {}
        results = list(outputs)
        roots = self.fusion.roots
        for i, m in enumerate(m_ids):
            m_ok = None
            if d.M % p.block_m:
                m, m_ok = self._clamp(m, d.M)
            for j, n in enumerate(n_ids):
                n_ok = None
                if d.N % p.block_n:
                    n, n_ok = self._clamp(n, d.N)
                conds = [c for c in (m_ok, n_ok) if c is not None]
                cond = None if not conds else conds[0] if len(conds) == 1 else \
                    arith.andi(*conds)
                index = xla_gpu.build_apply_indexing(out_map, [batch, m, n])
                value = convert(accs[i * p.tile_n + j], p.accumulator, p.result_type)
                emitter = FunctionEmitter(
                    self.maps, tensors=params, is_local=lambda inst: True,
                    call_computation=self.call_computation,
                    injected={id(self.dot): lambda _idx, v=value: [v]})
                for k, root in enumerate(roots):
                    dims = tuple(root.shape.dims)
                    at = index
                    if list(dims) != dot_dims:
                        if dims not in reshape_maps:
                            reshape_maps[dims] = self._reshape_map(dot_dims, list(dims))
                        at = xla_gpu.build_apply_indexing(reshape_maps[dims], index)
                    root_value = value if root is self.dot else emitter.emit1(root, at)
                    if cond is None:
                        results[k] = tensor.insert(root_value, results[k], at)
                    else:
                        results[k] = xla_gpu.PredicatedInsertOp(
                            root_value, results[k], list(at), cond).result
        return results
