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
from operator import attrgetter

from ..fusions import ELEMENTWISE_OPCODES
from ..module import HloComputation, HloInstruction
from ..shape import Shape
from .util import byte_size, is_effective_scalar

__all__ = ["HBM_BANDWIDTH", "PEAK_FLOPS", "LAUNCH_OVERHEAD", "NodeCost",
           "node_cost", "fused_cost", "fused_time", "kernel_time", "is_kernel",
           "fusion_cost", "grown_fusion_cost", "absorbed_fusion_cost", "wrapped_fusion_counts"]

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


def _add_operand_read(o: HloInstruction, count: float, util: list[float],
                      read: list[float]) -> None:
    """Appends operand `o`'s utilization (how many times the kernel reads
    each of its elements: `count` reads over its elements) and the bytes it
    reads of it (all of them at most once)."""
    shape = o.shape
    n = _elements(o)
    u = count / (n if n > 1 else 1)
    util.append(u)
    read.append(_bytes(shape) * (u if u < 1.0 else 1.0))


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


_PARAMETER_NUMBER = attrgetter("parameter_number")

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
                 reducer_cache: dict) -> tuple[dict[int, float], float, bool]:
    """How many times each instruction is evaluated when the roots are
    computed once per output element, the total flops, and whether no op
    counted apart was evaluated (the others add and compare whole numbers
    only: every count and flop term is then one)."""
    count: dict[int, float] = {id(r): float(_elements(r)) for r in roots}
    get = count.get
    op_flops = _OP_FLOPS.get
    counted_apart = _COUNTED_APART
    elementwise = ELEMENTWISE_OPCODES
    flops = 0.0
    whole = True
    for inst in reversed(order):
        e = get(id(inst), 0.0)
        if e == 0.0:
            continue
        op = inst.opcode
        if op not in counted_apart:
            # The common case (elementwise ops, broadcasts, bitcasts...):
            # what the branches below end with, without their tests; one
            # and two operands (nearly all) without the loop.
            flops += e * op_flops(op, 1.0)
            operands = inst.operands
            n = len(operands)
            if n == 0:
                continue
            if op in elementwise:
                dims = inst.shape.dims
                if n == 1:
                    o = operands[0]
                    key = id(o)
                    if o.shape.dims == dims:
                        c = get(key, 0.0)
                        count[key] = e if e > c else c
                    else:
                        count[key] = get(key, 0.0) + e
                    continue
                for o in (dict.fromkeys(operands) if n > 2 or operands[0] is operands[1]
                          else operands):
                    key = id(o)
                    if o.shape.dims == dims:
                        c = get(key, 0.0)
                        count[key] = e if e > c else c
                    else:
                        count[key] = get(key, 0.0) + e
            elif n == 1:
                key = id(operands[0])
                count[key] = get(key, 0.0) + e
            else:
                for o in dict.fromkeys(operands):
                    key = id(o)
                    count[key] = get(key, 0.0) + e
            continue
        whole = False
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
    return count, flops, whole


def node_cost(inst: HloInstruction, reducer_cache: dict | None = None) -> NodeCost:
    """The cost of `inst` as one kernel (a fusion: its body)."""
    cache = reducer_cache if reducer_cache is not None else {}
    written = float(_bytes(inst.shape))
    if not is_kernel(inst):
        return NodeCost(0.0, 0.0, [0.0] * len(inst.operands), [0.0] * len(inst.operands),
                        kernel=False)
    if inst.opcode == "fusion":
        return fusion_cost(inst, cache)[0]
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
    operands = inst.operands
    if inst.opcode not in _COUNTED_APART and inst not in operands:
        # `_evaluations([inst], [inst])` of the common case, without the
        # walk: each operand is read once per element (`e` times), none if
        # there are no elements.
        e = float(_elements(inst))
        flops = 0.0
        if e != 0.0:
            flops += e * _OP_FLOPS.get(inst.opcode, 1.0)
        count = dict.fromkeys(map(id, operands), e)
    else:
        count, flops, _ = _evaluations([inst], [inst], cache)  # operands are inputs
    util, read = [], []
    for o in operands:
        n = max(1, _elements(o))
        u = count.get(id(o), 0.0) / n
        util.append(u)
        inside = o.opcode == "constant" and n == 1
        read.append(0.0 if inside else _bytes(o.shape) * min(1.0, u))
    return NodeCost(flops, written, read, util)


