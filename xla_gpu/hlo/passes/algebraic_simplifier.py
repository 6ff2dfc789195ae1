"""AlgebraicSimplifier: the identities that matter in the HLO JAX prints.

  x * 1, 1 * x, x + 0, 0 + x, x - 0, x / 1              -> x
  max(x, -inf), min(x, inf), and(x, true), or(x, false)  -> x
  negate(negate(x)), not(not(x))                         -> x
  broadcast(broadcast(x))                                -> broadcast(x)
  reshape(reshape(x)), reshape(x) of x's shape           -> reshape(x), x
  reshape(broadcast(scalar))                             -> broadcast(scalar)
  transpose(transpose(x)), identity transpose            -> transpose(x), x
  transpose(broadcast(scalar))                           -> broadcast(scalar)
  transpose(dot(a, b)) swapping the free dimensions      -> dot(b, a)
  convert(x) to x's type; convert(convert(x)) when the
    inner one widens exactly (f32 -> f64 -> f32)         -> x
  broadcast / slice / pad / bitcast that change nothing  -> x
  slice(broadcast(x))                                    -> broadcast(slice(x))
  slice(slice(x))                                        -> slice(x)
  select(constant p, a, b), select(p, a, a)              -> a or b
  compare(x, x) on integers                              -> constant
  dot with all contracting dimensions of size 1          -> multiply of broadcasts
  copy(x) with x's layout                                -> x
  reduce over size-1 dimensions only                     -> reshape (+ init)
  reduce over some size-1 dimensions                     -> reduce of a reshape
  concatenate of one operand                             -> x
  dynamic-slice with constant starts                     -> slice
  dynamic-update-slice writing the whole operand         -> the update

Every rewrite keeps the instruction's shape (layout included); those that
cannot are skipped. Run it under HloPassFix: a rewrite can enable another.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..module import HloComputation, HloInstruction
from ..shape import Shape, bit_width, is_float, is_integral
from .pipeline import ComputationPass
from .util import array_shape, has_side_effect, same_shape

__all__ = ["AlgebraicSimplifier", "scalar_constant_value"]


def scalar_constant_value(inst: HloInstruction) -> Any | None:
    """The value of a constant whose elements are all equal (through
    broadcasts, reshapes and bitcasts of it); None otherwise."""
    seen = 0
    while inst.opcode in ("broadcast", "reshape", "bitcast") and seen < 64:
        if inst.opcode == "bitcast" and \
                inst.shape.element_type != inst.operands[0].shape.element_type:
            return None
        inst = inst.operands[0]
        seen += 1
    if inst.opcode != "constant" or inst.literal is None or inst.shape.is_tuple:
        return None
    arr = np.asarray(inst.literal)
    if arr.size == 0:
        return None
    first = arr.reshape(-1)[0]
    if arr.size > 1:
        if arr.size > 65536:
            return None
        flat = arr.reshape(-1)
        if not (flat == first).all():
            return None
    return first


def _is_value(inst: HloInstruction, value: float) -> bool:
    v = scalar_constant_value(inst)
    if v is None:
        return False
    try:
        return bool(v == value) and not (isinstance(v, (float, np.floating)) and np.isnan(v))
    except (TypeError, ValueError):
        return False


def _reducer_opcode(comp: HloComputation) -> str | None:
    """`op` when comp is ROOT op(p0, p1) of two scalar parameters."""
    params = comp.parameters
    root = comp.root
    if len(params) != 2 or root.shape.is_tuple or len(root.operands) != 2:
        return None
    if {id(o) for o in root.operands} != {id(p) for p in params}:
        return None
    return root.opcode


_IDENTITY = {"add": 0, "multiply": 1, "or": False, "and": True}


def _is_identity_of(op: str, init: HloInstruction) -> bool:
    """Whether `init` is the identity of the reducer `op` (0 for add, -inf
    or the type's minimum for maximum...)."""
    v = scalar_constant_value(init)
    if v is None:
        return False
    etype = init.shape.element_type
    if etype == "pred":
        return bool(v) == (op in ("multiply", "and", "minimum"))
    if op in ("and", "or"):
        if etype[0] not in "su":
            return False
        all_ones = -1 if etype[0] == "s" else (1 << bit_width(etype)) - 1
        return int(v) == (all_ones if op == "and" else 0)
    if op in _IDENTITY:
        return bool(v == _IDENTITY[op])
    if op in ("maximum", "minimum"):
        if is_float(etype):
            return bool(v == (-np.inf if op == "maximum" else np.inf))
        if etype in ("s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64"):
            info = np.iinfo(init.shape.dtype)
            return int(v) == int(info.min if op == "maximum" else info.max)
    return False


class AlgebraicSimplifier(ComputationPass):
    name = "algebraic-simplifier"

    def run_on(self, comp: HloComputation) -> bool:
        changed = False
        # opcode -> its visit_ function, or None (looked up once per opcode;
        # the class's functions, not methods bound to the pass: a bound
        # method kept on the pass would make every pipeline cyclic garbage).
        handlers = self.__dict__.setdefault("_handlers", {})
        for inst in list(comp.instructions):
            if inst.parent is not comp:
                continue
            opcode = inst.opcode
            handler = handlers.get(opcode, handlers)
            if handler is handlers:
                handler = handlers[opcode] = getattr(
                    type(self), "visit_" + opcode.replace("-", "_"), None)
            if handler is None or has_side_effect(inst):
                continue
            new = handler(self, comp, inst)
            if new is None or new is inst:
                continue
            if not same_shape(new.shape, inst.shape):
                # Keep the rewrite only where the layouts agree.
                if new.parent is comp and not new.users and new is not comp.root:
                    comp.remove_dead(has_side_effect)
                continue
            inst.replace_all_uses_with(new)
            changed = True
        if changed:
            comp.remove_dead(has_side_effect)
        return changed

    # -- helpers ----------------------------------------------------------
    @staticmethod
    def _shape_like(inst: HloInstruction, etype: str, dims) -> Shape:
        """`dims` with inst's layout when they are inst's dims, else the
        default layout."""
        if tuple(dims) == tuple(inst.shape.dims) and etype == inst.shape.element_type:
            return inst.shape
        return array_shape(etype, dims)

    @staticmethod
    def _make_constant(comp: HloComputation, value, etype: str, dims, shape: Shape | None = None):
        scalar = comp.add_instruction(HloInstruction.create_constant(
            np.asarray(value), array_shape(etype, ())))
        if not dims:
            return scalar
        return comp.add("broadcast", shape or array_shape(etype, dims), [scalar],
                        dimensions=())

    # -- arithmetic identities ---------------------------------------------
    def visit_multiply(self, comp, inst):
        a, b = inst.operands
        if _is_value(b, 1) and a.shape.dims == inst.shape.dims:
            return a
        if _is_value(a, 1) and b.shape.dims == inst.shape.dims:
            return b
        return None

    def visit_add(self, comp, inst):
        a, b = inst.operands
        if inst.shape.element_type == "pred":
            return None
        if _is_value(b, 0):
            return a
        if _is_value(a, 0):
            return b
        return None

    def visit_subtract(self, comp, inst):
        a, b = inst.operands
        if _is_value(b, 0) and inst.shape.element_type != "pred":
            return a
        return None

    def visit_divide(self, comp, inst):
        a, b = inst.operands
        if _is_value(b, 1):
            return a
        return None

    def visit_maximum(self, comp, inst):
        return self._identity_operand(inst, "maximum")

    def visit_minimum(self, comp, inst):
        return self._identity_operand(inst, "minimum")

    def visit_and(self, comp, inst):
        return self._identity_operand(inst, "and")

    def visit_or(self, comp, inst):
        return self._identity_operand(inst, "or")

    @staticmethod
    def _identity_operand(inst, op):
        """max(x, -inf), min(x, +inf), and(x, true), or(x, false) -> x
        (the type's extreme for integers)."""
        a, b = inst.operands
        if _is_identity_of(op, b) and a.shape.dims == inst.shape.dims:
            return a
        if _is_identity_of(op, a) and b.shape.dims == inst.shape.dims:
            return b
        return None

    def visit_negate(self, comp, inst):
        x = inst.operands[0]
        if x.opcode == "negate":
            return x.operands[0]
        return None

    def visit_not(self, comp, inst):
        x = inst.operands[0]
        if x.opcode == "not":
            return x.operands[0]
        return None

    # -- data movement -----------------------------------------------------
    def visit_broadcast(self, comp, inst):
        x = inst.operands[0]
        dims = tuple(inst.attrs.get("dimensions", ()))
        if x.shape.dims == inst.shape.dims and dims == tuple(range(x.shape.rank)):
            return x
        if x.opcode == "broadcast":
            inner = tuple(x.attrs.get("dimensions", ()))
            composed = tuple(dims[d] for d in inner)
            return comp.add("broadcast", inst.shape, [x.operands[0]], dimensions=composed)
        return None

    def visit_reshape(self, comp, inst):
        x = inst.operands[0]
        if x.shape.dims == inst.shape.dims:
            return x
        if x.opcode == "reshape":
            return comp.add("reshape", inst.shape, [x.operands[0]])
        if x.opcode == "broadcast" and x.operands[0].shape.rank == 0:
            return comp.add("broadcast", inst.shape, [x.operands[0]], dimensions=())
        return None

    def visit_bitcast(self, comp, inst):
        x = inst.operands[0]
        if same_shape(x.shape, inst.shape):
            return x
        return None

    def visit_transpose(self, comp, inst):
        x = inst.operands[0]
        perm = tuple(inst.attrs["dimensions"])
        if perm == tuple(range(len(perm))):
            return x
        if x.opcode == "dot" and len(x.users) == 1:
            swapped = self._swapped_dot(comp, x, perm, inst)
            if swapped is not None:
                return swapped
        if x.opcode == "transpose":
            inner = tuple(x.attrs["dimensions"])
            composed = tuple(inner[p] for p in perm)
            if composed == tuple(range(len(composed))):
                return x.operands[0]
            return comp.add("transpose", inst.shape, [x.operands[0]], dimensions=composed)
        if x.opcode == "broadcast" and x.operands[0].shape.rank == 0:
            return comp.add("broadcast", inst.shape, [x.operands[0]], dimensions=())
        return None

    def visit_convert(self, comp, inst):
        x = inst.operands[0]
        dst = inst.shape.element_type
        if x.shape.element_type == dst:
            return x
        if x.opcode == "convert":
            src = x.operands[0].shape.element_type
            mid = x.shape.element_type
            if src == dst and _widens_exactly(src, mid):
                return x.operands[0]
        return None

    def visit_copy(self, comp, inst):
        x = inst.operands[0]
        if same_shape(x.shape, inst.shape):
            return x
        return None

    def visit_slice(self, comp, inst):
        x = inst.operands[0]
        spec = inst.attrs["slice"]
        if x.shape.dims == inst.shape.dims:
            return x
        if x.opcode == "broadcast":
            operand = x.operands[0]
            bdims = tuple(x.attrs.get("dimensions", ()))
            if operand.shape.rank == 0:
                return comp.add("broadcast", inst.shape, [operand], dimensions=())
            inner_spec = [spec[d] for d in bdims]
            if all(lo == 0 and hi == n and st == 1 for (lo, hi, st), n in
                   zip(inner_spec, operand.shape.dims)):
                sliced = operand
            else:
                dims = [-(-(hi - lo) // st) for lo, hi, st in inner_spec]
                sliced = comp.add("slice", array_shape(operand.shape.element_type, dims),
                                  [operand], slice=list(inner_spec))
            return comp.add("broadcast", inst.shape, [sliced], dimensions=bdims)
        if x.opcode == "slice":
            outer = x.attrs["slice"]
            combined = []
            for (lo1, _, st1), (lo2, hi2, st2) in zip(outer, spec):
                count = max(0, -(-(hi2 - lo2) // st2))
                start = lo1 + lo2 * st1
                stride = st1 * st2
                combined.append((start, start + (count - 1) * stride + 1 if count else start,
                                 stride))
            return comp.add("slice", inst.shape, [x.operands[0]], slice=combined)
        return None

    def visit_pad(self, comp, inst):
        x = inst.operands[0]
        if all(tuple(p) in ((0, 0, 0), (0, 0)) for p in inst.attrs.get("padding", [])):
            return x
        return None

    def visit_concatenate(self, comp, inst):
        if len(inst.operands) == 1:
            return inst.operands[0]
        return None

    def visit_dynamic_slice(self, comp, inst):
        x = inst.operands[0]
        starts = inst.operands[1:]
        if len(starts) != x.shape.rank:
            return None
        values = [scalar_constant_value(s) for s in starts]
        if any(v is None for v in values):
            return None
        sizes = inst.shape.dims
        spec = []
        for v, size, n in zip(values, sizes, x.shape.dims):
            start = min(max(int(v), 0), n - size)  # XLA clamps the start
            spec.append((start, start + size, 1))
        return comp.add("slice", inst.shape, [x], slice=spec)

    def visit_dynamic_update_slice(self, comp, inst):
        x, update = inst.operands[0], inst.operands[1]
        if update.shape.dims == x.shape.dims and same_shape(update.shape, inst.shape):
            return update
        return None

    def visit_scatter(self, comp, inst):
        """A scatter of no updates is its operand(s), as in XLA (and no
        emitter then divides the work by zero updates)."""
        n = (len(inst.operands) - 1) // 2
        updates = inst.operands[n + 1:]
        if not updates or any(u.shape.is_tuple or u.shape.num_elements for u in updates):
            return None
        if n == 1:
            return inst.operands[0]
        return comp.add("tuple", inst.shape, list(inst.operands[:n]))

    # -- select / compare ------------------------------------------------------
    def visit_select(self, comp, inst):
        pred, a, b = inst.operands
        if a is b:
            return a
        v = scalar_constant_value(pred)
        if v is None:
            return None
        chosen = a if bool(v) else b
        if chosen.shape.dims != inst.shape.dims:
            return None
        return chosen

    def visit_compare(self, comp, inst):
        a, b = inst.operands
        if a is not b or not is_integral(a.shape.element_type):
            return None
        direction = str(inst.attrs.get("direction", ""))
        if direction in ("EQ", "GE", "LE"):
            value = True
        elif direction in ("NE", "GT", "LT"):
            value = False
        else:
            return None
        return self._make_constant(comp, value, "pred", inst.shape.dims, inst.shape)

    # -- dot -----------------------------------------------------------------
    def visit_dot(self, comp, inst):
        """All contracting dimensions of size 1: an elementwise product of
        the two operands broadcast to the result."""
        lhs, rhs = inst.operands
        a = inst.attrs
        lb, rb = tuple(a.get("lhs_batch_dims", ())), tuple(a.get("rhs_batch_dims", ()))
        lc = tuple(a.get("lhs_contracting_dims", ()))
        rc = tuple(a.get("rhs_contracting_dims", ()))
        if any(lhs.shape.dims[d] != 1 for d in lc) or any(rhs.shape.dims[d] != 1 for d in rc):
            return None
        if lhs.shape.is_tuple or rhs.shape.is_tuple:
            return None
        etype = inst.shape.element_type
        if etype in ("c64", "c128") or lhs.shape.element_type == "pred":
            return None
        lnc = [d for d in range(lhs.shape.rank) if d not in lb and d not in lc]
        rnc = [d for d in range(rhs.shape.rank) if d not in rb and d not in rc]
        nb = len(lb)
        # Result position of each lhs / rhs dimension.
        lpos = {d: k for k, d in enumerate(lb)}
        lpos.update({d: nb + k for k, d in enumerate(lnc)})
        rpos = {d: k for k, d in enumerate(rb)}
        rpos.update({d: nb + len(lnc) + k for k, d in enumerate(rnc)})
        out_dims = inst.shape.dims
        sides = []
        for operand, kept_positions, contracted in ((lhs, lpos, lc), (rhs, rpos, rc)):
            kept = [d for d in range(operand.shape.rank) if d not in contracted]
            value = operand
            if operand.shape.element_type != etype:
                value = comp.add("convert", array_shape(etype, operand.shape.dims), [value])
            if len(kept) != operand.shape.rank:
                value = comp.add("reshape", array_shape(
                    etype, [operand.shape.dims[d] for d in kept]), [value])
            positions = [kept_positions[d] for d in kept]
            order = sorted(range(len(kept)), key=lambda k: positions[k])
            if order != list(range(len(kept))):
                value = comp.add("transpose", array_shape(
                    etype, [value.shape.dims[k] for k in order]), [value],
                    dimensions=tuple(order))
                positions = [positions[k] for k in order]
            value = comp.add("broadcast", self._shape_like(inst, etype, out_dims), [value],
                             dimensions=tuple(positions))
            sides.append(value)
        return comp.add("multiply", inst.shape, sides)

    @staticmethod
    def _swapped_dot(comp, dot, perm, transpose):
        """transpose(dot(a, b)) that swaps the two free-dimension groups ->
        dot(b, a): the gemm writes the transposed result directly."""
        a = dot.attrs
        lb, rb = tuple(a.get("lhs_batch_dims", ())), tuple(a.get("rhs_batch_dims", ()))
        lc = tuple(a.get("lhs_contracting_dims", ()))
        rc = tuple(a.get("rhs_contracting_dims", ()))
        lhs, rhs = dot.operands
        nb = len(lb)
        nl = lhs.shape.rank - nb - len(lc)
        nr = rhs.shape.rank - nb - len(rc)
        if nl == 0 or nr == 0:
            return None
        expected = (*range(nb), *range(nb + nl, nb + nl + nr), *range(nb, nb + nl))
        if perm != expected:
            return None
        new = dot.clone_with([rhs, lhs], shape=transpose.shape)
        new.attrs["lhs_batch_dims"], new.attrs["rhs_batch_dims"] = rb, lb
        new.attrs["lhs_contracting_dims"], new.attrs["rhs_contracting_dims"] = rc, lc
        for key in ("lhs_batch_dims", "rhs_batch_dims"):
            if not new.attrs[key] and key not in a:
                del new.attrs[key]
        precision = a.get("operand_precision")
        if isinstance(precision, str) and precision.startswith("{") and "," in precision:
            first, second = precision[1:-1].split(",", 1)
            new.attrs["operand_precision"] = "{" + second.strip() + "," + first.strip() + "}"
        ordered = {k: new.attrs[k] for k in ("lhs_batch_dims", "rhs_batch_dims",
                                             "lhs_contracting_dims", "rhs_contracting_dims")
                   if k in new.attrs}
        ordered.update({k: v for k, v in new.attrs.items() if k not in ordered})
        new.attrs = ordered
        return comp.add_instruction(new, name="dot")

    # -- reduce -----------------------------------------------------------------
    def visit_reduce(self, comp, inst):
        n = len(inst.operands) // 2
        if n != 1 or inst.shape.is_tuple:
            return None
        x, init = inst.operands
        dims = tuple(inst.attrs.get("dimensions", ()))
        src = x.shape.dims
        degenerate = [d for d in dims if src[d] == 1]
        if not degenerate:
            return None
        etype = inst.shape.element_type
        if len(degenerate) == len(dims):
            op = _reducer_opcode(inst.attrs["to_apply"])
            reshaped = comp.add("reshape", self._shape_like(inst, etype, inst.shape.dims), [x])
            if op is not None and _is_identity_of(op, init):
                return reshaped
            if op in ("add", "multiply", "maximum", "minimum", "and", "or"):
                broadcast_init = comp.add("broadcast", self._shape_like(
                    inst, etype, inst.shape.dims), [init], dimensions=())
                return comp.add(op, inst.shape, [broadcast_init, reshaped])
            return None
        keep = [d for d in range(len(src)) if d not in degenerate]
        reshaped = comp.add("reshape", array_shape(x.shape.element_type,
                                                   [src[d] for d in keep]), [x])
        new_dims = tuple(keep.index(d) for d in dims if d not in degenerate)
        new = inst.clone_with([reshaped, init], name=inst.name)
        new.attrs["dimensions"] = new_dims
        return comp.add_instruction(new)


def _widens_exactly(src: str, mid: str) -> bool:
    """Whether converting src -> mid -> src gives back every src value."""
    if src == "pred":
        return mid != "pred"
    if is_float(src) and src not in ("f32", "f64"):
        return mid in ("f32", "f64")
    if src == "f32":
        return mid == "f64"
    if src[0] in "su" and mid[0] in "su":
        if src[0] == mid[0]:
            return bit_width(mid) >= bit_width(src)
        return src[0] == "u" and bit_width(mid) > bit_width(src)
    return False
