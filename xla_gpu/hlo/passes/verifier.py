"""The module verifier the pass pipeline runs after each pass in debug
mode: the graph's structure (users, order, parents, names, control
dependencies, called computations, fusion signatures) and the shape rules of
`xla_gpu.hlo.verifier`."""

from __future__ import annotations

from ..module import (CONTROL_PREDECESSORS, HloComputation, HloError,
                      HloModule)
from ..verifier import _verify as _verify_shapes
from .util import same_shape

__all__ = ["verify_module"]

_CALLEE_KEYS = {"fusion": "calls", "call": "to_apply"}
_TUPLE_OPS = frozenset({"while", "conditional", "sort", "custom-call", "topk",
                        "optimization-barrier", "rng-bit-generator", "all-reduce",
                        "all-gather", "all-to-all", "infeed", "outfeed", "send", "recv",
                        "send-done", "recv-done", "batch-norm-training", "fft",
                        "convolution", "dot", "reduce-window", "select-and-scatter",
                        "rng", "scatter", "gather", "map", "triangular-solve",
                        "cholesky"})


def _same_dims(a, b) -> bool:
    if a.is_tuple or b.is_tuple:
        return a.is_tuple and b.is_tuple and len(a.tuple_shapes) == len(b.tuple_shapes) \
            and all(_same_dims(x, y) for x, y in zip(a.tuple_shapes, b.tuple_shapes))
    return a.element_type == b.element_type and tuple(a.dims) == tuple(b.dims)


_UNARY = frozenset("""
abs negate sign ceil floor round-nearest-afz round-nearest-even not exponential
exponential-minus-one log log-plus-one sqrt rsqrt cbrt tanh logistic sine cosine
tan erf is-finite popcnt count-leading-zeros real imag copy convert
reduce-precision bitcast bitcast-convert broadcast reshape transpose slice
reverse get-tuple-element
""".split())
_BINARY = frozenset("""
add subtract multiply divide remainder maximum minimum power atan2 and or xor
shift-left shift-right-arithmetic shift-right-logical compare complex pad dot
""".split())


def _arity(opcode: str) -> int | None:
    if opcode in _UNARY:
        return 1
    if opcode in _BINARY:
        return 2
    if opcode in ("select", "clamp"):
        return 3
    if opcode in ("parameter", "constant", "iota"):
        return 0
    return None


def verify_module(module: HloModule) -> None:
    """Raises HloError naming the first broken invariant."""
    comp_names = [c.name for c in module.computations]
    if len(comp_names) != len(set(comp_names)):
        dup = next(n for n in comp_names if comp_names.count(n) > 1)
        raise HloError(f"two computations are named '{dup}'")
    if sum(c.is_entry for c in module.computations) > 1:
        raise HloError("more than one ENTRY computation")
    members = {id(c) for c in module.computations}
    for comp in module.computations:
        _verify_structure(comp, members)
        for inst in comp.instructions:
            # The shape rules cover the array ops; tuple-carrying ones
            # (while, conditional, sort, custom calls...) are checked
            # structurally only.
            if any(o.shape.is_tuple for o in inst.operands) and \
                    inst.opcode not in ("get-tuple-element", "reduce", "reduce-window"):
                continue
            if inst.opcode in _TUPLE_OPS or (inst.opcode == "bitcast-convert" and
                                             inst.shape.rank != inst.operands[0].shape.rank):
                continue
            _verify_shapes(inst)


def _verify_structure(comp: HloComputation, members: set[int]) -> None:
    insts = comp.instructions
    if comp.root is None:
        raise HloError(f"computation '{comp.name}' has no root")
    position = {id(i): k for k, i in enumerate(insts)}
    if id(comp.root) not in position:
        raise HloError(f"the root '{comp.root.name}' of '{comp.name}' is not in it")
    names: dict[str, int] = {}
    for k, inst in enumerate(insts):
        if inst.name in names:
            raise inst.error(f"a second instruction named '{inst.name}' in '{comp.name}'")
        names[inst.name] = k
        if inst.parent is not comp:
            raise inst.error(f"is listed in '{comp.name}' but its parent is "
                             f"'{getattr(inst.parent, 'name', None)}'")
    numbers = sorted(p.parameter_number for p in insts if p.opcode == "parameter")
    if numbers != list(range(len(numbers))):
        raise HloError(f"computation '{comp.name}' has parameter numbers {numbers}")
    for inst in insts:
        here = position[id(inst)]
        arity = _arity(inst.opcode)
        if arity is not None and len(inst.operands) != arity:
            raise inst.error(f"'{inst.opcode}' takes {arity} operand"
                             f"{'s' if arity != 1 else ''}, has {len(inst.operands)}")
        for op in inst.operands:
            if id(op) not in position:
                raise inst.error(f"operand '{op.name}' is not in '{comp.name}'")
            if position[id(op)] >= here:
                raise inst.error(f"operand '{op.name}' comes after its user")
            if sum(u is inst for u in op.users) != 1:
                raise inst.error(f"is not listed once among the users of '{op.name}'")
        for user in inst.users:
            if not any(o is inst for o in user.operands):
                raise inst.error(f"lists '{user.name}' as a user, which does not read it")
            if user.parent is not comp:
                raise inst.error(f"user '{user.name}' is in another computation")
        for pred in inst.attrs.get(CONTROL_PREDECESSORS) or ():
            if pred not in names:
                raise inst.error(f"control predecessor '{pred}' is not in '{comp.name}'")
            if names[pred] >= here:
                raise inst.error(f"control predecessor '{pred}' comes after it")
        if inst.opcode == "tuple" and inst.shape.is_tuple and \
                len(inst.shape.tuple_shapes) == len(inst.operands):
            for k, (leaf, o) in enumerate(zip(inst.shape.tuple_shapes, inst.operands)):
                if not same_shape(leaf, o.shape):
                    raise inst.error(f"element {k} is {leaf} but operand '{o.name}' is "
                                     f"{o.shape} (layouts included: a tuple passes buffers)")
        for called in inst.called_computations:
            if id(called) not in members:
                raise inst.error(f"calls '{called.name}', which is not in the module")
        key = _CALLEE_KEYS.get(inst.opcode)
        if key is not None:
            callee = inst.attrs.get(key)
            if not isinstance(callee, HloComputation):
                raise inst.error(f"needs {key}=COMPUTATION")
            params = callee.parameters
            if len(params) != len(inst.operands):
                raise inst.error(f"passes {len(inst.operands)} operands to "
                                 f"'{callee.name}', which takes {len(params)}")
            for p, o in zip(params, inst.operands):
                if not _same_dims(p.shape, o.shape):
                    raise inst.error(f"operand '{o.name}' is {o.shape}, parameter "
                                     f"{p.parameter_number} of '{callee.name}' is {p.shape}")
            if not _same_dims(callee.root.shape, inst.shape):
                raise inst.error(f"'{callee.name}' returns {callee.root.shape}, "
                                 f"not {inst.shape}")
