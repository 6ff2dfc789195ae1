"""CopyInsertion: copies only where a value still needed would otherwise
be overwritten in place, or where XLA's special cases need a buffer of
their own:

* an in-place update (a dynamic-update-slice or scatter, alone or as the
  root of a fusion, whose result shares its operand's buffer) of a value
  that is an ENTRY parameter (not donated), a constant, or read by anything
  else (its other readers may run after the update);
* a while loop's initial state: elements that are parameters, constants,
  read elsewhere (after the loop, typically) or passed twice — except
  elements the body passes through unchanged and nothing reads after the
  loop;
* a while body's result elements that are not the loop state's own element
  passed through (another element's value, a constant, a duplicate — a
  value and a bitcast of it are one buffer, so a duplicate too), so that
  each carried buffer is written once per iteration; and those that an
  inner loop or a conditional computes while it still reads the old value
  of the element (its branches would overwrite what they read);
* the ENTRY's outputs that are parameters, constants or the same value
  twice (each output gets its own buffer), except a parameter returned at
  the output that must alias it;
* what must-alias donations need under any schedule (`donation_copies`):
  control edges, or a copy of the output into the parameter's buffer;
* a conditional's branch results (XLA copies every element of every
  branch root, then removes the copies it can): each element of the
  conditional is one buffer that every branch writes, so a branch copies a
  constant, a value it returns at two elements, and an operand it returns
  unchanged unless that operand can become the result's buffer: it dies at
  the conditional (nothing else reads it, not an ENTRY parameter) and no
  branch that writes the element can still read it.

Tokens have no buffer and are never copied.
"""

from __future__ import annotations

from ..graph import through_bitcasts
from ..in_place import in_place_outputs
from ..module import HloComputation, HloInstruction, HloModule
from .donation_copies import honour_must_alias_donations, own_output_indices
from .pipeline import HloPass
from .util import program_computations

__all__ = ["CopyInsertion", "in_place_operands"]


def in_place_operands(inst: HloInstruction) -> list[int]:
    """Operand indices whose buffer `inst` updates in place (the rule of
    `xla_gpu.hlo.in_place`, which buffer sharing and the emitters follow)."""
    return sorted({number for number, _ in in_place_outputs(inst)})


def _is_array(shape) -> bool:
    """Whether a value of `shape` has a buffer: tuples are not materialized
    and tokens hold no bytes, so neither is ever copied."""
    return not shape.is_tuple and shape.element_type != "token"


def _is_read_only(value: HloInstruction, comp: HloComputation,
                  borrowed: frozenset[int] = frozenset()) -> bool:
    """Whether `value`'s buffer may not be written here: a constant, an
    ENTRY parameter (not donated), or a parameter of a computation in
    `borrowed` (ids of conditional branches: a branch's parameter is the
    conditional's operand, a buffer of the caller that may be an ENTRY
    parameter or read after the conditional)."""
    source = through_bitcasts(value)
    # An element of a tuple parameter (a branch's operand tuple) is that
    # parameter's buffer as much as the parameter is.
    while source.opcode == "get-tuple-element":
        source = through_bitcasts(source.operands[0])
    return source.opcode == "constant" or (source.opcode == "parameter" and (
        comp.is_entry or id(comp) in borrowed))


def _other_readers(value: HloInstruction, reader: HloInstruction) -> bool:
    """Whether anything but `reader` reads `value`'s buffer: any user of
    the bitcasts that alias it, or the computation's result."""
    source = through_bitcasts(value)
    stack, seen = [source], set()
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if v is v.parent.root:
            return True
        for u in v.users:
            if u.opcode == "bitcast":
                stack.append(u)
            elif u is not reader:
                return True
    return False


def _passed_through(body: HloComputation) -> set[int]:
    """Loop-state elements the body returns unchanged (root element k is
    element k of the parameter)."""
    root = body.root
    params = body.parameters
    if root.opcode != "tuple" or len(params) != 1:
        return set()
    return {k for k, e in enumerate(root.operands)
            if e.opcode == "get-tuple-element" and e.operands[0] is params[0]
            and e.attrs["index"] == k}


