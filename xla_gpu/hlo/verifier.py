"""The HLO verifier: one set of rules for the parser (every module read),
the pass pipeline (after each pass in debug mode) and the fusion analysis.
A wrong shape is an HloError naming the instruction rather than a crash
deep in emission or evaluation. No third-party imports.

    verify_instruction(inst)     shape and attribute rules of one instruction
    verify_computation(comp)     every instruction of a computation
    verify_module(module)        the graph's structure (users, order,
                                 parents, names, control dependencies,
                                 called computations, fusion signatures)
                                 and every instruction
"""

from __future__ import annotations

import math

from ..errors import HloError
from . import collectives as _collectives
from .module import CONTROL_PREDECESSORS, HloComputation, HloInstruction, HloModule
from .opcodes import (BINARY_ELEMENTWISE, FIXED_ARITY, SAME_TYPE_ELEMENTWISE,
                      TERNARY_ELEMENTWISE, UNARY_ELEMENTWISE)
from .shape import Shape, bit_width, is_signed_int, is_unsigned_int, same_shape

__all__ = ["VerificationError", "verify_instruction", "verify_computation",
           "verify_module", "compatible"]


class VerificationError(HloError):
    """A rule of the verifier is broken: `instruction` and `detail` say
    which and how (the parser reports them at the instruction's position)."""

    def __init__(self, inst: HloInstruction, detail: str):
        self.instruction, self.detail = inst, detail
        super().__init__(str(inst.error(detail)))


# Elementwise ops that keep the dimensions (bitcast-convert between types of
# different widths adds or drops a minor dimension: checked on its own).
_SAME_DIMS = UNARY_ELEMENTWISE - {"bitcast-convert"} | BINARY_ELEMENTWISE | \
    TERNARY_ELEMENTWISE
# Ops on arrays only (no tuple operands or results).
_ARRAY_OPS = _SAME_DIMS | frozenset({
    "bitcast-convert", "broadcast", "reshape", "bitcast", "transpose", "slice",
    "reverse", "pad", "iota", "concatenate", "dynamic-slice",
    "dynamic-update-slice", "gather", "dot"})
# Structural ops whose (data) operands have the result's element type.
_SAME_TYPE_STRUCTURAL = frozenset({
    "broadcast", "reshape", "transpose", "reverse", "slice", "concatenate",
    "pad", "dynamic-slice", "dynamic-update-slice", "gather"})
_NEEDS_TO_APPLY = ("reduce-window", "scatter", "map", "sort", "all-reduce",
                   "all-reduce-start", "reduce-scatter")
_CALLEE_KEYS = {"fusion": "calls", "call": "to_apply"}


def compatible(a: Shape, b: Shape) -> bool:
    """Same element type and dimensions (layouts ignored), recursively."""
    return same_shape(a, b, layouts=False)


def _fail(inst: HloInstruction, detail: str):
    raise VerificationError(inst, detail)


def verify_computation(comp: HloComputation) -> None:
    """Raises HloError for the first instruction whose shape does not follow
    from its operands and attributes."""
    for inst in comp.instructions:
        verify_instruction(inst)


def verify_instruction(inst: HloInstruction, header: dict | None = None) -> None:
    """`header`: the module header's attributes (by default those of the
    instruction's module, when it is linked to one): a collective's group
    size may depend on replica_count and num_partitions."""
    op = inst.opcode
    shape = inst.shape
    operands = inst.operands
    _check_arity(inst)
    if op in _ARRAY_OPS:
        if shape.is_tuple:
            _fail(inst, f"'{op}' cannot produce a tuple")
        for o in operands:
            if o.shape.is_tuple:
                _fail(inst, f"operand '%{o.name}' of '{op}' is a tuple {o.shape}")
    if op in _SAME_DIMS:
        _verify_elementwise(inst)
    elif op == "bitcast-convert":
        _verify_bitcast_convert(inst)
    checker = _CHECKS.get(op)
    if checker is not None:
        checker(inst)
    collective_checker = _COLLECTIVE_CHECKS.get(op)
    if collective_checker is not None:
        if header is None:
            comp = inst.parent
            module = comp.module if comp is not None else None
            header = module.attrs if module is not None else {}
        collective_checker(inst, header)
    if op in _SAME_TYPE_STRUCTURAL and operands:
        etype = shape.element_type
        checked = operands[:2] if op in ("pad", "dynamic-update-slice") \
            else operands[:1] if op in ("dynamic-slice", "gather") else operands
        for o in checked:
            if o.shape.element_type != etype:
                _fail(inst, f"operand '%{o.name}' is {o.shape.element_type}, "
                            f"'{op}' produces {etype}")
    if op in _NEEDS_TO_APPLY and not isinstance(inst.attrs.get("to_apply"), HloComputation):
        _fail(inst, f"'{op}' needs 'to_apply=' naming a computation")


