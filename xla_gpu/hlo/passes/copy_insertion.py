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
  passed through (another element's value, a constant, a duplicate), so
  that each carried buffer is written once per iteration;
* the ENTRY's outputs that are parameters, constants or the same value
  twice (each output gets its own buffer).
"""

from __future__ import annotations

from ..graph import through_bitcasts
from ..in_place import in_place_outputs
from ..module import HloComputation, HloInstruction, HloModule
from .pipeline import HloPass
from .util import program_computations

__all__ = ["CopyInsertion", "in_place_operands"]


def in_place_operands(inst: HloInstruction) -> list[int]:
    """Operand indices whose buffer `inst` updates in place (the rule of
    `xla_gpu.hlo.in_place`, which buffer sharing and the emitters follow)."""
    return sorted({number for number, _ in in_place_outputs(inst)})


def _is_read_only(value: HloInstruction, comp: HloComputation) -> bool:
    source = through_bitcasts(value)
    return source.opcode == "constant" or (source.opcode == "parameter" and comp.is_entry)


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


class CopyInsertion(HloPass):
    name = "copy-insertion"

    def run(self, module: HloModule) -> bool:
        module.link()
        changed = False
        for comp in program_computations(module):
            for inst in list(comp.instructions):
                for k in in_place_operands(inst):
                    operand = inst.operands[k]
                    if _is_read_only(operand, comp) or _other_readers(operand, inst):
                        copy = comp.add("copy", operand.shape, [operand])
                        inst.replace_operand_with(k, copy)
                        changed = True
                if inst.opcode == "while":
                    changed |= self._while_init(comp, inst)
                    changed |= self._while_body(inst.attrs["body"])
            if comp.is_entry:
                changed |= self._entry_outputs(comp)
        return changed

    @staticmethod
    def _copy(comp: HloComputation, value: HloInstruction) -> HloInstruction:
        return comp.add("copy", value.shape, [value])

    def _while_init(self, comp: HloComputation, loop: HloInstruction) -> bool:
        init = loop.operands[0]
        if not init.shape.is_tuple:
            if _is_read_only(init, comp) or _other_readers(init, loop):
                loop.replace_operand_with(0, self._copy(comp, init))
                return True
            return False
        if init.opcode != "tuple" or len(init.users) != 1:
            # Copy every element of a shared or opaque state tuple.
            leaves = [self._copy(comp, comp.add("get-tuple-element", s, [init], index=k))
                      for k, s in enumerate(init.shape.tuple_shapes)]
            loop.replace_operand_with(0, comp.add("tuple", init.shape, leaves))
            return True
        changed = False
        seen: set[int] = set()
        unchanged = _passed_through(loop.attrs["body"])
        read_after = {u.attrs["index"] for u in loop.users if u.opcode == "get-tuple-element"}
        if any(u.opcode != "get-tuple-element" for u in loop.users) or loop is comp.root:
            read_after = set(range(len(init.operands)))
        for k, element in enumerate(list(init.operands)):
            if element.shape.is_tuple:
                continue
            if k in unchanged and k not in read_after:
                seen.add(id(element))
                continue  # never written, not read after: no buffer of its own
            if _is_read_only(element, comp) or id(element) in seen or \
                    _other_readers(element, init):
                init.replace_operand_with(k, self._copy(comp, element))
                changed = True
            seen.add(id(element))
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
            if element.shape.is_tuple:
                continue
            source = through_bitcasts(element)
            other_element = source.opcode == "get-tuple-element" and \
                source.operands[0] is param and source.attrs["index"] != k
            if source.opcode == "constant" or other_element or id(element) in seen or \
                    (source.opcode == "parameter"):
                root.replace_operand_with(k, self._copy(body, element))
                changed = True
            seen.add(id(element))
        return changed

    def _entry_outputs(self, comp: HloComputation) -> bool:
        root = comp.root
        if root.opcode != "tuple":
            if _is_read_only(root, comp) and not root.shape.is_tuple:
                comp.set_root(self._copy(comp, root))
                return True
            return False
        changed = False
        seen: set[int] = set()
        for k, element in enumerate(list(root.operands)):
            if element.shape.is_tuple:
                continue
            if _is_read_only(element, comp) or id(element) in seen:
                root.replace_operand_with(k, self._copy(comp, element))
                changed = True
            seen.add(id(element))
        return changed