def fusion_cost(inst: HloInstruction, reducer_cache: dict | None = None
                ) -> tuple[NodeCost, list[float] | None]:
    """`node_cost` of fusion `inst`, and how many times the walk evaluates
    each parameter of its body (in parameter order) when every count and
    flop term of the walk is a whole number and the flops (so every partial
    sum) are under 2**53, which makes the sum exact in any order; None
    otherwise. What `grown_fusion_cost` starts from."""
    cache = reducer_cache if reducer_cache is not None else {}
    written = float(_bytes(inst.shape))
    body = inst.attrs["calls"]
    order = body.instructions
    root = body.root
    roots = list(root.operands) if root.opcode == "tuple" else [root]
    count, flops, whole = _evaluations(roots, order, cache)
    # `body.parameters`, from the order just read.
    params = sorted([i for i in order if i.opcode == "parameter"], key=_PARAMETER_NUMBER)
    get = count.get
    util, read, counts = [], [], []
    for p, o in zip(params, inst.operands):
        c = get(id(p), 0.0)
        counts.append(c)
        _add_operand_read(o, c, util, read)
    exact = whole and flops < _EXACT and len(params) == len(inst.operands)
    return NodeCost(flops, written, read, util), counts if exact else None


# Below this, float sums of whole numbers are exact.
_EXACT = float(2 ** 53)


# Ops whose `node_cost` is not that of one evaluation per output element.
_NOT_ELEMENTWISE_KERNELS = _COUNTED_APART | {"fusion", "dot", "while", "conditional", "call",
                                             "custom-call", "sort"}


def wrapped_fusion_counts(inst: HloInstruction, cost: NodeCost) -> list[float] | None:
    """The counts `fusion_cost` gives the fusion `create_fusion(inst)` wraps
    around lone instruction `inst`, when its cost is `node_cost(inst)`
    (`cost`): what `grown_fusion_cost` starts from, without building that
    fusion's cost by a walk; None when the case is not the one below.

    The case: a kernel op evaluated once per output element (not counted
    apart), of one output, reading distinct operands none of which is an
    effective-scalar constant (`create_fusion` clones those into the body,
    which `node_cost` counts as read for free). The fusion's operands are
    then the op's, parameter k reading operand k; the walk evaluates the
    root `e` times (its elements) and so each parameter `e` times, and its
    flops are the one term `e * flops(op)`; the reads and utilizations are
    `node_cost`'s (the same formula per operand)."""
    if inst.opcode in _NOT_ELEMENTWISE_KERNELS or not is_kernel(inst) or \
            inst.shape.tuple_shapes is not None:
        return None
    operands = inst.operands
    if len({id(o) for o in operands}) != len(operands) or inst in operands:
        return None
    if any(o.opcode == "constant" and is_effective_scalar(o.shape) for o in operands):
        return None
    if not cost.flops < _EXACT:
        return None
    return [float(_elements(inst))] * len(operands)


def grown_fusion_cost(cost: NodeCost, counts: list[float], operands: list[HloInstruction],
                      producer: HloInstruction, fusion: HloInstruction,
                      producer_cost: NodeCost | None = None,
                      producer_counts: list[float] | None = None
                      ) -> tuple[NodeCost, list[float]] | None:
    """`fusion_cost` of `fusion` after `fuse_producer` fused `producer` (a
    lone instruction, not counted apart; or a fusion of one output, with
    its `fusion_cost` and counts) into it, from what it was before (`cost`,
    `counts` from `fusion_cost`, `operands`), without walking the body;
    None when the case is not the one below.

    The case: the fusion's operands are now the old ones without the
    producer, then each of the producer's but the scalar constants cloned
    in: each of those is a new parameter, read by the producer's clone
    alone. The walk of the new body then gives every old instruction the
    count it had (its users and their order are the same), the producer's
    clone the count `c` of the parameter it replaces (the same users; or,
    as a root, its elements, as that parameter had), each new parameter `c`
    (read once per evaluation of the clone, whatever the rule of its
    opcode), and adds the clone's flop term `c * flops(op)`: in another place of the
    sum, which is exact (whole numbers under 2**53) and so the same. A
    fusion producer's body walks as it did on its own when `c` is its
    elements (the count its root started from): its parameters, now the
    new ones, get its counts, and its flops are added."""
    opcode = producer.opcode
    if producer.shape.tuple_shapes is not None:
        return None
    if opcode == "fusion":
        if producer_cost is None or producer_counts is None or \
                len(producer_counts) != len(producer.operands):
            return None
    elif opcode in _COUNTED_APART:
        return None
    new = producer.operands
    if len(counts) != len(operands) or producer in new:
        return None
    index = -1
    for k, o in enumerate(operands):
        if o is producer:
            if index >= 0:
                return None
            index = k
    if index < 0:
        return None
    # (`fuse_producer` gives an operand the fusion already has, or had
    # twice, the parameter it has, and clones scalar constants in: such a
    # clone is no operand, and its walk adds no count of a parameter and a
    # zero flop term. One the fusion already reads stays its parameter.)
    cloned = [k for k, o in enumerate(new)
              if o.opcode == "constant" and is_effective_scalar(o.shape)]
    if cloned and any(new[k] in operands for k in cloned):   # identity
        return None
    now = fusion.operands
    params = [o for k, o in enumerate(new) if k not in cloned] if cloned else list(new)
    expected = operands[:index] + operands[index + 1:] + params
    if len(now) != len(expected) or any(a is not b for a, b in zip(now, expected)):
        return None
    c = counts[index]
    flops = cost.flops
    if opcode == "fusion":
        if c != float(prod(producer.shape.dims)):
            return None
        flops += producer_cost.flops
        added = producer_counts
        if cloned:
            added = [n for k, n in enumerate(added) if k not in cloned]
    else:
        if c != 0.0:
            flops += c * _OP_FLOPS.get(opcode, 1.0)
        added = [c] * len(params)
    if not flops < _EXACT:
        return None
    util = cost.utilization[:index] + cost.utilization[index + 1:]
    read = cost.operand_bytes[:index] + cost.operand_bytes[index + 1:]
    for o, count in zip(params, added):
        _add_operand_read(o, count, util, read)
    grown = counts[:index] + counts[index + 1:] + list(added)
    return NodeCost(flops, cost.bytes_written, read, util), grown


