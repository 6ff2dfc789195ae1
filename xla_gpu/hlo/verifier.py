"""Shape checks of the ops the emitters and the interpreter accept, so that
a wrong shape is an HloError naming the instruction rather than a crash
deep in emission. numpy-free, mlir-free."""

from __future__ import annotations

from math import prod

from .module import HloComputation, HloInstruction

__all__ = ["verify_computation"]

_SAME_SHAPE = frozenset("""
abs add and atan2 cbrt ceil clamp copy cosine count-leading-zeros divide erf
exponential exponential-minus-one floor is-finite log log-plus-one logistic
maximum minimum multiply negate not or popcnt power reduce-precision remainder
round-nearest-afz round-nearest-even rsqrt select shift-left
shift-right-arithmetic shift-right-logical sign sine sqrt subtract tan tanh xor
convert bitcast-convert compare complex real imag map
""".split())
_SAME_TYPE = frozenset("""
add subtract multiply divide remainder maximum minimum power atan2 and or xor
shift-left shift-right-arithmetic shift-right-logical compare
""".split())


def verify_computation(comp: HloComputation) -> None:
    """Raises HloError for the first instruction whose shape does not follow
    from its operands and attributes."""
    for inst in comp.instructions:
        _verify(inst)


def _check(inst: HloInstruction, ok: bool, message: str) -> None:
    if not ok:
        raise inst.error(message)


def _dims(inst: HloInstruction) -> tuple[int, ...]:
    return tuple(inst.shape.dims)