def _reads_state_element(value: HloInstruction, param: HloInstruction, k: int) -> bool:
    """Whether `value` (through tuples and bitcasts) holds element k of the
    loop state `param`, or the whole state."""
    stack, seen = [value], set()
    while stack:
        v = through_bitcasts(stack.pop())
        if id(v) in seen:
            continue
        seen.add(id(v))
        if v is param or (v.opcode == "get-tuple-element" and v.operands[0] is param
                          and v.attrs["index"] == k):
            return True
        if v.opcode == "tuple":
            stack.extend(v.operands)
    return False


def _conditional_reads_element(result: HloInstruction, param: HloInstruction,
                               k: int) -> bool:
    """Whether loop-state element k of a while body is `result`, an element
    of a conditional that is handed the body's own element k (jax's
    `lax.cond` on the carry, as in expm's squaring loop). Without a copy the
    conditional's result would live in the state's buffer k: a branch would
    write it there while its other ops still read the old value."""
    if result.opcode != "get-tuple-element":
        return False
    cond = result.operands[0]
    return cond.opcode == "conditional" and any(
        _reads_state_element(operand, param, k) for operand in cond.operands[1:])


def _inner_loop_carries_element(result: HloInstruction, param: HloInstruction,
                                k: int) -> bool:
    """Whether loop-state element k of a while body is `result`, an element
    of an inner while loop that also carries the body's own element k at
    another of its elements (a fori_loop inside a scan whose carry feeds
    both). Without a copy both would live in the outer state's buffer k:
    the inner loop would write its result there while still reading the
    element it carries."""
    if result.opcode != "get-tuple-element":
        return False
    inner = result.operands[0]
    if inner.opcode != "while" or inner.operands[0].opcode != "tuple":
        return False
    for j, element in enumerate(inner.operands[0].operands):
        source = through_bitcasts(element)
        if j != result.attrs["index"] and source.opcode == "get-tuple-element" and \
                source.operands[0] is param and source.attrs["index"] == k:
            return True
    return False