def absorbed_fusion_cost(cost: NodeCost, counts: list[float], operands: list[HloInstruction],
                         elements: int, consumer: HloInstruction, fusion: HloInstruction
                         ) -> tuple[NodeCost, list[float]] | None:
    """`fusion_cost` of `fusion` after `absorb_consumer` cloned `consumer`
    (a lone instruction, not counted apart, and its only user) into it as
    its new root, from what the fusion was before (`cost`, `counts` from
    `fusion_cost`, `operands`, and the elements of its one output), without
    walking the body; None when the case is not the one below.

    The case: the fusion's operands are now the old ones, then each of the
    consumer's others: each of those is a new parameter, read by the
    consumer's clone alone. The walk starts at the clone, `e` (its
    elements) times, which reads the old root and each new parameter `e`
    times (whatever the rule of its opcode); when `e` is the old root's
    elements, the count the old walk started it at, the old body walks as
    before (its counts, its flops, added after the clone's term
    `e * flops(op)`: exact, whole numbers under 2**53)."""
    opcode = consumer.opcode
    if opcode == "fusion" or opcode in _COUNTED_APART or consumer.shape.tuple_shapes is not None:
        return None
    if len(counts) != len(operands) or fusion in operands:
        return None
    new = [o for o in consumer.operands if o is not fusion]
    # (`absorb_consumer` gives an operand the fusion already has, or the
    # consumer reads twice, the parameter it has, and clones scalar
    # constants in.)
    now = fusion.operands
    expected = operands + new
    if len(now) != len(expected) or any(a is not b for a, b in zip(now, expected)):
        return None
    e = float(prod(consumer.shape.dims))
    if e != float(elements):
        return None
    flops = cost.flops
    if e != 0.0:
        flops += e * _OP_FLOPS.get(opcode, 1.0)
    if not flops < _EXACT:
        return None
    util = list(cost.utilization)
    read = list(cost.operand_bytes)
    for o in new:
        _add_operand_read(o, e, util, read)
    return (NodeCost(flops, float(_bytes(fusion.shape)), read, util),
            counts + [e] * len(new))


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
    index = operands.index(producer)   # identity: instructions have no __eq__
    u = consumer_cost.utilization[index]
    flops = consumer_cost.flops + u * producer_cost.flops
    operand_bytes = consumer_cost.operand_bytes
    reads = dict(zip(map(id, operands), operand_bytes))
    if len(reads) == len(operands) == len(operand_bytes):
        # Distinct operands (a fusion's always are): the loop below, in one
        # step, its keys in the same order.
        del reads[id(producer)]
    else:
        reads = {}
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
        b = _bytes(shape) * (ub if ub < 1.0 else 1.0)
        r = get(key, 0.0)
        reads[key] = b if b > r else r    # max(r, b)
    # kernel_time(bytes, flops)
    t_bytes = (sum(reads.values()) + consumer_cost.bytes_written) / HBM_BANDWIDTH
    t_flops = flops / PEAK_FLOPS
    return (t_flops if t_flops > t_bytes else t_bytes) + LAUNCH_OVERHEAD


def fused_cost(producer: HloInstruction, producer_cost: NodeCost,
               consumer: HloInstruction, consumer_cost: NodeCost) -> NodeCost:
    """The cost of `consumer` with `producer` fused into it (recomputed as
    often as the consumer reads each of its elements)."""
    utils: dict[int, float] = {}
    flops, reads = _fused_reads(producer, producer_cost, consumer, consumer_cost, utils)
    return NodeCost(flops, consumer_cost.bytes_written, list(reads.values()),
                    list(utils.values()))
