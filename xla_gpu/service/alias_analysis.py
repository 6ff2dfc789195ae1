"""Alias analysis: dataflow values merged into buffers (XLA's
HloAliasAnalysis), and the rules that say which operand an output may or
must share.

Values that must live in one buffer (merged here, unconditionally):

* a while loop, per array leaf: its init operand, the condition's and the
  body's parameter, the body's root and the while's output;
* a conditional, per array leaf: its output and every branch's root.

(bitcast, get-tuple-element, tuple, call... forward values, so they need no
merging: see `dataflow`.)

Pairs that *may* share a buffer, decided by buffer assignment once the
schedule says whether the operand is dead where the output is written:

* in-place instructions (`in_place_pairs`): dynamic-update-slice and
  scatter, fusions whose root is one of them on a fusion parameter that
  nothing else in the fusion reads (`xla_gpu.hlo.in_place`, the rule the
  emitter choice follows too), custom calls with
  `output_to_operand_aliasing`; when they cannot share, the thunk copies
  the operand into the output first;
* entry parameters donated to outputs (`input_output_alias`);
* elementwise instructions and loop fusions that read an operand only at
  the index they write (`elementwise_share_pairs`), XLA's CanShareBuffer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import HloError
from ..hlo.fusions import ELEMENTWISE_OPCODES
from ..hlo.in_place import in_place_outputs
from ..hlo.module import HloInstruction, HloModule
from .dataflow import (DataflowAnalysis, HloValue, ShapeIndex, array_leaves,
                       byte_size, sequential_callees, subshape, where)

__all__ = ["AliasAnalysis", "HloBuffer", "InputOutputAlias", "in_place_pairs",
           "elementwise_share_pairs", "parse_input_output_alias",
           "parse_output_to_operand_aliasing"]


@dataclass(frozen=True)
class InputOutputAlias:
    """Entry output leaf `output_index` may (or must) reuse parameter
    `parameter`'s leaf `parameter_index` (XLA's input_output_alias)."""
    output_index: ShapeIndex
    parameter: int
    parameter_index: ShapeIndex
    must_alias: bool = False


_SHAPE_INDEX = r"\{\s*([0-9,\s]*)\}"


def _index(text: str) -> ShapeIndex:
    return tuple(int(t) for t in text.replace(" ", "").split(",") if t)


def parse_input_output_alias(module: HloModule) -> list[InputOutputAlias]:
    """The module header's `input_output_alias={ {0}: (0, {}, may-alias) }`
    (raw text in `module.attrs`)."""
    raw = module.attrs.get("input_output_alias")
    if raw is None:
        return []
    raw = str(raw)
    entry_re = re.compile(_SHAPE_INDEX + r"\s*:\s*\(\s*(\d+)\s*,\s*" + _SHAPE_INDEX +
                          r"\s*(?:,\s*([a-z-]+)\s*)?\)")
    out = []
    body = raw.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1]
    consumed = 0
    for m in entry_re.finditer(body):
        between = body[consumed:m.start()].strip().strip(",").strip()
        if between:
            break
        kind = m.group(4) or "may-alias"
        if kind not in ("may-alias", "must-alias"):
            raise HloError(f"module '{module.name}': input_output_alias kind "
                           f"'{kind}' is neither may-alias nor must-alias")
        out.append(InputOutputAlias(_index(m.group(1)), int(m.group(2)),
                                    _index(m.group(3)), kind == "must-alias"))
        consumed = m.end()
    if body[consumed:].strip().strip(",").strip():
        raise HloError(f"module '{module.name}': cannot read input_output_alias="
                       f"{raw!r} (expected {{ {{0}}: (0, {{}}, may-alias), ... }})")
    return out


def parse_output_to_operand_aliasing(inst: HloInstruction) -> list[tuple[ShapeIndex, int, ShapeIndex]]:
    """A custom call's `output_to_operand_aliasing={{0}: (1, {})}` as
    [(output index, operand number, operand index)]."""
    raw = inst.attrs.get("output_to_operand_aliasing")
    if raw is None:
        return []
    body = str(raw).strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1]
    entry_re = re.compile(_SHAPE_INDEX + r"\s*:\s*\(\s*(\d+)\s*,\s*" + _SHAPE_INDEX + r"\s*\)")
    out = []
    consumed = 0
    for m in entry_re.finditer(body):
        if body[consumed:m.start()].strip().strip(",").strip():
            break
        out.append((_index(m.group(1)), int(m.group(2)), _index(m.group(3))))
        consumed = m.end()
    if body[consumed:].strip().strip(",").strip():
        raise HloError(f"{where(inst)}cannot read output_to_operand_aliasing={raw!r}")
    for output_index, operand, operand_index in out:
        if operand >= len(inst.operands):
            raise HloError(f"{where(inst)}output_to_operand_aliasing names operand "
                           f"{operand}; it has {len(inst.operands)}")
        try:
            out_shape = subshape(inst.shape, output_index)
            in_shape = subshape(inst.operands[operand].shape, operand_index)
        except ValueError as e:
            raise HloError(f"{where(inst)}output_to_operand_aliasing: {e}") from None
        if byte_size(out_shape) != byte_size(in_shape) or out_shape.is_tuple != in_shape.is_tuple:
            raise HloError(f"{where(inst)}output_to_operand_aliasing pairs output "
                           f"{output_index} ({out_shape}) with operand {operand} "
                           f"{operand_index} ({in_shape}) of another size")
    return out


def in_place_pairs(inst: HloInstruction) -> list[tuple[int, ShapeIndex, ShapeIndex]]:
    """[(operand number, operand index, output index)]: the outputs `inst`
    writes in place over an operand, as its kernel or handler expects
    (XLA's GetInPlaceInputOutputPairs): dynamic-update-slice, scatter and
    their fusions by `xla_gpu.hlo.in_place`'s rule (the one the emitter
    choice follows), custom calls by their output_to_operand_aliasing."""
    if inst.opcode == "custom-call":
        return [(operand, operand_index, output_index) for output_index, operand, operand_index
                in parse_output_to_operand_aliasing(inst)]
    return [(operand, (), output_index) for operand, output_index in in_place_outputs(inst)]


def _reads_only_elementwise(param: HloInstruction) -> bool:
    """Every read of fusion parameter `param` is an elementwise op of the
    same dimensions, all the way to the fusion's outputs (so a thread reads
    the element it writes)."""
    dims = param.shape.dims
    stack = [param]
    seen = {id(param)}
    while stack:
        inst = stack.pop()
        for user in inst.users:
            if user.opcode == "tuple" and user is user.parent.root:
                continue
            if user.opcode not in ELEMENTWISE_OPCODES or user.opcode == "map" or \
                    user.shape.is_tuple or tuple(user.shape.dims) != tuple(dims):
                return False
            if any(tuple(o.shape.dims) != tuple(dims) for o in user.operands):
                return False  # a scalar operand would be broadcast implicitly
            if id(user) not in seen:
                seen.add(id(user))
                stack.append(user)
    return True


def _same_storage(a, b) -> bool:
    """Same dimensions, layout and bytes: element i of one is at the same
    address as element i of the other."""
    return not a.is_tuple and not b.is_tuple and \
        tuple(a.dims) == tuple(b.dims) and \
        a.minor_to_major == b.minor_to_major and byte_size(a) == byte_size(b)


def elementwise_share_pairs(inst: HloInstruction) -> list[tuple[int, ShapeIndex, ShapeIndex]]:
    """[(operand number, operand index, output index)]: outputs that may
    reuse an operand's buffer because `inst` reads that operand only at
    the element it writes (same dimensions, layout and element size), as
    XLA's CanShareBuffer for elementwise ops and loop fusions. A copy never
    shares (copies exist to make a second buffer)."""
    out_leaves = array_leaves(inst.shape)
    if inst.opcode in ELEMENTWISE_OPCODES and inst.opcode not in ("map", "copy"):
        if inst.shape.is_tuple:
            return []
        return [(k, (), ()) for k, operand in enumerate(inst.operands)
                if _same_storage(operand.shape, inst.shape)]
    if inst.opcode != "fusion" or inst.attrs.get("kind") != "kLoop":
        return []
    comp = inst.attrs.get("calls")
    if comp is None or isinstance(comp, list) or comp.root is None:
        return []
    dims = {tuple(s.dims) for _, s in out_leaves}
    if len(dims) != 1:
        return []
    (out_dims,) = dims
    pairs = []
    params = {p.parameter_number: p for p in comp.parameters}
    for k, operand in enumerate(inst.operands):
        param = params.get(k)
        if param is None or operand.shape.is_tuple or \
                tuple(operand.shape.dims) != out_dims or not _reads_only_elementwise(param):
            continue
        readers = _outputs_reading(param, comp) if inst.shape.is_tuple else None
        for output_index, out_shape in out_leaves:
            if not _same_storage(operand.shape, out_shape):
                continue
            # Of several outputs, only the parameter's sole reader may write
            # over it: the kernel loads parameters as invariant memory, which
            # the code generator may load after a store, so another output's
            # store into the parameter's bytes could precede the reader's load
            # of the same element.
            if inst.shape.is_tuple and (readers is None or not readers <= {output_index}):
                continue
            pairs.append((k, (), output_index))
    return pairs


def _outputs_reading(param: HloInstruction, comp) -> set[ShapeIndex] | None:
    """The output indices of multi-output fusion computation `comp` whose
    values are computed from `param`; None when its root is no flat tuple
    of arrays (unknown)."""
    root = comp.root
    if root.opcode != "tuple" or any(o.shape.is_tuple for o in root.operands):
        return None
    reached = {id(param)}
    stack = [param]
    while stack:
        for user in stack.pop().users:
            if user is not root and id(user) not in reached:
                reached.add(id(user))
                stack.append(user)
    return {(k,) for k, o in enumerate(root.operands) if id(o) in reached}


class HloBuffer:
    """A set of values that live in one place; `id` is stable for one
    analysis."""

    def __init__(self, id: int, values: list[HloValue]):
        self.id = id
        self.values = values

    @property
    def size(self) -> int:
        return max((v.size for v in self.values), default=0)

    def __repr__(self) -> str:
        return f"HloBuffer({self.id}, {[v.name() for v in self.values]})"


class AliasAnalysis:
    """Union-find of dataflow values. `merge` joins two buffers (buffer
    assignment adds the optional merges once it has checked them)."""

    def __init__(self, dataflow: DataflowAnalysis):
        self.dataflow = dataflow
        self._parent = list(range(len(dataflow.values)))
        self._members: dict[int, list[int]] = {i: [i] for i in range(len(dataflow.values))}
        self._merge_control_flow()

    def find(self, value: HloValue | int) -> int:
        i = value if isinstance(value, int) else value.id
        root = i
        while self._parent[root] != root:
            root = self._parent[root]
        while self._parent[i] != root:
            self._parent[i], i = root, self._parent[i]
        return root

    def merge(self, a: HloValue, b: HloValue) -> int:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return ra
        if len(self._members[ra]) < len(self._members[rb]):
            ra, rb = rb, ra
        self._parent[rb] = ra
        self._members[ra].extend(self._members.pop(rb))
        return ra

    def same_buffer(self, a: HloValue, b: HloValue) -> bool:
        return self.find(a) == self.find(b)

    def buffer_values(self, value: HloValue) -> list[HloValue]:
        values = self.dataflow.values
        return [values[i] for i in sorted(self._members[self.find(value)])]

    def buffers(self) -> list[HloBuffer]:
        """The buffers, ordered by their first value; ids 0..n-1."""
        values = self.dataflow.values
        roots = sorted(self._members, key=lambda r: min(self._members[r]))
        return [HloBuffer(k, [values[i] for i in sorted(self._members[r])])
                for k, r in enumerate(roots)]

    def _merge_control_flow(self) -> None:
        df = self.dataflow
        for comp in df.computations:
            for inst in comp.instructions:
                if inst.opcode == "while":
                    self._merge_while(inst)
                elif inst.opcode == "conditional":
                    self._merge_conditional(inst)

    def _merge_while(self, inst: HloInstruction) -> None:
        df = self.dataflow
        callees = dict(sequential_callees(inst))
        cond, body = callees["condition"], callees["body"]
        if len(inst.operands) != 1:
            raise HloError(f"{where(inst)}a while takes one operand (its init tuple)")
        init = inst.operands[0]
        for comp in (cond, body):
            if len(comp.parameters) != 1 or comp.root is None:
                raise HloError(f"{where(inst)}computation '{comp.name}' must take "
                               "one parameter and have a root")
        for index, _ in array_leaves(inst.shape):
            mine = df.value_at(inst, index)
            for other_inst in (init, cond.parameters[0], body.parameters[0], body.root):
                if not df.has_value(other_inst, index):
                    raise HloError(f"{where(inst)}'{other_inst.name}' has no array at "
                                   f"shape index {index} like the loop state {inst.shape}")
                self.merge(mine, df.value_at(other_inst, index))

    def _merge_conditional(self, inst: HloInstruction) -> None:
        df = self.dataflow
        for _, branch in sequential_callees(inst):
            if branch.root is None:
                raise HloError(f"{where(inst)}branch '{branch.name}' has no root")
            for index, _ in array_leaves(inst.shape):
                if not df.has_value(branch.root, index):
                    raise HloError(f"{where(inst)}branch '{branch.name}' returns "
                                   f"{branch.root.shape}, not {inst.shape}")
                self.merge(df.value_at(inst, index), df.value_at(branch.root, index))