def _verify(inst: HloInstruction) -> None:
    op = inst.opcode
    ops = inst.operands
    if op in ("parameter", "constant", "tuple", "get-tuple-element", "fusion",
              "call", "custom-call", "after-all", "partition-id", "replica-id"):
        if op == "get-tuple-element":
            src = ops[0].shape
            idx = inst.attrs.get("index")
            _check(inst, src.is_tuple and isinstance(idx, int)
                   and 0 <= idx < len(src.tuple_shapes),
                   f"index={idx} is not an element of {src}")
        return
    if any(o.shape.is_tuple for o in ops) and op not in ("reduce", "reduce-window"):
        raise inst.error("a tuple operand where an array is expected")
    out = _dims(inst) if not inst.shape.is_tuple else None
    if op in _SAME_SHAPE:
        for o in ops:
            if o.shape.rank == 0 and op in ("select", "clamp"):
                continue
            _check(inst, tuple(o.shape.dims) == out,
                   f"operand %{o.name} has shape {o.shape}, expected dimensions {list(out)}")
        if op in _SAME_TYPE and len({o.shape.element_type for o in ops}) > 1:
            raise inst.error("operands of different element types: "
                             + ", ".join(str(o.shape) for o in ops))
        if op == "compare":
            _check(inst, inst.shape.element_type == "pred", "compare must produce pred")
        if op == "select":
            _check(inst, ops[0].shape.element_type == "pred", "select needs a pred operand")
        return
    attrs = inst.attrs
    if op == "broadcast":
        dims = tuple(attrs.get("dimensions", ()))
        src = ops[0].shape.dims
        _check(inst, len(dims) == len(src) and
               all(0 <= d < len(out) and out[d] == s for d, s in zip(dims, src)),
               f"dimensions={{{','.join(map(str, dims))}}} does not map {ops[0].shape} into {inst.shape}")
    elif op == "transpose":
        perm = tuple(attrs.get("dimensions", ()))
        src = ops[0].shape.dims
        _check(inst, sorted(perm) == list(range(len(src))) and
               tuple(src[p] for p in perm) == out,
               f"dimensions={{{','.join(map(str, perm))}}} does not permute {ops[0].shape} into {inst.shape}")
    elif op in ("reshape", "bitcast"):
        _check(inst, prod(ops[0].shape.dims) == prod(out),
               f"{ops[0].shape} and {inst.shape} have different element counts")
    elif op == "slice":
        spec = attrs.get("slice") or []
        src = ops[0].shape.dims
        ok = len(spec) == len(src) and all(
            0 <= a <= b <= n and s > 0 for (a, b, s), n in zip(spec, src))
        _check(inst, ok, f"slice={spec} does not fit {ops[0].shape}")
        _check(inst, tuple(-(-(b - a) // s) for a, b, s in spec) == out,
               f"slice of {ops[0].shape} has dimensions "
               f"{[-(-(b - a) // s) for a, b, s in spec]}, not {list(out)}")
    elif op == "reverse":
        _check(inst, tuple(ops[0].shape.dims) == out and
               all(0 <= d < len(out) for d in attrs.get("dimensions", ())),
               "reverse must keep the shape and name valid dimensions")
    elif op == "pad":
        spec = attrs.get("padding") or []
        src = ops[0].shape.dims
        _check(inst, len(spec) == len(src) and ops[1].shape.rank == 0,
               "padding must have one entry per dimension and a scalar value")
        expected = tuple(lo + hi + n + max(n - 1, 0) * it for (lo, hi, it), n in zip(spec, src))
        _check(inst, all(it >= 0 for _, _, it in spec) and expected == out,
               f"padding gives dimensions {list(expected)}, not {list(out)}")
    elif op == "concatenate":
        axis = (attrs.get("dimensions") or (None,))[0]
        _check(inst, axis is not None and 0 <= axis < len(out), "concatenate needs dimensions={d}")
        ok = all(o.shape.rank == len(out) and all(
            o.shape.dims[i] == out[i] for i in range(len(out)) if i != axis) for o in ops)
        _check(inst, ok and sum(o.shape.dims[axis] for o in ops) == out[axis],
               "operands do not concatenate to " + str(inst.shape))
    elif op == "dynamic-slice":
        src = ops[0].shape.dims
        sizes = tuple(attrs.get("dynamic_slice_sizes", ()))
        _check(inst, len(ops) == 1 + len(src) and all(o.shape.rank == 0 for o in ops[1:]),
               f"dynamic-slice needs {len(src)} scalar start indices")
        _check(inst, sizes == out and all(s <= n for s, n in zip(sizes, src)),
               f"dynamic_slice_sizes={list(sizes)} does not fit {ops[0].shape} or give {inst.shape}")
    elif op == "dynamic-update-slice":
        src, upd = ops[0].shape.dims, ops[1].shape.dims
        _check(inst, len(ops) == 2 + len(src) and all(o.shape.rank == 0 for o in ops[2:]),
               f"dynamic-update-slice needs {len(src)} scalar start indices")
        _check(inst, tuple(src) == out and len(upd) == len(src) and
               all(u <= n for u, n in zip(upd, src)),
               f"update {ops[1].shape} does not fit {ops[0].shape}")
    elif op == "iota":
        _check(inst, 0 <= attrs.get("iota_dimension", -1) < max(len(out), 1),
               "iota_dimension is not a dimension of the result")
    elif op == "reduce":
        n = len(ops) // 2
        _check(inst, len(ops) == 2 * n and n > 0, "reduce needs inputs and as many init values")
        dims = tuple(attrs.get("dimensions", ()))
        src = ops[0].shape.dims
        kept = tuple(s for i, s in enumerate(src) if i not in dims)
        _check(inst, all(0 <= d < len(src) for d in dims), f"dimensions={list(dims)} out of range")
        _check(inst, all(o.shape.dims == src for o in ops[:n]) and
               all(o.shape.rank == 0 for o in ops[n:]),
               "reduce inputs must share one shape and init values be scalars")
        leaves = inst.shape.leaves()
        _check(inst, len(leaves) == n and all(tuple(s.dims) == kept for s in leaves),
               f"reducing {list(dims)} of {ops[0].shape} gives dimensions {list(kept)}")
        comp = attrs.get("to_apply")
        _check(inst, isinstance(comp, HloComputation) and len(comp.parameters) == 2 * n,
               f"to_apply must be a computation of {2 * n} scalars")
    elif op == "gather":
        sizes = attrs.get("slice_sizes")
        _check(inst, sizes is not None and len(sizes) == ops[0].shape.rank and
               all(s <= n for s, n in zip(sizes, ops[0].shape.dims)),
               "slice_sizes must give one size per operand dimension, within it")
    elif op == "reduce-window":
        window = attrs.get("window") or {}
        rank = ops[0].shape.rank
        _check(inst, all(len(v) == rank for v in window.values()),
               "window must have one entry per operand dimension")