class CopyInsertion(HloPass):
    name = "copy-insertion"

    def run(self, module: HloModule) -> bool:
        module.link()
        changed = False
        self._borrowed = frozenset(
            id(branch) for comp in program_computations(module)
            for inst in comp.instructions if inst.opcode == "conditional"
            for branch in _branches(inst))
        for comp in program_computations(module):
            for inst in list(comp.instructions):
                for k in in_place_operands(inst):
                    operand = inst.operands[k]
                    if _is_read_only(operand, comp, self._borrowed) or \
                            _other_readers(operand, inst):
                        copy = comp.add("copy", operand.shape, [operand])
                        inst.replace_operand_with(k, copy)
                        changed = True
                if inst.opcode == "while":
                    changed |= self._while_init(comp, inst)
                    changed |= self._while_body(inst.attrs["body"])
                elif inst.opcode == "conditional":
                    changed |= self._conditional(inst)
            if comp.is_entry:
                changed |= self._entry_outputs(comp)
        changed |= honour_must_alias_donations(module)
        return changed

    @staticmethod
    def _copy(comp: HloComputation, value: HloInstruction) -> HloInstruction:
        return comp.add("copy", value.shape, [value])

    def _while_init(self, comp: HloComputation, loop: HloInstruction) -> bool:
        init = loop.operands[0]
        if not init.shape.is_tuple:
            if not _is_array(init.shape):
                return False
            if _is_read_only(init, comp, self._borrowed) or _other_readers(init, loop):
                loop.replace_operand_with(0, self._copy(comp, init))
                return True
            return False
        if init.opcode != "tuple" or len(init.users) != 1:
            # Copy every element of a shared or opaque state tuple.
            leaves = [comp.add("get-tuple-element", s, [init], index=k)
                      for k, s in enumerate(init.shape.tuple_shapes)]
            leaves = [self._copy(comp, e) if _is_array(e.shape) or e.shape.is_tuple else e
                      for e in leaves]
            loop.replace_operand_with(0, comp.add("tuple", init.shape, leaves))
            return True
        changed = False
        seen: set[int] = set()
        unchanged = _passed_through(loop.attrs["body"])
        read_after = {u.attrs["index"] for u in loop.users if u.opcode == "get-tuple-element"}
        if any(u.opcode != "get-tuple-element" for u in loop.users) or loop is comp.root:
            read_after = set(range(len(init.operands)))
        for k, element in enumerate(list(init.operands)):
            if not _is_array(element.shape):
                continue
            # One buffer whatever bitcasts view it: an element and a bitcast
            # of it are the same bytes.
            key = id(through_bitcasts(element))
            if k in unchanged and k not in read_after:
                seen.add(key)
                continue  # never written, not read after: no buffer of its own
            if _is_read_only(element, comp, self._borrowed) or key in seen or \
                    _other_readers(element, init):
                init.replace_operand_with(k, self._copy(comp, element))
                changed = True
            seen.add(key)
        return changed

    def _while_body(self, body: HloComputation) -> bool:
        root = body.root
        if root.opcode != "tuple":
            return False
        params = body.parameters
        if len(params) != 1:
            return False
        param = params[0]
        changed = False
        seen: set[int] = set()
        for k, element in enumerate(list(root.operands)):
            if not _is_array(element.shape):
                continue
            source = through_bitcasts(element)
            other_element = source.opcode == "get-tuple-element" and \
                source.operands[0] is param and source.attrs["index"] != k
            # A value returned at two elements, directly or through a
            # bitcast (the simplifier turns a dynamic-update-slice that
            # overwrites a whole [1] array into a bitcast of the update):
            # the later element gets a copy.
            if source.opcode == "constant" or other_element or id(source) in seen or \
                    (source.opcode == "parameter") or \
                    _inner_loop_carries_element(source, param, k) or \
                    _conditional_reads_element(source, param, k):
                root.replace_operand_with(k, self._copy(body, element))
                changed = True
            seen.add(id(source))
        return changed

    def _entry_outputs(self, comp: HloComputation) -> bool:
        root = comp.root
        if root.opcode != "tuple":
            if _is_read_only(root, comp) and _is_array(root.shape):
                comp.set_root(self._copy(comp, root))
                return True
            return False
        changed = False
        # A parameter returned at the output that must alias it is that
        # output already: no copy (nor for a later duplicate's sake).
        own = own_output_indices(comp)
        seen: set[int] = {id(root.operands[k]) for (k,) in own}
        for k, element in enumerate(list(root.operands)):
            if not _is_array(element.shape) or (k,) in own:
                continue
            key = id(through_bitcasts(element))
            if _is_read_only(element, comp) or key in seen:
                root.replace_operand_with(k, self._copy(comp, element))
                changed = True
            seen.add(key)
        return changed

    # ------------------------------------------------------- conditionals

    def _conditional(self, cond: HloInstruction) -> bool:
        branches = _branches(cond)
        if len(branches) + 1 != len(cond.operands) or \
                any(len(b.parameters) != 1 or b.root is None for b in branches):
            return False
        # What each branch returns at each array leaf: the instruction that
        # defines it (through tuples, get-tuple-elements, bitcasts and the
        # branch parameter into the caller) and whether it is the branch's
        # own value.
        leaves = _array_leaf_indices(cond.shape)
        sources = [{index: _branch_source(b, cond, n, index) for index in leaves}
                   for n, b in enumerate(branches)]
        to_copy: list[set] = [set() for _ in branches]
        for n, branch in enumerate(branches):
            seen: set = set()
            for index in leaves:
                key, kind = sources[n][index]
                if kind == "constant" or key in seen:
                    to_copy[n].add(index)
                seen.add(key)
        for index in leaves:
            kept = None   # the one operand value the result may alias
            for n, branch in enumerate(branches):
                key, kind = sources[n][index]
                if kind != "operand" or index in to_copy[n]:
                    continue
                if kept is None and _may_alias_result(cond, n, index, sources):
                    kept = key
                if key != kept:
                    to_copy[n].add(index)
        changed = False
        for branch, indices in zip(branches, to_copy):
            if indices:
                _copy_root_leaves(branch, indices)
                changed = True
        return changed


