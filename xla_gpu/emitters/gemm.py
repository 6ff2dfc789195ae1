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

On the cpu target (grid emulation) barriers must stay at the top level of
the kernel: small GEMMs (`analysis.gemm.HOST_SHARED_MAX_MACS`) run the
GPU's code with the k loop unrolled, step by step; larger ones have each
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
from mlir.dialects import arith, math, scf, tensor

from ..analysis.gemm import GemmPlan, GemmTiling, plan_gemm
from ..analysis.indexing import const, delinearize, dim, floordiv, indexing_map, linearize, sym
from ..dialects import xla_gpu
from ..hlo.shape import is_float
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

    def __init__(self, fusion, staging: str | None = None):
        super().__init__(fusion)
        self.dot = fusion.heroes[0]
        tiling = fusion.config if isinstance(fusion.config, GemmTiling) else None
        device = getattr(fusion, "device", None)
        host = bool(device is not None and device.host_emulation)
        self.plan: GemmPlan = plan_gemm(self.dot, tiling, host=host, staging=staging)
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
        accs = [_zero(p.accumulator)] * (p.tile_m * p.tile_n)
        if p.dims.K > 0:
            if p.staging == "shared":
                accs = self._staged(params, accs)
            else:
                accs = self._direct(params, accs)
        return self._write(params, outputs, accs)

    # shared-memory staging -------------------------------------------------------------
    def _staged(self, params, accs):
        p = self.plan
        tiles = [xla_gpu.AllocateSharedOp(ir.RankedTensorType.get(
            list(shape), element_type(storage))).result
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
        loop_map = self.index_map(indexing_map(
            [("th_x", p.threads), ("bl_x", p.blocks), ("kt", p.k_steps)],
            [("s", steps)] if steps > 1 else [],
            [c, r, batch if batch is not None else const(0), free, k], constraints))
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
            xla_gpu.YieldOp([tensor.insert(value, it, [c_v, r_v])])
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
