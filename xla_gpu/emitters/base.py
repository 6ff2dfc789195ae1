"""What every emitter shares: the module, the partitioned computation, one
function per subgraph, scalar computations (reducers), and the entry
function's signature:

    func.func @kernel(%p0: tensor<...>, ..., %r0: tensor<...>, ...)
        -> (tensor<...>, ...) attributes {xla.entry}

Each argument carries `xla.slice_index` (its buffer); inputs that no output
aliases are `xla.invariant` (read-only for the whole kernel).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from mlir import ir
from mlir.dialects import func, gpu

from ..analysis.fusion import Fusion
from ..dialects import xla_gpu
from ..hlo import HloComputation, HloInstruction
from ..ir import IndexingMap
from .elemental import FunctionEmitter, IndexMaps
from .partitioner import PartitionedComputation, Subgraph, partition, sanitize
from .types import check_supported, element_type, tensor_type

__all__ = ["LaunchDims", "EmittedKernel", "KernelEmitter"]

WARP_SIZE = 32


@dataclass(frozen=True)
class LaunchDims:
    threads: int   # per block, x only
    blocks: int    # in x
    shared_bytes: int = 0
    # Blocks in y: a grid over CUDA's 2^31 - 1 blocks in x goes 2-D (as
    # XLA's), block (x, y) being block x + y * blocks of the linear order.
    blocks_y: int = 1


@dataclass
class EmittedKernel:
    module: ir.Module
    name: str
    launch: LaunchDims
    fusion: Fusion
    emitter: str                   # the emitter that ran
    aliases: dict[int, int] = field(default_factory=dict)  # output -> parameter
    notes: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return str(self.module)


class KernelEmitter:
    """Subclasses say how to launch (`launch_dims`), which instructions root
    subgraphs (`root_groups`, `is_subgraph_root`) and how the entry function
    writes the outputs (`emit_entry`)."""

    name = "base"

    def __init__(self, fusion: Fusion):
        self.fusion = fusion
        self.maps = IndexMaps()
        self.aliases: dict[int, int] = {}
        self.notes: list[str] = list(fusion.notes)
        # Calls made in the current loop body (see `calls_shared`).
        self._call_cache: dict | None = None

    # -- to override -------------------------------------------------------
    def launch_dims(self) -> LaunchDims:
        # Loop-like emitters set `self.config` (see loop_config).
        return LaunchDims(self.config.threads, self.config.blocks,
                          blocks_y=self.config.blocks_y)

    def root_groups(self) -> list[list[HloInstruction]]:
        return [list(self.fusion.roots)]

    def is_subgraph_root(self, inst: HloInstruction) -> bool:
        return False

    def is_excluded(self, inst: HloInstruction) -> bool:
        return False

    def prepare_subgraphs(self) -> None:
        """Runs after partitioning (e.g. to mark injected heroes)."""

    def emit_entry(self, params: Sequence[ir.Value], outputs: Sequence[ir.Value],
                   thread_id: ir.Value, block_id: ir.Value) -> list[ir.Value]:
        raise NotImplementedError

    # -- shared machinery --------------------------------------------------
    def emit(self, context: ir.Context) -> EmittedKernel:
        fusion = self.fusion
        for inst in fusion.computation.instructions:
            check_supported(inst.shape, inst)
        with context, ir.Location.unknown():
            self.module = ir.Module.create()
            self.partitioned: PartitionedComputation = partition(
                fusion.computation, self.root_groups(), self.is_subgraph_root,
                self.is_excluded)
            self.prepare_subgraphs()
            self._functions: dict[int, func.FuncOp] = {}
            self._scalar_functions: dict[int, func.FuncOp] = {}
            self._symbols: set[str] = set()
            self.launch = self.launch_dims()
            entry = self._declare_entry()
            for sub in self.partitioned.subgraphs:
                self._declare_subgraph(sub)
            with ir.InsertionPoint(entry.add_entry_block()):
                args = list(entry.arguments)
                n = len(fusion.parameters)
                thread_id = gpu.thread_id(gpu.Dimension.x)
                block_id = gpu.block_id(gpu.Dimension.x)
                _set_range(thread_id, self.launch.threads)
                _set_range(block_id, self.launch.blocks)
                # A 2-D grid's block id y (emitters that launch one read it).
                self.block_id_y = None
                if self.launch.blocks_y > 1:
                    self.block_id_y = gpu.block_id(gpu.Dimension.y)
                    _set_range(self.block_id_y, self.launch.blocks_y)
                results = self.emit_entry(args[:n], args[n:], thread_id, block_id)
                func.ReturnOp(results)
            for sub in self.partitioned.subgraphs:
                self._emit_subgraph(sub)
            self._set_arg_attrs(entry)
        return EmittedKernel(self.module, self.kernel_name, self.launch, fusion,
                             self.name, dict(self.aliases), self.notes)

    @property
    def kernel_name(self) -> str:
        return sanitize(self.fusion.name)

    def _unique(self, name: str) -> str:
        base, n = name, 0
        while name in self._symbols:
            n += 1
            name = f"{base}_{n}"
        self._symbols.add(name)
        return name

    def _declare_entry(self) -> func.FuncOp:
        types = [tensor_type(p.shape) for p in self.fusion.parameters]
        outs = [tensor_type(s) for s in self.fusion.output_shapes]
        with ir.InsertionPoint(self.module.body):
            entry = func.FuncOp(self._unique(self.kernel_name), (types + outs, outs))
        entry.attributes["xla.entry"] = ir.UnitAttr.get()
        return entry

    def _set_arg_attrs(self, entry: func.FuncOp) -> None:
        n = len(self.fusion.parameters)
        aliased = set(self.aliases.values())
        attrs = []
        for i in range(n + len(self.fusion.output_shapes)):
            slice_index = self.aliases.get(i - n, i) if i >= n else i
            d = {"xla.slice_index": ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                       slice_index)}
            if i < n and i not in aliased:
                d["xla.invariant"] = ir.UnitAttr.get()
            attrs.append(ir.DictAttr.get(d))
        entry.arg_attrs = ir.ArrayAttr.get(attrs)

    def _declare_subgraph(self, sub: Subgraph) -> None:
        params = [tensor_type(p.shape) for p in self.fusion.parameters]
        index = ir.IndexType.get()
        injected = [element_type(s.element_type) for h in sub.injected
                    for s in h.shape.leaves()]
        results = [element_type(s.element_type) for r in sub.roots for s in r.shape.leaves()]
        with ir.InsertionPoint(self.module.body):
            name = sub.name
            if name in self._symbols:  # the kernel took the computation's name
                name = f"{name}_{sanitize(sub.roots[0].name)}"
            f = func.FuncOp(self._unique(name),
                            (params + [index] * sub.index_rank + injected, results),
                            visibility="private")
        self._functions[id(sub)] = f

    def _emit_subgraph(self, sub: Subgraph) -> None:
        f = self._functions[id(sub)]
        n = len(self.fusion.parameters)
        block = f.add_entry_block()
        args = list(block.arguments)
        indices = args[n:n + sub.index_rank]
        injected_values = args[n + sub.index_rank:]
        injected, k = {}, 0
        for hero in sub.injected:
            count = len(hero.shape.leaves())
            values = injected_values[k:k + count]
            injected[id(hero)] = (lambda v: (lambda idx: list(v)))(values)
            k += count
        emitter = self.function_emitter(args[:n], lambda i: sub.contains(i), injected)
        with ir.InsertionPoint(block):
            values = []
            for root in sub.roots:
                values += emitter.emit(root, indices)
            func.ReturnOp(values)

    def function_emitter(self, tensors, is_local, injected=None) -> FunctionEmitter:
        """An elemental emitter for a function whose fusion parameters are
        `tensors`: other subgraphs are pure_calls with those tensors."""
        return FunctionEmitter(
            self.maps, tensors=tensors, is_local=is_local,
            call_other=lambda inst, idx: self.call_subgraph(inst, tensors, idx),
            call_computation=self.call_computation, injected=injected)

    def value_at(self, inst: HloInstruction, params: Sequence[ir.Value],
                 indices: Sequence[ir.Value]) -> ir.Value:
        """The value of `inst` at `indices` in the entry function: read for
        parameters and constants, a pure_call of its subgraph otherwise."""
        return self.function_emitter(params, lambda i: False).emit1(inst, indices)

    def call_subgraph(self, inst: HloInstruction, tensors: Sequence[ir.Value],
                      indices: Sequence[ir.Value],
                      injected: Sequence[ir.Value] = ()) -> list[ir.Value]:
        """The value(s) of `inst`, a subgraph root, at `indices`."""
        sub = self.partitioned.subgraph_of(inst)
        if sub is None:
            raise inst.error("internal: the instruction belongs to no subgraph")
        cache, key, results = self._call_cache, None, None
        if cache is not None:
            # The tensors are one list for a whole function (its parameters):
            # keyed by identity (O(1), not O(parameters) per call), and the
            # entry keeps the list alive so that its id is not reused.
            key = (id(sub), id(tensors), *indices, *injected)
            hit = cache.get(key)
            if hit is not None and hit[0] is tensors:
                results = hit[1]
        if results is None:
            f = self._functions[id(sub)]
            call = xla_gpu.PureCallOp(
                list(f.type.results), ir.FlatSymbolRefAttr.get(f.sym_name.value),
                [*tensors, *indices, *injected])
            results = list(call.results)
            if cache is not None:
                cache[key] = (tensors, results)
        where = sub.results_of(inst)
        if where is None:
            raise inst.error("internal: not a root of its subgraph")
        first, count = where
        return results[first:first + count]

    def calls_shared(self):
        """Within this context, calls of one subgraph at the same indices
        are made once (several roots of one function)."""
        emitter = self

        class _Scope:
            def __enter__(self):
                self.saved, emitter._call_cache = emitter._call_cache, {}

            def __exit__(self, *exc):
                emitter._call_cache = self.saved

        return _Scope()

    def scalar_function(self, comp: HloComputation) -> func.FuncOp:
        """The function of a scalar computation (declared on first use)."""
        f = self._scalar_functions.get(id(comp))
        return f if f is not None else self._declare_scalar_computation(comp)

    def call_computation(self, comp: HloComputation, args: Sequence[ir.Value]) -> list[ir.Value]:
        """A scalar computation (reducer, map) applied to `args`."""
        f = self._scalar_functions.get(id(comp))
        if f is None:
            f = self._declare_scalar_computation(comp)
        call = xla_gpu.PureCallOp(list(f.type.results),
                                  ir.FlatSymbolRefAttr.get(f.sym_name.value), list(args))
        return list(call.results)

    def _declare_scalar_computation(self, comp: HloComputation) -> func.FuncOp:
        params = comp.parameters
        for p in params:
            if p.shape.is_tuple or p.shape.rank:
                raise p.error(f"computation '{comp.name}' must take scalars")
            check_supported(p.shape, p)
        leaves = comp.root.shape.leaves()
        types = [element_type(p.shape.element_type) for p in params]
        results = [element_type(s.element_type) for s in leaves]
        with ir.InsertionPoint(self.module.body):
            f = func.FuncOp(self._unique(sanitize(comp.name)), (types, results),
                            visibility="private")
        self._scalar_functions[id(comp)] = f
        block = f.add_entry_block()
        emitter = FunctionEmitter(self.maps, scalars=list(block.arguments),
                                  call_computation=self.call_computation)
        with ir.InsertionPoint(block):
            root = comp.root
            if root.opcode == "tuple":
                values = [v for op in root.operands for v in emitter.emit(op, [])]
            else:
                values = emitter.emit(root, [])
            func.ReturnOp(values)
        return f

    def index_map(self, indexing_map: IndexingMap | ir.Attribute | str) -> ir.Attribute:
        """The `#xla_gpu.indexing_map` attribute of a map built as AffineExprs
        (`analysis.indexing.indexing_map`); text is parsed (tests, debugging)."""
        return self.maps.attr(indexing_map)


def _set_range(value: ir.Value, count: int) -> None:
    index = ir.IndexType.get()
    value.owner.attributes["xla.range"] = ir.ArrayAttr.get(
        [ir.IntegerAttr.get(index, 0), ir.IntegerAttr.get(index, max(count, 1) - 1)])
