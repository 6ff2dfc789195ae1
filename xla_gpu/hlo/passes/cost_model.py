"""A GPU cost model in the spirit of XLA's GpuPerformanceModel, with H200
figures: a kernel takes

    max(bytes read + bytes written) / HBM bandwidth, flops / peak) + launch

Bytes read count each operand once per kernel, scaled down when the kernel
reads only part of it (slices, gathers) — repeated reads of the same
element hit the caches. Flops count each instruction's per-element cost
times how many times the kernel evaluates it: an instruction read through a
broadcast is recomputed for every element it is broadcast to, a reduction
reads all its reduced elements for each output, which is how the model knows
that fusing a producer into a reduction's input is free while recomputing a
reduction per output element is not.

`NodeCost` describes one kernel (a fusion, or a single instruction as the
kernel it would become); `fused_cost` estimates a producer fused into a
consumer without building the fusion.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

from ..fusions import ELEMENTWISE_OPCODES
from ..module import HloComputation, HloInstruction
from ..shape import Shape
from .util import byte_size

__all__ = ["HBM_BANDWIDTH", "PEAK_FLOPS", "LAUNCH_OVERHEAD", "NodeCost",
           "node_cost", "fused_cost", "fused_time", "kernel_time", "is_kernel"]

HBM_BANDWIDTH = 4.8e12      # bytes/s (H200)
PEAK_FLOPS = 6.0e13         # f32 non-tensor-core flop/s
LAUNCH_OVERHEAD = 5e-6      # s per kernel launch

_TRANSCENDENTAL = frozenset({
    "exponential", "exponential-minus-one", "log", "log-plus-one", "tanh",
    "logistic", "sine", "cosine", "tan", "erf", "atan2", "power", "cbrt",
    "rsqrt", "sqrt"})
_EXPENSIVE = frozenset({"divide", "remainder"})
# A widening multiply (two for 64-bit operands without a 128-bit unit).
_DOUBLE_WIDTH = frozenset({"mulhi"})
_FREE = frozenset({
    "parameter", "constant", "bitcast", "reshape", "broadcast", "transpose",
    "slice", "reverse", "copy", "tuple", "get-tuple-element", "iota",
    "concatenate", "pad", "dynamic-slice", "gather"})

# Instructions that are not kernels: no launch, no traffic of their own.
_NOT_KERNELS = frozenset({
    "parameter", "constant", "bitcast", "tuple", "get-tuple-element",
    "after-all", "partition-id", "replica-id"})


# byte_size by shape object: the cost model asks it for every operand of
# every candidate pair, and the few shape objects of a module recur (hashing
# a Shape for byte_size's own table costs more than the answer). The entry
# holds the shape, so an id is not reused while it is here.
_BYTES: dict[int, tuple[Shape, int]] = {}


def _bytes(shape: Shape) -> int:
    hit = _BYTES.get(id(shape))
    if hit is not None and hit[0] is shape:
        return hit[1]
    size = byte_size(shape)
    if len(_BYTES) >= 1 << 16:
        _BYTES.clear()
    _BYTES[id(shape)] = (shape, size)
    return size


def is_kernel(inst: HloInstruction) -> bool:
    return inst.opcode not in _NOT_KERNELS


def kernel_time(bytes_accessed: float, flops: float, launches: int = 1) -> float:
    return max(bytes_accessed / HBM_BANDWIDTH, flops / PEAK_FLOPS) + \
        launches * LAUNCH_OVERHEAD


def _elements(inst: HloInstruction) -> int:
    shape = inst.shape
    if not shape.is_tuple:   # the common case, without building the leaves
        return prod(shape.dims)
    return sum(prod(leaf.dims) for leaf in shape.leaves())


def _computation_flops(comp: HloComputation, cache: dict) -> float:
    """Flops of one evaluation of a scalar computation (a reducer)."""
    key = id(comp)
    if key not in cache:
        cache[key] = 1.0  # recursion guard
        cache[key] = max(1.0, sum(_op_flops(i) for i in comp.instructions
                                  if i.opcode != "parameter"))
    return cache[key]


def _op_flops(inst: HloInstruction) -> float:
    op = inst.opcode
    if op in _FREE:
        return 0.0
    if op in _TRANSCENDENTAL:
        return 8.0
    if op in _EXPENSIVE:
        return 4.0
    if op in _DOUBLE_WIDTH:
        return 2.0
    return 1.0


# _op_flops by opcode (1.0 for the others).
_OP_FLOPS = {**{op: 0.0 for op in _FREE}, **{op: 8.0 for op in _TRANSCENDENTAL},
             **{op: 4.0 for op in _EXPENSIVE}, **{op: 2.0 for op in _DOUBLE_WIDTH}}
# The ops `_evaluations` counts with rules of their own.
_COUNTED_APART = frozenset({"reduce", "reduce-window", "dot", "concatenate", "dynamic-slice",
                            "gather", "dynamic-update-slice", "scatter", "pad", "tuple"})


@dataclass
class NodeCost:
    """One kernel: flops, bytes written, and per operand the bytes it reads
    and how many times each element of that operand is evaluated (its
    utilization)."""
    flops: float
    bytes_written: float
    operand_bytes: list[float] = field(default_factory=list)
    utilization: list[float] = field(default_factory=list)
    kernel: bool = True

    time: float = 0.0

    def __post_init__(self) -> None:
        self.time = kernel_time(self.bytes_read + self.bytes_written, self.flops) \
            if self.kernel else 0.0

    @property
    def bytes_read(self) -> float:
        return sum(self.operand_bytes)


def _evaluations(roots: list[HloInstruction], order: list[HloInstruction],
                 reducer_cache: dict) -> tuple[dict[int, float], float]:
    """How many times each instruction is evaluated when the roots are
    computed once per output element, and the total flops."""
    count: dict[int, float] = {id(r): float(_elements(r)) for r in roots}
    get = count.get
    flops = 0.0
    for inst in reversed(order):
        e = get(id(inst), 0.0)
        if e == 0.0:
            continue
        op = inst.opcode
        if op not in _COUNTED_APART:
            # The common case (elementwise ops, broadcasts, bitcasts...):
            # what the branches below end with, without their tests.
            flops += e * _OP_FLOPS.get(op, 1.0)
            operands = inst.operands
            if op in ELEMENTWISE_OPCODES:
                dims = inst.shape.dims
                for o in (dict.fromkeys(operands) if len(operands) > 1 else operands):
                    key = id(o)
                    if o.shape.dims == dims:
                        c = get(key, 0.0)
                        count[key] = e if e > c else c
                    else:
                        count[key] = get(key, 0.0) + e
            else:
                for o in (dict.fromkeys(operands) if len(operands) > 1 else operands):
                    key = id(o)
                    count[key] = get(key, 0.0) + e
            continue
        out = max(1, _elements(inst))
        if op == "reduce":
            n = len(inst.operands) // 2
            src = inst.operands[0]
            per_output = prod(src.shape.dims) / max(1, prod(inst.shape.leaves()[0].dims))
            reads = e / (n if inst.shape.is_tuple else 1) * per_output
            flops += reads * _computation_flops(inst.attrs["to_apply"], reducer_cache)
            for o in inst.operands[:n]:
                count[id(o)] = count.get(id(o), 0.0) + reads
            for o in inst.operands[n:]:
                count[id(o)] = count.get(id(o), 0.0) + 1.0
            continue
        if op == "reduce-window":
            window = inst.attrs.get("window") or {}
            size = prod(window.get("size", (1,)))
            flops += e * size * _computation_flops(inst.attrs["to_apply"], reducer_cache)
            n = len(inst.operands) // 2
            for o in inst.operands[:n]:
                count[id(o)] = count.get(id(o), 0.0) + e * size
            continue
        if op == "dot":
            lhs = inst.operands[0].shape
            k = prod(lhs.dims[d] for d in inst.attrs.get("lhs_contracting_dims", ()))
            flops += 2.0 * e * k
            for o in inst.operands:
                count[id(o)] = count.get(id(o), 0.0) + float(_elements(o))
            continue
        flops += e * _op_flops(inst)
        if op == "concatenate":
            for o in inst.operands:
                count[id(o)] = count.get(id(o), 0.0) + e * _elements(o) / out
            continue
        if op in ("dynamic-slice", "gather"):
            count[id(inst.operands[0])] = count.get(id(inst.operands[0]), 0.0) + e
            for o in inst.operands[1:]:
                count[id(o)] = count.get(id(o), 0.0) + min(e, float(_elements(o)))
            continue
        if op == "dynamic-update-slice":
            upd = _elements(inst.operands[1])
            base = inst.operands[0]
            count[id(base)] = count.get(id(base), 0.0) + e * max(0.0, 1 - upd / out)
            count[id(inst.operands[1])] = count.get(id(inst.operands[1]), 0.0) + e * upd / out
            for o in inst.operands[2:]:
                count[id(o)] = count.get(id(o), 0.0) + 1.0
            continue
        if op == "scatter":
            for o in inst.operands:
                count[id(o)] = count.get(id(o), 0.0) + float(_elements(o))
            flops += _elements(inst.operands[-1]) * _computation_flops(
                inst.attrs["to_apply"], reducer_cache)
            continue
        if op == "pad":
            x = inst.operands[0]
            count[id(x)] = count.get(id(x), 0.0) + e * _elements(x) / out
            count[id(inst.operands[1])] = count.get(id(inst.operands[1]), 0.0) + 1.0
            continue
        if op == "tuple":
            for o in inst.operands:
                count[id(o)] = count.get(id(o), 0.0) + float(_elements(o))
            continue
        same_index = op in ELEMENTWISE_OPCODES
        for o in dict.fromkeys(inst.operands):
            if same_index and o.shape.dims == inst.shape.dims:
                # Read at the consumer's own index: the emitters compute a
                # value once per index, however many elementwise users read
                # it there (summing would count a DAG's shared values once
                # per path: 2^10 times in Philox's ten rounds).
                count[id(o)] = max(count.get(id(o), 0.0), e)
            else:
                count[id(o)] = count.get(id(o), 0.0) + e
    return count, flops


def node_cost(inst: HloInstruction, reducer_cache: dict | None = None) -> NodeCost:
    """The cost of `inst` as one kernel (a fusion: its body)."""
    cache = reducer_cache if reducer_cache is not None else {}
    written = float(_bytes(inst.shape))
    if not is_kernel(inst):
        return NodeCost(0.0, 0.0, [0.0] * len(inst.operands), [0.0] * len(inst.operands),
                        kernel=False)
    if inst.opcode == "fusion":
        body = inst.attrs["calls"]
        order = body.instructions
        roots = list(body.root.operands) if body.root.opcode == "tuple" else [body.root]
        count, flops = _evaluations(roots, order, cache)
        params = body.parameters
        util, read = [], []
        for p, o in zip(params, inst.operands):
            n = max(1, _elements(o))
            u = count.get(id(p), 0.0) / n
            util.append(u)
            read.append(_bytes(o.shape) * min(1.0, u))
        return NodeCost(flops, written, read, util)
    if inst.opcode == "dot":
        a = inst.attrs
        lhs = inst.operands[0].shape
        k = prod(lhs.dims[d] for d in a.get("lhs_contracting_dims", ()))
        flops = 2.0 * _elements(inst) * k
        return NodeCost(flops, written, [float(byte_size(o.shape)) for o in inst.operands],
                        [1.0] * len(inst.operands))
    if inst.opcode in ("while", "conditional", "call", "custom-call", "sort"):
        return NodeCost(float(_elements(inst)), written,
                        [float(byte_size(o.shape)) for o in inst.operands],
                        [1.0] * len(inst.operands))
    # A single instruction as its own kernel (scalar constants go inside).
    count, flops = _evaluations([inst], [inst], cache)  # operands are inputs
    util, read = [], []
    for o in inst.operands:
        n = max(1, _elements(o))
        u = count.get(id(o), 0.0) / n
        util.append(u)
        inside = o.opcode == "constant" and n == 1
        read.append(0.0 if inside else _bytes(o.shape) * min(1.0, u))
    return NodeCost(flops, written, read, util)


def _fused_reads(producer: HloInstruction, producer_cost: NodeCost, consumer: HloInstruction,
                 consumer_cost: NodeCost, utils: dict[int, float] | None
                 ) -> tuple[float, dict[int, float]]:
    """(flops, bytes read per distinct operand) of `consumer` with
    `producer` fused into it; each operand's utilization goes into `utils`
    when given (in the same order as the reads)."""
    index = next(k for k, o in enumerate(consumer.operands) if o is producer)
    u = consumer_cost.utilization[index]
    flops = consumer_cost.flops + u * producer_cost.flops
    reads: dict[int, float] = {}
    for k, o in enumerate(consumer.operands):
        if k == index:
            continue
        reads[id(o)] = consumer_cost.operand_bytes[k]
        if utils is not None:
            utils[id(o)] = consumer_cost.utilization[k]
    for k, o in enumerate(producer.operands):
        if o.opcode == "constant" and prod(o.shape.dims) <= 1:
            continue
        ub = u * producer_cost.utilization[k]
        key = id(o)
        reads[key] = max(reads.get(key, 0.0), _bytes(o.shape) * min(1.0, ub))
        if utils is not None:
            utils[key] = utils.get(key, 0.0) + ub
    return flops, reads


def fused_time(producer: HloInstruction, producer_cost: NodeCost,
               consumer: HloInstruction, consumer_cost: NodeCost) -> float:
    """`fused_cost(...).time` without building the NodeCost (the priority
    fusion pass asks this for every candidate pair): `_fused_reads`' sums
    in the same order, so the same float."""
    operands = consumer.operands
    index = next(k for k, o in enumerate(operands) if o is producer)
    u = consumer_cost.utilization[index]
    flops = consumer_cost.flops + u * producer_cost.flops
    operand_bytes = consumer_cost.operand_bytes
    reads: dict[int, float] = {}
    for k, o in enumerate(operands):
        if k != index:
            reads[id(o)] = operand_bytes[k]
    utilization = producer_cost.utilization
    get = reads.get
    for k, o in enumerate(producer.operands):
        shape = o.shape
        if o.opcode == "constant" and prod(shape.dims) <= 1:
            continue
        ub = u * utilization[k]
        key = id(o)
        reads[key] = max(get(key, 0.0), _bytes(shape) * min(1.0, ub))
    return kernel_time(sum(list(reads.values())) + consumer_cost.bytes_written, flops)


def fused_cost(producer: HloInstruction, producer_cost: NodeCost,
               consumer: HloInstruction, consumer_cost: NodeCost) -> NodeCost:
    """The cost of `consumer` with `producer` fused into it (recomputed as
    often as the consumer reads each of its elements)."""
    utils: dict[int, float] = {}
    flops, reads = _fused_reads(producer, producer_cost, consumer, consumer_cost, utils)
    return NodeCost(flops, consumer_cost.bytes_written, list(reads.values()),
                    list(utils.values()))