def _check_arity(inst: HloInstruction) -> None:
    arity = FIXED_ARITY.get(inst.opcode)
    if arity is not None and inst.opcode not in ("parameter", "constant") and \
            len(inst.operands) != arity:
        _fail(inst, f"'{inst.opcode}' takes {arity} operand{'s' if arity != 1 else ''}, "
                    f"has {len(inst.operands)}")


def _verify_elementwise(inst: HloInstruction) -> None:
    op, shape, operands = inst.opcode, inst.shape, inst.operands
    for k, o in enumerate(operands):
        if op in ("select", "clamp") and o.shape.rank == 0 and \
                (op == "clamp" and k != 1 or op == "select" and k == 0):
            continue  # scalar predicate / bounds are broadcast
        if tuple(o.shape.dims) != tuple(shape.dims):
            _fail(inst, f"operand {k} '%{o.name}' has dimensions {list(o.shape.dims)} "
                        f"but '{op}' produces {shape}")
    etype = shape.element_type
    if op in SAME_TYPE_ELEMENTWISE:
        for k, o in enumerate(operands):
            if o.shape.element_type != etype:
                _fail(inst, f"operand {k} '%{o.name}' is {o.shape.element_type}, "
                            f"'{op}' produces {etype}")
    if op == "mulhi" and not (is_signed_int(etype) or is_unsigned_int(etype)):
        _fail(inst, f"'mulhi' needs integer operands, not {etype}")
    if op in ("compare", "is-finite"):
        if etype != "pred":
            _fail(inst, f"'{op}' produces pred, not {etype}")
        if op == "compare":
            if operands[0].shape.element_type != operands[1].shape.element_type:
                _fail(inst, "compare operands differ in type")
            if "direction" not in inst.attrs:
                _fail(inst, "compare needs a 'direction'")
    elif op == "select":
        if operands[0].shape.element_type != "pred":
            _fail(inst, "the select predicate must be pred")
        for o in operands[1:]:
            if o.shape.element_type != etype:
                _fail(inst, f"select operand '%{o.name}' is {o.shape.element_type}, "
                            f"not {etype}")


