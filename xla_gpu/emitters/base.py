"""What every emitter shares: the module, the partitioned computation, one
function per subgraph, scalar computations (reducers), and the entry
function's signature:

    func.func @kernel(%p0: tensor<...>, ..., %r0: tensor<...>, ...)
        -> (tensor<...>, ...) attributes {xla.entry}

Each argument carries `xla.slice_index` (its buffer); inputs that no output
aliases are `xla.invariant` (read-only for the whole kernel).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Sequence

from mlir import ir
from mlir.dialects import func, gpu

from ..analysis.fusion import Fusion
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
        # Per function declared (by id of its subgraph or computation): its
        # argument types (its entry block's), and its result types and
        # symbol, which every call of it takes: kept from its declaration,
        # not read back from the op at each use.
        self._inputs: dict[int, list[ir.Type]] = {}
        self._callees: dict[int, tuple[list[ir.Type], ir.FlatSymbolRefAttr]] = {}

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
            entry, entry_inputs = self._declare_entry()
            params = entry_inputs[:len(fusion.parameters)]
            for sub in self.partitioned.subgraphs:
                self._declare_subgraph(sub, params)
            with ir.InsertionPoint(_add_entry_block(entry, entry_inputs)):
                args = list(entry.arguments)
                n = len(fusion.parameters)
                thread_id = gpu.thread_id(_dimension("x"))
                block_id = gpu.block_id(_dimension("x"))
                _set_range(thread_id, self.launch.threads)
                _set_range(block_id, self.launch.blocks)
                # A 2-D grid's block id y (emitters that launch one read it).
                self.block_id_y = None
                if self.launch.blocks_y > 1:
                    self.block_id_y = gpu.block_id(_dimension("y"))
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

    def _declare_entry(self) -> tuple[func.FuncOp, list[ir.Type]]:
        """The entry function and its argument types."""
        types = [tensor_type(p.shape) for p in self.fusion.parameters]
        outs = [tensor_type(s) for s in self.fusion.output_shapes]
        with ir.InsertionPoint(self.module.body):
            entry = func.FuncOp(self._unique(self.kernel_name), (types + outs, outs))
        entry.attributes["xla.entry"] = ir.UnitAttr.get()
        return entry, types + outs

    def _set_arg_attrs(self, entry: func.FuncOp) -> None:
        n = len(self.fusion.parameters)
        aliased = set(self.aliases.values())
        attrs = []
        i64, unit = ir.IntegerType.get_signless(64), ir.UnitAttr.get()
        for i in range(n + len(self.fusion.output_shapes)):
            slice_index = self.aliases.get(i - n, i) if i >= n else i
            d = {"xla.slice_index": ir.IntegerAttr.get(i64, slice_index)}
            if i < n and i not in aliased:
                d["xla.invariant"] = unit
            attrs.append(ir.DictAttr.get(d))
        entry.arg_attrs = ir.ArrayAttr.get(attrs)

    def _declare_subgraph(self, sub: Subgraph, params: list[ir.Type]) -> None:
        index = ir.IndexType.get()
        injected = [element_type(s.element_type) for h in sub.injected
                    for s in h.shape.leaves()]
        results = [element_type(s.element_type) for r in sub.roots for s in r.shape.leaves()]
        with ir.InsertionPoint(self.module.body):
            name = sub.name
            if name in self._symbols:  # the kernel took the computation's name
                name = f"{name}_{sanitize(sub.roots[0].name)}"
            name = self._unique(name)
            inputs = params + [index] * sub.index_rank + injected
            f = func.FuncOp(name, (inputs, results), visibility="private")
        self._functions[id(sub)] = f
        self._inputs[id(sub)] = inputs
        self._callees[id(sub)] = (results, ir.FlatSymbolRefAttr.get(name))

    def _emit_subgraph(self, sub: Subgraph) -> None:
        f = self._functions[id(sub)]
        n = len(self.fusion.parameters)
        block = _add_entry_block(f, self._inputs[id(sub)])
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
            results = _pure_call(self._callees[id(sub)], [*tensors, *indices, *injected])
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
        return _SharedCalls(self)

    def scalar_function(self, comp: HloComputation) -> func.FuncOp:
        """The function of a scalar computation (declared on first use)."""
        f = self._scalar_functions.get(id(comp))
        return f if f is not None else self._declare_scalar_computation(comp)

    def call_computation(self, comp: HloComputation, args: Sequence[ir.Value]) -> list[ir.Value]:
        """A scalar computation (reducer, map) applied to `args`."""
        f = self._scalar_functions.get(id(comp))
        if f is None:
            f = self._declare_scalar_computation(comp)
        return _pure_call(self._callees[id(comp)], list(args))

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
            name = self._unique(sanitize(comp.name))
            f = func.FuncOp(name, (types, results), visibility="private")
        self._scalar_functions[id(comp)] = f
        self._callees[id(comp)] = (results, ir.FlatSymbolRefAttr.get(name))
        block = _add_entry_block(f, types)
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


def _pure_call(callee: tuple[list[ir.Type], ir.FlatSymbolRefAttr],
               operands: list[ir.Value]) -> list[ir.Value]:
    """`xla_gpu.pure_call` of `callee` (its result types, its symbol): made
    by Operation.create, at half the cost of the generated builder (one
    of a kernel's most frequent ops)."""
    types, symbol = callee
    return list(ir.Operation.create("xla_gpu.pure_call", types, operands,
                                    {"callee": symbol}).results)


def _add_entry_block(f: func.FuncOp, inputs: list[ir.Type]) -> ir.Block:
    """`f.add_entry_block()` given the argument types `f` was declared with
    (not read back from its function type)."""
    blocks = f.regions[0].blocks
    blocks.append(*inputs)
    return blocks[0]


class _SharedCalls:
    """`KernelEmitter.calls_shared`'s context."""

    def __init__(self, emitter: KernelEmitter):
        self.emitter = emitter

    def __enter__(self):
        self.saved, self.emitter._call_cache = self.emitter._call_cache, {}

    def __exit__(self, *exc):
        self.emitter._call_cache = self.saved


class _DimensionAttrs(threading.local):
    """This thread's `#gpu<dim ..>` attributes, of its latest context."""

    def __init__(self):
        self.context: ir.Context | None = None
        self.attrs: dict[str, ir.Attribute] = {}


_dimension_attrs = _DimensionAttrs()


def _dimension(name: str) -> ir.Attribute:
    """`#gpu<dim name>` in the current context. The bindings build the
    attribute of a `gpu.Dimension` by parsing its text, on every
    gpu.thread_id / gpu.block_id (a few percent of emitting a kernel); a
    compile thread keeps one context, so it is parsed once per thread."""
    held = _dimension_attrs
    context = ir.Context.current
    if held.context is not context:
        held.context, held.attrs = context, {}
    attr = held.attrs.get(name)
    if attr is None:
        attr = held.attrs[name] = ir.Attribute.parse(f"#gpu<dim {name}>")
    return attr


def _set_range(value: ir.Value, count: int) -> None:
    index = ir.IndexType.get()
    value.owner.attributes["xla.range"] = ir.ArrayAttr.get(
        [ir.IntegerAttr.get(index, 0), ir.IntegerAttr.get(index, max(count, 1) - 1)])