def _branches(cond: HloInstruction) -> list[HloComputation]:
    if "branch_computations" in cond.attrs:
        return list(cond.attrs["branch_computations"])
    return [cond.attrs["true_computation"], cond.attrs["false_computation"]]


def _array_leaf_indices(shape, prefix: tuple = ()) -> list[tuple]:
    if shape.is_tuple:
        return [index for k, s in enumerate(shape.tuple_shapes)
                for index in _array_leaf_indices(s, prefix + (k,))]
    return [] if shape.element_type == "token" else [prefix]


def _walk(inst: HloInstruction, index: tuple) -> tuple[HloInstruction, tuple, bool]:
    """Below tuples, get-tuple-elements and bitcasts inside one computation:
    (the instruction, the index into it, whether a bitcast was crossed)."""
    crossed = False
    while True:
        if inst.opcode == "tuple" and index:
            inst, index = inst.operands[index[0]], index[1:]
        elif inst.opcode == "get-tuple-element":
            inst, index = inst.operands[0], (inst.attrs["index"],) + index
        elif inst.opcode == "bitcast" and not index and not inst.shape.is_tuple:
            inst, crossed = inst.operands[0], True
        else:
            return inst, index, crossed


def _branch_source(branch: HloComputation, cond: HloInstruction, n: int,
                   index: tuple) -> tuple[tuple, str]:
    """(key, kind) of what `branch` returns at `index`: kind "constant",
    "own" (a value the branch computes) or "operand" (the branch's operand,
    or part of it, unchanged); the key tells equal values apart."""
    inst, rest, _ = _walk(branch.root, index)
    if inst.opcode == "constant":
        return (id(inst), rest), "constant"
    if inst.opcode == "parameter" and inst.parent is branch:
        outer, outer_rest, _ = _walk(cond.operands[n + 1], rest)
        if outer.opcode == "constant":
            return (id(outer), outer_rest), "constant"
        return (id(outer), outer_rest), "operand"
    return (id(inst), rest), "own"


def _may_alias_result(cond: HloInstruction, n: int, index: tuple,
                      sources: list[dict]) -> bool:
    """May branch `n`'s operand value at `index` become the conditional's
    buffer there, uncopied? Only a value computed in the caller that dies at
    the conditional, and that the branches writing this element cannot
    read (the write would come before the read)."""
    operand = cond.operands[n + 1]
    branch = _branches(cond)[n]
    inst, rest, _ = _walk(branch.root, index)
    value, value_index, crossed = _walk(operand, rest)
    if crossed or value_index or value.opcode in ("parameter", "constant") or \
            value.shape.is_tuple or value is value.parent.root:
        return False
    # Its only readers: the conditional, and tuples only the conditional reads.
    for user in value.users:
        if user is cond:
            continue
        if user.opcode != "tuple" or user is user.parent.root or \
                any(u is not cond for u in user.users) or \
                sum(o is value for o in user.operands) != 1:
            return False
    key = sources[n][index][0]
    for m, other in enumerate(cond.operands[1:]):
        if m == n or sources[m][index][0] == key:
            continue
        if other is value or any(u is other for u in value.users):
            return False   # branch m writes the element and may read the value
    return True


def _copy_root_leaves(branch: HloComputation, indices: set) -> None:
    """`branch`'s root with a copy at each of `indices` (array leaves)."""
    def rebuild(inst: HloInstruction, prefix: tuple) -> HloInstruction:
        if not inst.shape.is_tuple:
            return branch.add("copy", inst.shape, [inst]) if prefix in indices else inst
        if not any(i[:len(prefix)] == prefix for i in indices):
            return inst
        if inst.opcode == "tuple":
            elements = list(inst.operands)
        else:
            elements = [branch.add("get-tuple-element", s, [inst], index=k)
                        for k, s in enumerate(inst.shape.tuple_shapes)]
        new = [rebuild(e, prefix + (k,)) for k, e in enumerate(elements)]
        if inst.opcode == "tuple" and inst is branch.root and not inst.users:
            for k, e in enumerate(new):
                inst.replace_operand_with(k, e)
            return inst
        return branch.add("tuple", inst.shape, new)

    root = rebuild(branch.root, ())
    if root is not branch.root:
        branch.set_root(root)