def _verify_bitcast_convert(inst: HloInstruction) -> None:
    """Same dimensions between types of one width; to a narrower type a
    minor dimension of the width ratio is added, to a wider one the
    operand's minor dimension (the ratio) is dropped."""
    src, dst = inst.operands[0].shape, inst.shape
    a, b = bit_width(src.element_type), bit_width(dst.element_type)
    if a == b:
        ok = tuple(src.dims) == tuple(dst.dims)
    elif a > b:
        ok = a % b == 0 and tuple(dst.dims) == tuple(src.dims) + (a // b,)
    else:
        ok = b % a == 0 and tuple(src.dims) == tuple(dst.dims) + (b // a,)
    if not ok:
        _fail(inst, f"bitcast-convert from {src} cannot give {dst}")


def _check_gte(inst):
    src, index = inst.operands[0].shape, inst.attrs.get("index")
    if not src.is_tuple:
        _fail(inst, f"operand '%{inst.operands[0].name}' is not a tuple")
    if not isinstance(index, int) or not 0 <= index < len(src.tuple_shapes):
        _fail(inst, f"bad tuple index {index!r} into {src}")
    if not compatible(src.tuple_shapes[index], inst.shape):
        _fail(inst, f"element {index} of {src} is not {inst.shape}")


def _check_tuple(inst):
    shape, operands = inst.shape, inst.operands
    if not shape.is_tuple or len(shape.tuple_shapes) != len(operands) or not all(
            compatible(s, o.shape) for s, o in zip(shape.tuple_shapes, operands)):
        _fail(inst, f"tuple shape {shape} does not match its operands")


def _check_call(inst):
    key = _CALLEE_KEYS[inst.opcode]
    callee = inst.attrs.get(key)
    if not isinstance(callee, HloComputation):
        _fail(inst, f"'{inst.opcode}' needs '{key}=' naming a computation")
    params = callee.parameters
    if len(params) != len(inst.operands):
        _fail(inst, f"'{callee.name}' takes {len(params)} parameters, "
                    f"'{inst.opcode}' passes {len(inst.operands)}")
    if callee.root is None or not compatible(callee.root.shape, inst.shape):
        _fail(inst, f"'{callee.name}' returns "
                    f"{getattr(callee.root, 'shape', None)}, not {inst.shape}")
    for k, (param, o) in enumerate(zip(params, inst.operands)):
        if not compatible(param.shape, o.shape):
            _fail(inst, f"operand {k} '%{o.name}' is {o.shape}, parameter {k} of "
                        f"'{callee.name}' is {param.shape}")


def _check_while(inst):
    if len(inst.operands) != 1:
        _fail(inst, f"'while' takes 1 operand (the loop state), has {len(inst.operands)}")
    state = inst.operands[0].shape
    if not compatible(state, inst.shape):
        _fail(inst, f"'while' of {state} cannot give {inst.shape}")
    for key in ("condition", "body"):
        callee = inst.attrs.get(key)
        if not isinstance(callee, HloComputation):
            _fail(inst, f"'while' needs '{key}=' naming a computation")
        params, root = callee.parameters, callee.root
        if len(params) != 1 or not compatible(params[0].shape, state):
            _fail(inst, f"'{callee.name}' must take one parameter of {state}")
        ok = root is not None and (compatible(root.shape, state) if key == "body" else
                                   not root.shape.is_tuple and root.shape.rank == 0 and
                                   root.shape.element_type == "pred")
        if not ok:
            _fail(inst, f"'{callee.name}' returns {getattr(root, 'shape', None)}, not "
                        f"{state if key == 'body' else 'pred[]'}")


def _check_conditional(inst):
    attrs, operands = inst.attrs, inst.operands
    if "branch_computations" in attrs:
        branches = attrs["branch_computations"]
    else:
        branches = [attrs.get("true_computation"), attrs.get("false_computation")]
    if not isinstance(branches, list) or not branches or not all(
            isinstance(b, HloComputation) for b in branches):
        _fail(inst, "'conditional' needs true_computation= and false_computation=, or "
                    "branch_computations=")
    if len(operands) != 1 + len(branches):
        _fail(inst, f"'conditional' with {len(branches)} branches takes "
                    f"{1 + len(branches)} operands, has {len(operands)}")
    selector = operands[0].shape
    if selector.is_tuple or selector.rank != 0 or selector.element_type not in (
            "pred", "s32") or (selector.element_type == "pred" and len(branches) != 2):
        _fail(inst, f"the branch selector is {selector}, not pred[] (two branches) or s32[]")
    for branch, operand in zip(branches, operands[1:]):
        params, root = branch.parameters, branch.root
        if len(params) != 1 or not compatible(params[0].shape, operand.shape):
            _fail(inst, f"'{branch.name}' must take one parameter of {operand.shape}")
        if root is None or not compatible(root.shape, inst.shape):
            _fail(inst, f"'{branch.name}' returns {getattr(root, 'shape', None)}, not "
                        f"{inst.shape}")


def _check_reduce(inst):
    operands, shape = inst.operands, inst.shape
    if len(operands) % 2 or not operands:
        _fail(inst, "reduce takes N inputs and N init values")
    n = len(operands) // 2
    callee = inst.attrs.get("to_apply")
    if not isinstance(callee, HloComputation):
        _fail(inst, "reduce needs 'to_apply='")
    if len(callee.parameters) != len(operands):
        _fail(inst, f"the reducer '{callee.name}' takes {len(callee.parameters)} "
                    f"parameters, expected {len(operands)}")
    dims = inst.attrs.get("dimensions")
    if dims is None:
        _fail(inst, "reduce needs 'dimensions='")
    src = operands[0].shape
    if not isinstance(dims, tuple) or any(not 0 <= d < src.rank for d in dims):
        _fail(inst, f"bad reduce dimensions {dims!r}")
    if any(o.shape.is_tuple or tuple(o.shape.dims) != tuple(src.dims)
           for o in operands[:n]) or any(o.shape.rank != 0 for o in operands[n:]):
        _fail(inst, "reduce inputs must share one shape and init values be scalars")
    kept = tuple(d for k, d in enumerate(src.dims) if k not in dims)
    leaves = shape.tuple_shapes if shape.is_tuple else (shape,)
    if len(leaves) != n or any(leaf.is_tuple or tuple(leaf.dims) != kept for leaf in leaves):
        _fail(inst, f"reducing {src} over {list(dims)} does not give {shape}")


def _check_scatter(inst):
    operands, shape = inst.operands, inst.shape
    if len(operands) < 3 or len(operands) % 2 == 0:
        _fail(inst, "scatter takes N operands, the indices and N updates")
    n = len(operands) // 2
    leaves = shape.tuple_shapes if shape.is_tuple else (shape,)
    if len(leaves) != n or not all(compatible(a, o.shape)
                                   for a, o in zip(leaves, operands[:n])):
        _fail(inst, f"scatter of {[str(o.shape) for o in operands[:n]]} cannot give {shape}")
    operand, indices = operands[0].shape, operands[n].shape
    if any(o.shape.is_tuple for o in operands):
        return  # refused by the tuple rules
    for u in operands[n + 1:]:
        if tuple(u.shape.dims) != tuple(operands[n + 1].shape.dims):
            _fail(inst, "scatter's updates differ in shape")
    _check_scatter_dimensions(inst, operand, indices, operands[n + 1].shape)


def _int_dims(inst, key) -> tuple:
    dims = inst.attrs.get(key) or ()
    if not isinstance(dims, tuple) or not all(isinstance(d, int) for d in dims):
        _fail(inst, f"{key} must be a list of dimensions")
    return dims


def _distinct_dims(inst, what: str, dims: tuple, shape) -> None:
    if len(set(dims)) != len(dims) or any(not 0 <= d < shape.rank for d in dims):
        _fail(inst, f"{what} {list(dims)} are not distinct dimensions of {shape}")


def _index_vector_dim(inst, indices) -> tuple[int, int]:
    """index_vector_dim (default: the indices' rank) and the size of an
    index vector."""
    ivd = inst.attrs.get("index_vector_dim", indices.rank)
    if not isinstance(ivd, int) or not 0 <= ivd <= indices.rank:
        _fail(inst, f"index_vector_dim={ivd!r} is not a dimension of the indices "
                    f"{indices} (or their rank)")
    return ivd, indices.dims[ivd] if ivd < indices.rank else 1


def _check_batching(inst, operand_key, indices_key, operand, indices, ivd) -> None:
    on_operand, on_indices = _int_dims(inst, operand_key), _int_dims(inst, indices_key)
    _distinct_dims(inst, indices_key, on_indices, indices)
    if len(on_operand) != len(on_indices) or ivd in on_indices or any(
            operand.dims[a] != indices.dims[b] for a, b in zip(on_operand, on_indices)):
        _fail(inst, f"{operand_key} {list(on_operand)} and {indices_key} "
                    f"{list(on_indices)} do not pair dimensions of equal size")


def _check_index_dims(inst, operand, indices, window, removed_key, batching_keys,
                      map_key) -> tuple:
    """The dimension-number rules scatter and gather share: the window,
    removed-and-batching and index-map dimensions each exist and are named
    once, batching dimensions pair up, and the index map fits the index
    vector. Returns (window, removed, operand batching, index_vector_dim)."""
    window_key, window_shape = window
    window_dims = _int_dims(inst, window_key)
    removed = _int_dims(inst, removed_key)
    batching = _int_dims(inst, batching_keys[0])
    to_operand = _int_dims(inst, map_key)
    ivd, vector = _index_vector_dim(inst, indices)
    _distinct_dims(inst, window_key, window_dims, window_shape)
    _distinct_dims(inst, f"{removed_key} and {batching_keys[0]}", removed + batching, operand)
    _distinct_dims(inst, map_key, to_operand, operand)
    _check_batching(inst, *batching_keys, operand, indices, ivd)
    if len(to_operand) != vector:
        _fail(inst, f"{map_key} has {len(to_operand)} entries for index vectors of {vector}")
    return window_dims, removed, batching, ivd


def _check_scatter_dimensions(inst, operand, indices, updates) -> None:
    """XLA's rules for scatter's dimension numbers: every dimension named
    exists and is named once, the window covers the operand, and the
    updates are the indices' batch dimensions and a window that fits."""
    uwd, iwd, ibd, ivd = _check_index_dims(
        inst, operand, indices, ("update_window_dims", updates), "inserted_window_dims",
        ("input_batching_dims", "scatter_indices_batching_dims"),
        "scatter_dims_to_operand_dims")
    if len(uwd) + len(iwd) + len(ibd) != operand.rank:
        _fail(inst, f"update_window_dims, inserted_window_dims and input_batching_dims "
                    f"do not cover the {operand.rank} dimensions of {operand}")
    batch = [n for d, n in enumerate(indices.dims) if d != ivd]
    if [n for d, n in enumerate(updates.dims) if d not in uwd] != batch:
        _fail(inst, f"the updates {updates} do not have the indices' batch dimensions "
                    f"{batch} besides update_window_dims {list(uwd)}")
    window = [d for d in range(operand.rank) if d not in iwd and d not in ibd]
    if any(updates.dims[u] > operand.dims[d] for u, d in zip(uwd, window)):
        _fail(inst, f"the update window of {updates} does not fit in {operand}")


def _check_dynamic_slice(inst):
    operands, shape = inst.operands, inst.shape
    src = operands[0].shape
    if len(operands) != 1 + src.rank and not (len(operands) == 2 and
                                              operands[1].shape.rank == 1):
        _fail(inst, f"dynamic-slice of a rank-{src.rank} operand takes {src.rank} "
                    "start indices")
    sizes = tuple(inst.attrs.get("dynamic_slice_sizes", ()))
    if sizes != tuple(shape.dims) or any(s > n for s, n in zip(sizes, src.dims)):
        _fail(inst, f"dynamic_slice_sizes={list(sizes)} does not fit {src} or give {shape}")


def _check_dynamic_update_slice(inst):
    operands, shape = inst.operands, inst.shape
    rank = operands[0].shape.rank
    if not compatible(operands[0].shape, shape) or operands[1].shape.rank != rank or any(
            u > n for u, n in zip(operands[1].shape.dims, shape.dims)):
        _fail(inst, f"dynamic-update-slice of {operands[0].shape} with "
                    f"{operands[1].shape} cannot give {shape}")
    if len(operands) != 2 + rank and not (len(operands) == 3 and
                                          operands[2].shape.rank == 1):
        _fail(inst, f"dynamic-update-slice of a rank-{rank} operand takes {rank} "
                    "start indices")


def _check_concatenate(inst):
    operands, shape = inst.operands, inst.shape
    if not operands:
        _fail(inst, "concatenate needs operands")
    dims = inst.attrs.get("dimensions")
    ok = isinstance(dims, tuple) and len(dims) == 1 and 0 <= dims[0] < shape.rank
    if ok:
        d = dims[0]
        total = sum(o.shape.dims[d] if o.shape.rank == shape.rank else -1 for o in operands)
        ok = total == shape.dims[d] and all(
            o.shape.rank == shape.rank and all(o.shape.dims[k] == shape.dims[k]
                                               for k in range(shape.rank) if k != d)
            for o in operands)
    if not ok:
        _fail(inst, f"concatenate dimensions={dims!r} do not produce {shape}")


def _check_broadcast_like(inst):
    op, shape = inst.opcode, inst.shape
    dims = inst.attrs.get("dimensions")
    if not isinstance(dims, tuple):
        _fail(inst, f"'{op}' needs 'dimensions={{...}}'")
    src = inst.operands[0].shape
    if op == "broadcast":
        if len(dims) != src.rank or any(not 0 <= d < shape.rank or shape.dims[d] != n
                                        for d, n in zip(dims, src.dims)):
            _fail(inst, f"broadcast dimensions {list(dims)} do not map {src} into {shape}")
    elif op == "transpose":
        if sorted(dims) != list(range(src.rank)) or \
                tuple(shape.dims) != tuple(src.dims[d] for d in dims):
            _fail(inst, f"transpose dimensions {list(dims)} do not permute {src} into {shape}")
    elif any(not 0 <= d < src.rank for d in dims) or tuple(shape.dims) != tuple(src.dims):
        _fail(inst, f"bad reverse of {src} into {shape}")


def _check_reshape(inst):
    src = inst.operands[0].shape
    if src.num_elements != inst.shape.num_elements:
        _fail(inst, f"{inst.opcode} from {src} to {inst.shape} changes the element count")


def _check_slice(inst):
    spec, src, shape = inst.attrs.get("slice"), inst.operands[0].shape, inst.shape
    if not isinstance(spec, list) or len(spec) != src.rank or any(
            not 0 <= lo <= hi <= n or st <= 0 for (lo, hi, st), n in zip(spec, src.dims)) \
            or tuple(shape.dims) != tuple((hi - lo + st - 1) // st for lo, hi, st in spec):
        _fail(inst, f"slice={spec!r} does not take {shape} out of {src}")


def _check_pad(inst):
    spec, src = inst.attrs.get("padding") or [], inst.operands[0].shape
    if len(spec) != src.rank or inst.operands[1].shape.rank != 0:
        _fail(inst, "padding must have one entry per dimension and a scalar value")
    expected = tuple(lo + hi + n + max(n - 1, 0) * it for (lo, hi, it), n in zip(spec, src.dims))
    if any(it < 0 for _, _, it in spec) or expected != tuple(inst.shape.dims):
        _fail(inst, f"padding gives dimensions {list(expected)}, not {list(inst.shape.dims)}")


def _check_iota(inst):
    if not 0 <= inst.attrs.get("iota_dimension", -1) < max(inst.shape.rank, 1):
        _fail(inst, "iota_dimension is not a dimension of the result")


def _check_gather(inst):
    sizes, src = inst.attrs.get("slice_sizes"), inst.operands[0].shape
    if not isinstance(sizes, tuple) or len(sizes) != src.rank or any(
            not isinstance(s, int) or not 0 <= s <= n for s, n in zip(sizes, src.dims)):
        _fail(inst, "slice_sizes must give one size per operand dimension, within it")
    if inst.operands[1].shape.is_tuple:
        return  # refused by the tuple rules
    _check_gather_dimensions(inst, src, inst.operands[1].shape, sizes)


def _check_gather_dimensions(inst, operand, indices, sizes) -> None:
    """XLA's rules for gather's dimension numbers: every dimension named
    exists and is named once, collapsed and batching dimensions are sliced
    to 1, and the result is the indices' batch dimensions and the slice."""
    shape = inst.shape
    offset, collapsed, obd, ivd = _check_index_dims(
        inst, operand, indices, ("offset_dims", shape), "collapsed_slice_dims",
        ("operand_batching_dims", "start_indices_batching_dims"), "start_index_map")
    if any(sizes[d] > 1 for d in collapsed + obd):
        _fail(inst, "collapsed and batching dimensions must have slice size 1 or 0")
    kept = [sizes[d] for d in range(operand.rank) if d not in collapsed and d not in obd]
    batch = [n for d, n in enumerate(indices.dims) if d != ivd]
    if len(kept) != len(offset) or shape.rank != len(offset) + len(batch) or \
            [shape.dims[d] for d in offset] != kept or \
            [n for d, n in enumerate(shape.dims) if d not in offset] != batch:
        _fail(inst, f"a gather of slices {list(sizes)} at indices {indices} with "
                    f"offset_dims {list(offset)} does not give {shape}")


def _check_reduce_window(inst):
    window = inst.attrs.get("window") or {}
    rank = inst.operands[0].shape.rank
    if not isinstance(window, dict) or any(len(v) != rank for v in window.values()):
        _fail(inst, "window must have one entry per operand dimension")


def _check_dot(inst):
    lhs, rhs = inst.operands[0].shape, inst.operands[1].shape
    dims = {key: tuple(inst.attrs.get(key) or ()) for key in (
        "lhs_batch_dims", "rhs_batch_dims", "lhs_contracting_dims", "rhs_contracting_dims")}
    used = {}
    for side, operand in (("lhs", lhs), ("rhs", rhs)):
        used[side] = dims[f"{side}_batch_dims"] + dims[f"{side}_contracting_dims"]
        if len(set(used[side])) != len(used[side]) or any(
                not isinstance(d, int) or not 0 <= d < operand.rank for d in used[side]):
            _fail(inst, f"the {side} batch and contracting dimensions {list(used[side])} "
                        f"are not distinct dimensions of {operand}")
    for kind in ("batch", "contracting"):
        a, b = dims[f"lhs_{kind}_dims"], dims[f"rhs_{kind}_dims"]
        if len(a) != len(b) or any(lhs.dims[i] != rhs.dims[j] for i, j in zip(a, b)):
            _fail(inst, f"{kind} dimensions {list(a)} of {lhs} and {list(b)} of {rhs} "
                        "do not match")
    expected = [lhs.dims[d] for d in dims["lhs_batch_dims"]] + [
        n for d, n in enumerate(lhs.dims) if d not in used["lhs"]] + [
        n for d, n in enumerate(rhs.dims) if d not in used["rhs"]]
    if list(inst.shape.dims) != expected:
        _fail(inst, f"a dot of {lhs} and {rhs} has dimensions {expected}, not "
                    f"{list(inst.shape.dims)}")


# -- collectives -------------------------------------------------------------

def _header_count(header: dict, key: str) -> int | None:
    """The module header's count, None when the header does not give it (the
    rules that need it are then skipped, as XLA skips its replica-count
    check for a module configured with one replica)."""
    raw = header.get(key)
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        return None
    return value if value > 0 else None


def _collective_groups(inst, header):
    """(groups, mode, group size or None) of a collective; refuses
    malformed replica groups, channel_id or mode."""
    opcode = _collectives.ASYNC_COLLECTIVE_STARTS.get(inst.opcode, inst.opcode)
    raw_channel = inst.attrs.get("channel_id")
    if raw_channel is not None:
        try:
            int(str(raw_channel).strip())
        except ValueError:
            _fail(inst, f"channel_id={raw_channel} is not an integer")
    ugdi = inst.attrs.get("use_global_device_ids", False) \
        if opcode in ("all-reduce", "all-gather", "reduce-scatter") else None
    if "use_global_device_ids" in inst.attrs and ugdi is None:
        _fail(inst, f"'{inst.opcode}' takes no use_global_device_ids")
    replicas = _header_count(header, "replica_count")
    partitions = _header_count(header, "num_partitions")
    try:
        groups = _collectives.parse_replica_groups(inst.attrs.get("replica_groups", "{}"))
        mode = _collectives.group_mode_for(opcode, raw_channel is not None, ugdi)
        size = _collectives.group_size_for(groups, mode, replicas, partitions)
    except HloError as e:
        _fail(inst, str(e))
    limit = {_collectives.GroupMode.CROSS_REPLICA: replicas,
             _collectives.GroupMode.CROSS_REPLICA_AND_PARTITION: replicas,
             _collectives.GroupMode.CROSS_PARTITION: partitions,
             _collectives.GroupMode.FLATTENED_ID:
                 (replicas or 1) * (partitions or 1) if replicas or partitions else None}[mode]
    if opcode != "collective-permute" and limit is not None:
        for group in groups:
            for i in group:
                if i >= limit:
                    _fail(inst, f"replica_groups name id {i}, but {mode.value} ids run "
                                f"from 0 to {limit - 1} (the module header's replica_count "
                                "and num_partitions)")
    return groups, mode, size


def _array_operands(inst):
    if not inst.operands:
        _fail(inst, f"'{inst.opcode}' needs at least one operand")
    for o in inst.operands:
        if o.shape.is_tuple:
            _fail(inst, f"operand '%{o.name}' of '{inst.opcode}' is a tuple {o.shape}; "
                        "collectives take arrays")
    return [o.shape for o in inst.operands]


def _results_shape(inst, results, shape=None):
    """The shape a collective of these per-operand results has: the one
    result, or a tuple of them."""
    shape = inst.shape if shape is None else shape
    expected = results[0] if len(results) == 1 else Shape("", (), None, tuple(results))
    if not compatible(expected, shape):
        _fail(inst, f"'{inst.opcode}' of {', '.join(map(str, [o.shape for o in inst.operands]))} "
                    f"gives {expected}, not {shape}")


def _collective_dimension(inst, operands):
    d = _collectives.collective_dimension(inst)
    if d is None:
        _fail(inst, f"'{inst.opcode}' needs dimensions={{d}} (one dimension)")
    for o in operands:
        if not 0 <= d < o.rank:
            _fail(inst, f"dimensions={{{d}}} is not a dimension of the operand {o}")
    return d


def _scaled(operand, d, dim):
    return operand.with_dims(operand.dims[:d] + (dim,) + operand.dims[d + 1:])


def _check_gathered(inst, operands, results, d, size, scatter: bool) -> None:
    """all-gather: result dim d = operand dim d * group size; reduce-scatter:
    operand dim d = result dim d * group size; the other dims equal."""
    what = "reduce-scatter" if scatter else "all-gather"
    parts = results if len(operands) > 1 else [results]
    if len(operands) > 1 and (not isinstance(results, tuple) or len(results) != len(operands)):
        _fail(inst, f"'{inst.opcode}' of {len(operands)} operands gives a tuple of "
                    f"{len(operands)}, not {inst.shape}")
    for o, r in zip(operands, parts):
        big, small = (o, r) if scatter else (r, o)
        ok = not r.is_tuple and r.element_type == o.element_type and r.rank == o.rank and \
            all(a == b for k, (a, b) in enumerate(zip(r.dims, o.dims)) if k != d)
        if ok and size is not None:
            ok = big.dims[d] == small.dims[d] * size
        elif ok:
            ok = (small.dims[d] == 0 and big.dims[d] == 0) or \
                (small.dims[d] > 0 and big.dims[d] % small.dims[d] == 0)
        if not ok:
            if size is not None:
                want = _scaled(o, d, o.dims[d] // size if scatter else o.dims[d] * size)
                detail = f"gives {want}, not {r}"
                if scatter and o.dims[d] % size:
                    detail = f"cannot split dimension {d} of {o} into {size} blocks"
            else:
                detail = f"cannot give {r}"
            _fail(inst, f"{what} of {o} along dimension {d} in groups of "
                        f"{size if size is not None else 'unknown size'} {detail}")


def _check_all_reduce(inst, header):
    operands = _array_operands(inst)
    _collective_groups(inst, header)
    _results_shape(inst, operands)


def _check_all_gather(inst, header):
    operands = _array_operands(inst)
    _, _, size = _collective_groups(inst, header)
    d = _collective_dimension(inst, operands)
    shape = inst.shape
    if inst.opcode == "all-gather-start":
        parts = shape.tuple_shapes if shape.is_tuple else ()
        if len(parts) != 2:
            _fail(inst, f"all-gather-start's shape {shape} is not (operands, results)")
        _results_shape(inst, operands, parts[0])
        shape = parts[1]
    results = shape.tuple_shapes if len(operands) > 1 and shape.is_tuple else shape
    _check_gathered(inst, operands, results, d, size, scatter=False)


def _check_reduce_scatter(inst, header):
    operands = _array_operands(inst)
    _, _, size = _collective_groups(inst, header)
    d = _collective_dimension(inst, operands)
    results = inst.shape.tuple_shapes if len(operands) > 1 and inst.shape.is_tuple \
        else inst.shape
    _check_gathered(inst, operands, results, d, size, scatter=True)


def _check_all_to_all(inst, header):
    operands = _array_operands(inst)
    _, _, size = _collective_groups(inst, header)
    if "dimensions" in inst.attrs:
        if len(operands) != 1:
            _fail(inst, f"all-to-all with dimensions={{d}} takes one operand, has "
                        f"{len(operands)}")
        d = _collective_dimension(inst, operands)
        if size is not None and operands[0].dims[d] % size:
            _fail(inst, f"all-to-all cannot split dimension {d} of {operands[0]} into "
                        f"{size} blocks (the group size)")
        _results_shape(inst, operands)
        return
    if size is not None and len(operands) != size:
        _fail(inst, f"all-to-all without dimensions (the tuple form) takes one operand per "
                    f"participant ({size}), has {len(operands)}")
    if not compatible(Shape("", (), None, tuple(operands)), inst.shape):
        _fail(inst, f"all-to-all of {len(operands)} operands gives "
                    f"({', '.join(map(str, operands))}), not {inst.shape}")


def _check_ragged_all_to_all(inst, header):
    operands = _array_operands(inst)
    _collective_groups(inst, header)
    names = _collectives.RAGGED_OPERANDS
    if len(operands) != len(names):
        _fail(inst, f"ragged-all-to-all takes {len(names)} operands ({', '.join(names)}), "
                    f"has {len(operands)}")
    data, output = operands[0], operands[1]
    if data.element_type != output.element_type or data.rank != output.rank or \
            data.rank == 0 or tuple(data.dims[1:]) != tuple(output.dims[1:]):
        _fail(inst, f"ragged-all-to-all moves rows of its input {data} into its output "
                    f"{output}: the same element type and the same dimensions after the "
                    "first")
    numbers = operands[2:]
    for name, shape in zip(names[2:], numbers):
        if shape.element_type not in ("s32", "s64"):
            _fail(inst, f"ragged-all-to-all's {name} is {shape}; offsets and sizes are s32 "
                        "or s64")
    counts = {math.prod(s.dims) for s in numbers}
    if len(counts) != 1:
        _fail(inst, f"ragged-all-to-all's offsets and sizes hold "
                    f"{[math.prod(s.dims) for s in numbers]} numbers, not one count")
    _results_shape(inst, [output])


def _check_collective_permute(inst, header):
    _collective_groups(inst, header)
    raw = inst.attrs.get("source_target_pairs")
    if raw is None:
        _fail(inst, f"'{inst.opcode}' needs source_target_pairs={{{{source,target}},...}}")
    try:
        _collectives.parse_source_target_pairs(raw)
    except HloError as e:
        _fail(inst, str(e))
    if "slice_sizes" in inst.attrs:
        return  # the in-place form (input, output, start indices): not checked further
    operands = _array_operands(inst)
    if inst.opcode == "collective-permute-start":
        parts = inst.shape.tuple_shapes if inst.shape.is_tuple else ()
        if len(parts) < 2:
            _fail(inst, f"collective-permute-start's shape {inst.shape} is not (operands, "
                        "results, context...)")
        _results_shape(inst, operands, parts[0])
        _results_shape(inst, operands, parts[1])
    else:
        _results_shape(inst, operands)


def _check_collective_broadcast(inst, header):
    operands = _array_operands(inst)
    _collective_groups(inst, header)
    _results_shape(inst, operands)


def _check_done(inst):
    if len(inst.operands) != 1:
        _fail(inst, f"'{inst.opcode}' takes 1 operand (its start op), has "
                    f"{len(inst.operands)}")
    state = inst.operands[0].shape
    if inst.opcode == "all-reduce-done":
        expected = state
    elif state.is_tuple and len(state.tuple_shapes) >= 2:
        expected = state.tuple_shapes[1]
    else:
        _fail(inst, f"the operand of '{inst.opcode}' is {state}, not the (operands, results"
                    ", ...) of its start op")
    if not compatible(expected, inst.shape):
        _fail(inst, f"'{inst.opcode}' of {state} gives {expected}, not {inst.shape}")


def _check_device_id(inst):
    if inst.operands:
        _fail(inst, f"'{inst.opcode}' takes no operands")
    if inst.shape.is_tuple or inst.shape.element_type != "u32" or inst.shape.rank:
        _fail(inst, f"'{inst.opcode}' produces u32[], not {inst.shape}")


# The collectives' checks, given the module header too.
_COLLECTIVE_CHECKS = {
    "all-reduce": _check_all_reduce, "all-reduce-start": _check_all_reduce,
    "all-gather": _check_all_gather, "all-gather-start": _check_all_gather,
    "reduce-scatter": _check_reduce_scatter, "all-to-all": _check_all_to_all,
    "collective-permute": _check_collective_permute,
    "collective-permute-start": _check_collective_permute,
    "collective-broadcast": _check_collective_broadcast,
    "ragged-all-to-all": _check_ragged_all_to_all,
}

_CHECKS = {
    "all-reduce-done": _check_done, "all-gather-done": _check_done,
    "collective-permute-done": _check_done,
    "replica-id": _check_device_id, "partition-id": _check_device_id,
    "dot": _check_dot, "while": _check_while, "conditional": _check_conditional,
    "get-tuple-element": _check_gte, "tuple": _check_tuple, "fusion": _check_call,
    "call": _check_call, "reduce": _check_reduce, "scatter": _check_scatter,
    "dynamic-slice": _check_dynamic_slice,
    "dynamic-update-slice": _check_dynamic_update_slice,
    "concatenate": _check_concatenate, "broadcast": _check_broadcast_like,
    "transpose": _check_broadcast_like, "reverse": _check_broadcast_like,
    "reshape": _check_reshape, "bitcast": _check_reshape, "slice": _check_slice,
    "pad": _check_pad, "iota": _check_iota, "gather": _check_gather,
    "reduce-window": _check_reduce_window,
}


# -- the module -----------------------------------------------------------------

def verify_module(module: HloModule) -> None:
    """Raises HloError naming the first broken invariant of the graph or the
    first instruction that breaks a shape rule."""
    comp_names = [c.name for c in module.computations]
    if len(comp_names) != len(set(comp_names)):
        dup = next(n for n in comp_names if comp_names.count(n) > 1)
        raise HloError(f"two computations are named '{dup}'")
    if sum(c.is_entry for c in module.computations) > 1:
        raise HloError("more than one ENTRY computation")
    members = {id(c) for c in module.computations}
    for comp in module.computations:
        _verify_structure(comp, members)
        verify_computation(comp)


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
        _check_arity(inst)
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
