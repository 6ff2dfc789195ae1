"""Dataflow analysis: the values of a module (XLA's HloDataflowAnalysis).

A *value* is an array that some instruction writes: one per array leaf of
an instruction's output (tuple elements included, addressed by a shape
index such as `(1,)` or `(0, 2)`). Instructions that only pass arrays on
define no value of their own; their output leaves *forward* the values of
their operands:

    bitcast                      its operand's value
    get-tuple-element            the operand's leaves under `index`
    tuple                        its operands' values, one element each
    optimization-barrier, domain the operand's values
    add-dependency               operand 0's values
    call                         the callee root's values; the callee's
                                 parameters forward the call's operands
    *-done, async-update         their start's result (the start of an
                                 async collective: its element 0 holds
                                 its operands' values)
    conditional branch params    the conditional's operand of that branch

While loops and conditionals define *phi* values (XLA's SSA form): the
while's output, its body and condition parameters, and the conditional's
output name storage that other values fill; alias analysis puts them in
one buffer with those values. Tuple-shaped positions hold no value (XLA:GPU
does not materialize tuples); token leaves hold none either.

Only *sequential* computations are analysed (the ENTRY and the
computations that while, conditional and call run); fusion bodies,
reducers and comparators are read by the kernels that run them.

numpy only, no MLIR. Graph walks are iterative.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

from ..errors import HloError, ResourceError
from ..hlo.graph import post_order
from ..hlo.module import CONTROL_PREDECESSORS, HloComputation, HloInstruction, HloModule
from ..hlo.shape import ELEMENT_TYPES, Shape

__all__ = ["ShapeIndex", "HloValue", "HloUse", "DataflowAnalysis",
           "array_leaves", "subshape", "byte_size", "sequential_callees",
           "topological_order", "where", "INT64_MAX"]

ShapeIndex = tuple[int, ...]
INT64_MAX = (1 << 63) - 1

# Opcodes whose output leaves are their operands' values.
FORWARDING_OPCODES = frozenset({
    "bitcast", "get-tuple-element", "tuple", "opt-barrier", "optimization-barrier",
    "domain", "add-dependency",
})
# The async pairs of collectives (the work is done at the start): a done's
# (or update's) output is its start's value at this shape index, as in
# XLA's dataflow; they read nothing themselves.
ASYNC_DONE_INDEX: dict[str, tuple[int, ...]] = {
    "all-reduce-done": (), "all-gather-done": (1,), "collective-permute-done": (1,),
    "async-done": (1,), "async-update": (),
}
# Starts whose value is (operands, results, context...): element 0 holds
# the operands' values (one operand: itself; several: a tuple of them).
_STARTS_WITH_OPERANDS = frozenset({"all-gather-start", "collective-permute-start",
                                   "async-start"})


def array_leaves(shape: Shape) -> list[tuple[ShapeIndex, Shape]]:
    """(shape index, array shape) of every array leaf, depth first; tokens
    and empty tuples have none."""
    out: list[tuple[ShapeIndex, Shape]] = []
    stack: list[tuple[ShapeIndex, Shape]] = [((), shape)]
    while stack:
        index, s = stack.pop()
        if s.is_tuple:
            for k in range(len(s.tuple_shapes) - 1, -1, -1):
                stack.append((index + (k,), s.tuple_shapes[k]))
        elif s.element_type != "token":
            out.append((index, s))
    return out


def subshape(shape: Shape, index: ShapeIndex) -> Shape:
    """The shape at `index` (ValueError when the index does not exist)."""
    s = shape
    for k in index:
        if not s.is_tuple or not 0 <= k < len(s.tuple_shapes):
            raise ValueError(f"shape index {index} does not exist in {shape}")
        s = s.tuple_shapes[k]
    return s


def byte_size(shape: Shape) -> int:
    """Bytes of one array as the kernels store it: elements x element bytes
    (pred and the sub-byte integers take one byte per element)."""
    if shape.is_tuple or shape.element_type == "token":
        return 0
    dtype = ELEMENT_TYPES.get(shape.element_type)
    if dtype is None:
        raise HloError(f"unknown element type '{shape.element_type}' in {shape}")
    return prod(shape.dims) * dtype.itemsize


@dataclass(frozen=True)
class HloUse:
    """`instruction` reads the value as (a leaf of) operand `operand_number`
    at `operand_index`."""
    instruction: HloInstruction
    operand_number: int
    operand_index: ShapeIndex


@dataclass(eq=False)
class HloValue:
    """One array written by `instruction` at `index`. `positions` are the
    (instruction, index) places that hold it, the defining one first;
    `uses` the instructions that read it (forwarding instructions are
    positions, not uses)."""
    id: int
    instruction: HloInstruction
    index: ShapeIndex
    shape: Shape
    size: int
    is_phi: bool = False
    positions: list[tuple[HloInstruction, ShapeIndex]] = field(default_factory=list)
    uses: list[HloUse] = field(default_factory=list)

    @property
    def computation(self) -> HloComputation:
        return self.instruction.parent

    def name(self) -> str:
        index = "{" + ",".join(map(str, self.index)) + "}"
        return f"{self.instruction.name}{index}"

    def __repr__(self) -> str:
        return f"<{self.id} {self.name()}{' phi' if self.is_phi else ''}>"


def where(inst: HloInstruction) -> str:
    """`line N: instruction 'x' (op): ` for messages about `inst`."""
    line = f"line {inst.location.line}: " if inst.location else ""
    comp = f" in '{inst.parent.name}'" if inst.parent is not None else ""
    return f"{line}instruction '{inst.name}' ({inst.opcode}){comp}: "


def topological_order(comp: HloComputation) -> list[HloInstruction]:
    """comp's instructions with every operand and control predecessor
    first, the textual order kept where it is valid (iterative)."""
    insts = comp.instructions
    by_name = {i.name: i for i in insts}
    members = {id(i) for i in insts}

    def preds(node: HloInstruction) -> list[HloInstruction]:
        out = list(node.operands) + [
            by_name[n] for n in node.attrs.get(CONTROL_PREDECESSORS) or () if n in by_name]
        for pred in out:
            if id(pred) not in members:
                raise HloError(f"{where(node)}operand '{pred.name}' is not in "
                               f"computation '{comp.name}'")
        return out

    def refuse_cycle(node: HloInstruction) -> None:
        raise HloError(f"{where(node)}is part of a cycle")

    return post_order(insts, preds, refuse_cycle)


def sequential_callees(inst: HloInstruction) -> list[tuple[str, HloComputation]]:
    """The computations `inst` runs as sequences of thunks, with their role:
    a while's condition and body, a conditional's branches, a call's
    callee. Fusion bodies, reducers and comparators are not sequential."""
    attrs = inst.attrs
    op = inst.opcode
    if op == "while":
        return [("condition", attrs["condition"]), ("body", attrs["body"])]
    if op == "conditional":
        if "branch_computations" in attrs:
            return [("branch", c) for c in attrs["branch_computations"]]
        return [("branch", attrs["true_computation"]),
                ("branch", attrs["false_computation"])]
    if op == "call":
        callee = attrs.get("to_apply")
        if callee is None:
            callee = attrs.get("calls")
            if isinstance(callee, list):
                callee = callee[0] if len(callee) == 1 else None
        if callee is None:
            raise inst.error("a call needs one computation (to_apply=)")
        return [("call", callee)]
    return []


class DataflowAnalysis:
    """The values of every sequential computation of `module`.

        df = DataflowAnalysis(module)
        df.value_at(inst, (1,))    # the HloValue at leaf {1} of inst
        df.leaf_values(inst)       # [(index, HloValue)] of its array leaves
        df.computations            # sequential computations, callers first
        df.caller(comp)            # (instruction, role) that runs comp
    """

    def __init__(self, module: HloModule, allow_shared_calls: bool = False):
        self.module = module
        self.entry = module.entry
        self.values: list[HloValue] = []
        self._at: dict[int, dict[ShapeIndex, HloValue]] = {}
        self._callers: dict[int, tuple[HloInstruction, str]] = {}
        # With allow_shared_calls (for scheduling), a computation that
        # several `call`s run is analysed once: its parameters and the
        # calls' results define values of their own.
        self.allow_shared_calls = allow_shared_calls
        self._shared: set[int] = set()
        self.computations: list[HloComputation] = []
        self._find_sequential_computations()
        self._compute_values()
        self._compute_uses()

    # ------------------------------------------------------------ call graph

    def _find_sequential_computations(self) -> None:
        seen = {id(self.entry)}
        order = [self.entry]
        k = 0
        while k < len(order):
            comp = order[k]
            k += 1
            for inst in comp.instructions:
                for role, callee in sequential_callees(inst):
                    if not isinstance(callee, HloComputation):
                        raise inst.error(f"its {role} computation is missing")
                    if callee is self.entry:
                        raise inst.error("calls the ENTRY computation")
                    if id(callee) in seen:
                        other, other_role = self._callers.get(id(callee), (None, None))
                        if self.allow_shared_calls and role == "call" and other_role == "call":
                            self._shared.add(id(callee))
                            continue
                        raise inst.error(
                            f"computation '{callee.name}' is also run by "
                            f"'{other.name if other else '?'}': each while body, "
                            "condition, branch and callee must have one caller "
                            "(flatten the call graph first)")
                    seen.add(id(callee))
                    self._callers[id(callee)] = (inst, role)
                    order.append(callee)
        self.computations = order

    def caller(self, comp: HloComputation) -> tuple[HloInstruction, str] | None:
        """The instruction running `comp` and its role ('condition', 'body',
        'branch', 'call'); None for the ENTRY."""
        return self._callers.get(id(comp))

    def is_sequential(self, comp: HloComputation) -> bool:
        return comp is self.entry or id(comp) in self._callers

    # ---------------------------------------------------------------- values

    def _define(self, inst: HloInstruction, index: ShapeIndex, shape: Shape,
                is_phi: bool = False) -> HloValue:
        size = byte_size(shape)
        if size > INT64_MAX:
            raise ResourceError(
                f"{where(inst)}its array {shape} at shape index {index} takes "
                f"{size} bytes, more than int64 can address")
        value = HloValue(len(self.values), inst, index, shape, size, is_phi)
        value.positions.append((inst, index))
        self.values.append(value)
        self._at.setdefault(id(inst), {})[index] = value
        return value

    def _forward(self, inst: HloInstruction, index: ShapeIndex, value: HloValue) -> None:
        value.positions.append((inst, index))
        self._at.setdefault(id(inst), {})[index] = value

    def _forward_all(self, inst: HloInstruction, source: HloInstruction,
                     source_prefix: ShapeIndex = (), prefix: ShapeIndex = ()) -> None:
        """inst's leaves under `prefix` hold source's leaves under
        `source_prefix`."""
        source_values = self._at.get(id(source), {})
        for index, _ in array_leaves(subshape(inst.shape, prefix)):
            value = source_values.get(source_prefix + index)
            if value is None:
                raise inst.error(
                    f"operand '{source.name}' has no array at shape index "
                    f"{source_prefix + index} (shapes do not match)")
            self._forward(inst, prefix + index, value)

    def _compute_values(self) -> None:
        # Computations are analysed in order, a callee before the rest of
        # its caller only where values flow in (call, conditional branch
        # parameters forward the caller's operands; a call's output
        # forwards the callee's root). A stack of (computation, position)
        # frames keeps this iterative.
        done: set[int] = set()
        stack: list[list] = [[self.entry, topological_order(self.entry), 0]]
        while stack:
            frame = stack[-1]
            comp, insts, k = frame
            if k == len(insts):
                stack.pop()
                done.add(id(comp))
                continue
            inst = insts[k]
            pending = [c for _, c in sequential_callees(inst) if id(c) not in done]
            if pending:
                # Analyse the callees first (their parameters read the
                # operands, which are done: they precede `inst`).
                for callee in reversed(pending):
                    done.add(id(callee))  # scheduled once
                    stack.append([callee, topological_order(callee), 0])
                continue
            frame[2] = k + 1
            self._define_instruction(inst)

    def _define_instruction(self, inst: HloInstruction) -> None:
        op = inst.opcode
        if op == "parameter":
            caller = self._callers.get(id(inst.parent))
            if caller is not None and id(inst.parent) in self._shared:
                for index, shape in array_leaves(inst.shape):
                    self._define(inst, index, shape, is_phi=True)
                return
            if caller is not None:
                call, role = caller
                if role == "call":
                    if inst.parameter_number >= len(call.operands):
                        raise inst.error(f"parameter {inst.parameter_number} but "
                                         f"'{call.name}' passes {len(call.operands)} operands")
                    self._forward_all(inst, call.operands[inst.parameter_number])
                    return
                if role == "branch":
                    branches = [c for _, c in sequential_callees(call)]
                    b = next(i for i, c in enumerate(branches) if c is inst.parent)
                    if inst.parameter_number != 0 or b + 1 >= len(call.operands):
                        raise inst.error(f"branch {b} of '{call.name}' takes one "
                                         "parameter, its operand {b + 1}")
                    self._forward_all(inst, call.operands[b + 1])
                    return
                for index, shape in array_leaves(inst.shape):
                    self._define(inst, index, shape, is_phi=True)
                return
        elif op == "bitcast":
            if not inst.operands:
                raise inst.error("bitcast needs an operand")
            if inst.shape.is_tuple or inst.operands[0].shape.is_tuple:
                raise inst.error("bitcast of a tuple")
            self._forward_all(inst, inst.operands[0])
            return
        elif op == "get-tuple-element":
            index = inst.attrs.get("index")
            if not inst.operands or not isinstance(index, int):
                raise inst.error("get-tuple-element needs one operand and index=")
            self._forward_all(inst, inst.operands[0], (index,))
            return
        elif op == "tuple":
            if not inst.shape.is_tuple or \
                    len(inst.shape.tuple_shapes) != len(inst.operands):
                raise inst.error("tuple shape does not match its operands")
            for k, operand in enumerate(inst.operands):
                self._forward_all(inst, operand, (), (k,))
            return
        elif op in ("opt-barrier", "optimization-barrier", "domain", "add-dependency"):
            if not inst.operands:
                raise inst.error(f"{op} needs an operand")
            self._forward_all(inst, inst.operands[0])
            return
        elif op == "call" and id(sequential_callees(inst)[0][1]) not in self._shared:
            (_, callee), = sequential_callees(inst)
            if callee.root is None:
                raise inst.error(f"callee '{callee.name}' has no root")
            self._forward_all(inst, callee.root)
            return
        elif op in ASYNC_DONE_INDEX:
            if len(inst.operands) != 1:
                raise inst.error(f"{op} takes its start as its one operand")
            self._forward_all(inst, inst.operands[0], ASYNC_DONE_INDEX[op])
            return
        elif op in _STARTS_WITH_OPERANDS and inst.shape.is_tuple and \
                inst.shape.tuple_shapes:
            first = inst.shape.tuple_shapes[0]
            if first.is_tuple and op != "async-start" and len(inst.operands) == 1:
                # One tuple operand is element 0 as a whole.
                self._forward_all(inst, inst.operands[0], (), (0,))
            elif first.is_tuple:
                if len(first.tuple_shapes) != len(inst.operands):
                    raise inst.error(f"element 0 of its shape has {len(first.tuple_shapes)} "
                                     f"operands, it takes {len(inst.operands)}")
                for k, operand in enumerate(inst.operands):
                    self._forward_all(inst, operand, (), (0, k))
            else:
                if len(inst.operands) != 1:
                    raise inst.error(f"element 0 of its shape is one operand, it takes "
                                     f"{len(inst.operands)}")
                self._forward_all(inst, inst.operands[0], (), (0,))
            for index, shape in array_leaves(inst.shape):
                if index[0] != 0:
                    self._define(inst, index, shape)
            return
        is_phi = op in ("while", "conditional")
        for index, shape in array_leaves(inst.shape):
            self._define(inst, index, shape, is_phi=is_phi)

    def _compute_uses(self) -> None:
        for comp in self.computations:
            for inst in comp.instructions:
                op = inst.opcode
                if op in FORWARDING_OPCODES or op in ASYNC_DONE_INDEX or \
                        (op == "call" and id(sequential_callees(inst)[0][1]) not in self._shared):
                    # Positions, not reads (a call's callee reads them
                    # through its parameters). add-dependency's token is
                    # not an array.
                    continue
                for k, operand in enumerate(inst.operands):
                    for index, value in self._at.get(id(operand), {}).items():
                        value.uses.append(HloUse(inst, k, index))

    # --------------------------------------------------------------- queries

    def value_at(self, inst: HloInstruction, index: ShapeIndex = ()) -> HloValue:
        values = self._at.get(id(inst))
        if values is None:
            raise inst.error("is not in a sequential computation (no dataflow "
                             "values: fusion bodies and reducers have none)")
        value = values.get(tuple(index))
        if value is None:
            raise inst.error(f"has no array at shape index {tuple(index)} of "
                             f"{inst.shape} (tuples and tokens hold no buffer)")
        return value

    def has_value(self, inst: HloInstruction, index: ShapeIndex = ()) -> bool:
        return tuple(index) in self._at.get(id(inst), {})

    def leaf_values(self, inst: HloInstruction) -> list[tuple[ShapeIndex, HloValue]]:
        return sorted(self._at.get(id(inst), {}).items())

    def defined_values(self, inst: HloInstruction) -> list[HloValue]:
        return [v for _, v in self.leaf_values(inst) if v.instruction is inst]
