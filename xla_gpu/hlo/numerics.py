"""Inputs and comparisons for checking kernels against the reference
interpreter. numpy only (runs on the GPU machine too).

Tolerances are per element type and live here, in one place. They are
relative to each output's scale: |actual - expected| <= atol + rtol * |expected|,
NaNs must match, infinities must match exactly. Integers and pred compare
exactly."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .graph import reachable
from .module import HloComputation, HloInstruction, callees
from .shape import Shape, bit_width, is_float, is_integral, numpy_dtype

__all__ = ["TOLERANCES", "Mismatch", "compare", "random_inputs", "tolerance_type",
           "has_reduction"]

# (rtol, atol) per element type. f32 allows for transcendental functions
# (libdevice vs numpy, a few ulp) and reassociated reductions; narrow floats
# for one rounding step of the type.
TOLERANCES: dict[str, tuple[float, float]] = {
    "f64": (1e-10, 1e-12),
    "f32": (2e-5, 1e-6),
    "f16": (2e-3, 1e-4),
    "bf16": (1.6e-2, 1e-3),
    "f8e5m2": (0.25, 1e-2), "f8e4m3fn": (0.125, 1e-2), "f8e4m3": (0.125, 1e-2),
    "f8e4m3fnuz": (0.125, 1e-2), "f8e5m2fnuz": (0.25, 1e-2),
    "f8e4m3b11fnuz": (0.125, 1e-2), "f8e3m4": (0.0625, 1e-2),
    "f4e2m1fn": (0.5, 0.25),
    # Powers of two: one rounding step is a factor of two.
    "f8e8m0fnu": (1.0, 0.0),
    # Complex values: each part as its float type.
    "c64": (2e-5, 1e-6),
    "c128": (1e-10, 1e-12),
    # TF32 (f32's range, 10 explicit mantissa bits, as f16): what the GPU's
    # f32 dots and convolutions compute in below HIGHEST precision, as on
    # XLA:GPU; a product's inputs are rounded to it.
    "tf32": (2e-3, 1e-4),
}


def tolerance_type(comp: HloComputation, output_type: str, tf32: bool = False) -> str:
    """The element type whose tolerance applies to an output: the least
    precise float type the computation (or what it calls) computes in, when
    it is less precise than the output's (an f64 output of f32 math is only
    as exact as f32). `tf32`: the results come from a GPU, whose f32 dots
    and convolutions below HIGHEST precision compute in TF32."""
    if not is_float(output_type):
        return output_type
    loosest = output_type

    def looser(t: str) -> bool:
        return TOLERANCES.get(t, (0, 0))[0] > TOLERANCES.get(loosest, (0, 0))[0]

    for c in reachable([comp], lambda c: callees(c)[::-1]):
        for inst in c.instructions:
            for leaf in inst.shape.leaves():
                t = leaf.element_type
                if is_float(t) and looser(t):
                    loosest = t
            if tf32 and _computes_in_tf32(inst) and looser("tf32"):
                loosest = "tf32"
    return loosest


def _computes_in_tf32(inst) -> bool:
    return inst.opcode in ("dot", "convolution") and \
        any(o.shape.element_type == "f32" for o in inst.operands if not o.shape.is_tuple) and \
        "highest" not in str(inst.attrs.get("operand_precision", "")).lower()


@dataclass
class Mismatch:
    output: int
    index: tuple[int, ...]
    actual: object
    expected: object
    count: int
    total: int

    def __str__(self) -> str:
        return (f"output {self.output}: {self.count} of {self.total} elements differ; "
                f"worst at {list(self.index)}: got {self.actual}, expected {self.expected}")


def has_reduction(comp: HloComputation) -> bool:
    """Whether `comp` sums (or otherwise reduces) many elements: its outputs
    are then compared relative to their scale (a reordered sum with
    cancellation is off by ulps of its terms, not of its result)."""
    return any(i.opcode in ("reduce", "reduce-window", "dot") for i in comp.instructions)


def compare(actual: np.ndarray, expected: np.ndarray, element_type: str,
            output: int = 0, tolerance_of: str | None = None,
            scale_relative: bool = False) -> Mismatch | None:
    """None when `actual` matches `expected` within the tolerance of
    `tolerance_of` (default: `element_type`; see `tolerance_type`). With
    `scale_relative` the absolute tolerance grows to rtol times the largest
    finite expected magnitude (see `has_reduction`)."""
    if actual.shape != expected.shape:
        return Mismatch(output, (), actual.shape, expected.shape, -1, -1)
    if element_type in ("c64", "c128"):
        # The real and imaginary parts, each within the tolerance.
        part = "f32" if element_type == "c64" else "f64"
        tolerance_of = {"c64": "f32", "c128": "f64"}.get(tolerance_of or element_type,
                                                         tolerance_of)
        parts = [np.stack([np.real(x), np.imag(x)], axis=-1) for x in (actual, expected)]
        mm = compare(parts[0], parts[1], part, output, tolerance_of, scale_relative)
        if mm is None:
            return None
        # Reported at the complex element; the count is of differing parts.
        where = mm.index[:-1]
        return Mismatch(output, where, actual[where], expected[where], mm.count,
                        mm.total)
    if not is_float(element_type):
        bad = actual != expected
        if not bad.any():
            return None
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        return Mismatch(output, where, actual[where], expected[where],
                        int(bad.sum()), bad.size)
    rtol, atol = TOLERANCES.get(tolerance_of or element_type, (1e-5, 1e-6))
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    if scale_relative:
        finite = np.abs(e[np.isfinite(e)])
        if finite.size:
            atol = max(atol, rtol * float(finite.max()))
    nan_a, nan_e = np.isnan(a), np.isnan(e)
    inf_e = np.isinf(e)
    with np.errstate(invalid="ignore"):
        err = np.abs(a - e)
        bad = (nan_a != nan_e) | (inf_e & (a != e)) | \
            (~nan_e & ~inf_e & ~(err <= atol + rtol * np.abs(e)))
    if not bad.any():
        return None
    score = np.where(bad, np.nan_to_num(err, nan=np.inf, posinf=np.inf), -1.0)
    where = tuple(int(i) for i in np.unravel_index(int(np.argmax(score)), bad.shape))
    return Mismatch(output, where, actual[where], expected[where], int(bad.sum()), bad.size)


_FORWARDING = ("convert", "bitcast", "reshape", "broadcast", "copy")


def _source_parameter(inst: HloInstruction) -> HloInstruction | None:
    """The parameter `inst` is (through converts, reshapes, broadcasts...)."""
    while inst.opcode in _FORWARDING:
        inst = inst.operands[0]
    return inst if inst.opcode == "parameter" else None


def _sequential_computations(comp: HloComputation) -> list[HloComputation]:
    """`comp` and the computations it calls whose parameters are fed by the
    caller's values (call, while, conditional, fusion): constrained uses
    inside them constrain the outer parameters passed in."""
    def fed_by_caller(c: HloComputation) -> list[HloComputation]:
        # The last callee is walked first: the order decides which
        # reduction a parameter shared by several takes its init from.
        return [called for inst in reversed(c.instructions)
                if inst.opcode in ("call", "fusion", "while", "conditional")
                for called in reversed(inst.called_computations)]

    return reachable([comp], fed_by_caller)


def _outer_parameter(inst: HloInstruction, comp: HloComputation,
                     callers: dict[int, tuple]) -> HloInstruction | None:
    """Follows a parameter of a called computation out to a parameter of
    the top computation, when the caller passes one straight through."""
    for _ in range(64):
        param = _source_parameter(inst)
        if param is None:
            return None
        if param.parent is comp or id(param.parent) not in callers:
            return param if param.parent is comp else None
        caller = callers[id(param.parent)]
        if caller.opcode in ("call", "fusion"):
            inst = caller.operands[param.parameter_number]
        else:
            return None          # while/conditional carries change per step
    return None


def _constrained_uses(comp: HloComputation):
    """(parameter number, kind, detail) for every parameter of `comp` that
    XLA's harness constrains: indices ("index", largest valid value),
    reduction init values ("init", (reducer, which init)), sort keys
    ("distinct", None)."""
    callers: dict[int, HloInstruction] = {}
    for c in _sequential_computations(comp):
        for inst in c.instructions:
            if inst.opcode in ("call", "fusion"):
                for called in inst.called_computations:
                    callers[id(called)] = inst
    uses = []

    def note(inst: HloInstruction, where: HloComputation, kind: str, detail) -> None:
        param = _outer_parameter(inst, comp, callers)
        if param is not None:
            uses.append((param.parameter_number, kind, detail))

    for c in _sequential_computations(comp):
        for inst in c.instructions:
            op, ops = inst.opcode, inst.operands
            if op == "dynamic-slice":
                sizes = inst.attrs.get("dynamic_slice_sizes", ())
                for d, start in enumerate(ops[1:]):
                    if d < len(sizes):
                        note(start, c, "index", ops[0].shape.dims[d] - sizes[d])
            elif op == "dynamic-update-slice" and len(ops) >= 2:
                upd = ops[1].shape.dims
                for d, start in enumerate(ops[2:]):
                    if d < len(upd) and d < ops[0].shape.rank:
                        note(start, c, "index", ops[0].shape.dims[d] - upd[d])
            elif op in ("gather", "scatter") and len(ops) >= 2:
                # A scatter's indices follow its operands: (operands...,
                # indices, updates...).
                indices = ops[(len(ops) - 1) // 2] if op == "scatter" else ops[1]
                note(indices, c, "index", max(min(ops[0].shape.dims or (1,)) - 1, 0))
                if op == "scatter" and (inst.attrs.get("unique_indices")
                                        or inst.attrs.get("indices_are_sorted")):
                    # A kernel may rely on these promises (no atomics for
                    # unique indices): inputs that break them have no one
                    # right answer.
                    note(indices, c, "index_vectors",
                         (inst.attrs.get("index_vector_dim", indices.shape.rank),
                          bool(inst.attrs.get("unique_indices")),
                          bool(inst.attrs.get("indices_are_sorted")),
                          _scatter_start_bound(inst)))
            elif op in ("reduce", "reduce-window") and ops:
                reducer = inst.attrs.get("to_apply")
                half = len(ops) // 2
                for k, init in enumerate(ops[half:]):
                    note(init, c, "init", (reducer, k, half))
            elif op == "select-and-scatter" and len(ops) == 3:
                note(ops[2], c, "init", (inst.attrs.get("scatter"), 0, 1))
            elif op == "sort" or (op == "custom-call" and
                                  inst.attrs.get("custom_call_target") == "TopK") \
                    or op == "topk":
                for operand in ops:
                    note(operand, c, "distinct", None)
    return uses


def _scatter_start_bound(scatter: HloInstruction) -> int:
    """How many window starts fit along every operand dimension that a
    scatter's index vector addresses (operand size - window size + 1, the
    least over the vector's components)."""
    ops = scatter.operands
    operand, updates = ops[0], ops[-1]
    attrs = scatter.attrs
    inserted = set(attrs.get("inserted_window_dims", ())) | \
        set(attrs.get("input_batching_dims", ()))
    window_dims = list(attrs.get("update_window_dims", ()))
    window = {}
    for d in range(operand.shape.rank):
        if d not in inserted and window_dims:
            window[d] = updates.shape.dims[window_dims.pop(0)]
    bounds = [operand.shape.dims[d] - window.get(d, 1) + 1
              for d in attrs.get("scatter_dims_to_operand_dims", ())]
    return max(min(bounds, default=1), 1)


def _identity_candidates(element_type: str) -> list:
    dtype = numpy_dtype(element_type)
    if element_type == "pred":
        return [np.bool_(False), np.bool_(True)]
    if is_integral(element_type):
        info = np.iinfo(storage_dtype(element_type)) if bit_width(element_type) >= 8 \
            else None
        lo, hi = (info.min, info.max) if info is not None else \
            ((-(1 << (bit_width(element_type) - 1)), (1 << (bit_width(element_type) - 1)) - 1)
             if element_type.startswith("s") else (0, (1 << bit_width(element_type)) - 1))
        return [dtype.type(v) for v in (0, 1, lo, hi, -1 if lo < 0 else hi)]
    if element_type in ("c64", "c128"):
        return [dtype.type(0), dtype.type(1)]
    with np.errstate(over="ignore"):
        return [dtype.type(v) for v in (0.0, 1.0, -np.inf, np.inf)] + \
            [np.asarray(-np.finfo(np.float32).max).astype(dtype)[()],
             np.asarray(np.finfo(np.float32).max).astype(dtype)[()]]


def _reducer_identity(reducer: HloComputation | None, which: int, count: int,
                      rng: np.random.Generator):
    """The value of init operand `which` of a `count`-way reducer that
    leaves every other value unchanged (XLA's harness gives init parameters
    the reducer's identity: the kernels apply the init once per thread),
    found by trying the usual identities on sample values; None when no
    candidate is an identity."""
    if reducer is None or len(reducer.parameters) != 2 * count:
        return None
    from .interpreter import evaluate
    params = reducer.parameters
    types = [p.shape.element_type for p in params[:count]]
    if any(params[k].shape.rank != 0 for k in range(2 * count)):
        return None
    samples = []
    for t in types:
        if t == "pred":
            samples.append([np.bool_(False), np.bool_(True)])
        elif is_integral(t):
            bits = bit_width(t)
            lo = -(1 << (bits - 1)) if t.startswith("s") else 0
            hi = (1 << (bits - 1)) - 1 if t.startswith("s") else (1 << bits) - 1
            samples.append([numpy_dtype(t).type(min(max(v, lo), hi))
                            for v in (3, 1, 0, 100, -100, 5)])
        else:
            samples.append([np.asarray(v).astype(numpy_dtype(t))[()]
                            for v in (0.75, -1.5, 0.0, 3.5, -3.5, 100.0)])
    candidates = [_identity_candidates(t) for t in types]
    import itertools
    for combo in itertools.product(*candidates):
        ok = True
        for i in range(len(samples[0])):
            xs = [np.asarray(samples[k][i], numpy_dtype(types[k])) for k in range(count)]
            init = [np.asarray(v, numpy_dtype(types[k])) for k, v in enumerate(combo)]
            try:
                got = evaluate(reducer, *init, *xs)
            except (ValueError, ArithmeticError):
                ok = False
                break
            if not all(np.array_equal(np.asarray(g), x, equal_nan=False)
                       for g, x in zip(got, xs)):
                ok = False
                break
        if ok:
            return combo[which]
    return None


def storage_dtype(element_type: str) -> np.dtype:
    dtype = numpy_dtype(element_type)
    if element_type in ("s2", "s4"):
        return np.dtype(np.int8)
    if element_type in ("u2", "u4"):
        return np.dtype(np.uint8)
    return dtype


def _check_fits_in_memory(comp: HloComputation) -> None:
    """Inputs, outputs and the reference's copies must fit in host memory:
    checked before anything is allocated (a clear error, not numpy's)."""
    from ..runtime.memory import check_host_memory

    def nbytes(shape: Shape) -> int:
        return sum(leaf.num_elements * max(bit_width(leaf.element_type), 8) // 8
                   for leaf in shape.leaves() if leaf.element_type != "token")

    inputs = sum(nbytes(p.shape) for p in comp.parameters)
    outputs = nbytes(comp.root.shape) if comp.root is not None else 0
    # Generation works in float64 (8 bytes an element) before converting,
    # and a check keeps the kernel's and the reference's outputs.
    elements = sum(leaf.num_elements for p in comp.parameters for leaf in p.shape.leaves())
    check_host_memory(inputs + 8 * elements + 2 * outputs,
                      f"running computation '{comp.name}' on random inputs")


def random_inputs(comp: HloComputation, seed: int = 0) -> list[np.ndarray]:
    """Seeded random arguments for the parameters of `comp`, made as XLA's
    harness (MakeFakeArguments) makes them: floats in [-2, 2), integers
    small (so that products do not all overflow), and for constrained
    parameters: indices within range, reduction init values the reducer's
    identity, sort keys distinct."""
    _check_fits_in_memory(comp)
    rng = np.random.default_rng(seed)
    limits: dict[int, int] = {}
    inits: dict[int, tuple] = {}
    distinct: set[int] = set()
    vectors: dict[int, tuple[int, bool, bool, int]] = {}
    for number, kind, detail in _constrained_uses(comp):
        if kind == "index":
            limits[number] = min(limits.get(number, detail), detail)
        elif kind == "index_vectors":
            vectors.setdefault(number, detail)
        elif kind == "init":
            inits.setdefault(number, detail)
        else:
            distinct.add(number)
    out = []
    for param in comp.parameters:
        shape: Shape = param.shape
        if shape.is_tuple:
            raise param.error("tuple-shaped parameters have no random inputs; "
                              "pass the leaves")
        t = shape.element_type
        dims = shape.dims
        n = param.parameter_number
        identity = None
        if n in inits:
            identity = _reducer_identity(*inits[n], rng)
        if identity is not None:
            value = np.full(dims, identity, dtype=shape.dtype)
        elif t == "pred":
            value = rng.random(dims) < 0.5
        elif t in ("c64", "c128"):
            value = (rng.uniform(-2, 2, dims) + 1j * rng.uniform(-2, 2, dims)).astype(shape.dtype)
        elif is_integral(t):
            bits = bit_width(t)
            lo, hi = (-64, 64) if t.startswith("s") else (0, 128)
            if bits < 8:
                lo, hi = (-(1 << (bits - 1)), 1 << (bits - 1)) if t.startswith("s") \
                    else (0, 1 << bits)
            if n in limits:
                lo, hi = 0, limits[n] + 1
            if n in vectors:
                value = _index_vectors(dims, *vectors[n], rng)
            elif n in distinct and n not in limits:
                count = max(shape.num_elements, 1)
                base = -(count // 2) if t.startswith("s") else 0
                value = (rng.permutation(count) + base).reshape(dims)
            else:
                value = rng.integers(lo, max(hi, lo + 1), dims)
            value = value.astype(shape.dtype)
        elif n in distinct:
            # Distinct keys exactly representable in the type: a permutation
            # of a grid (so that sorts and top-k have one right answer).
            count = max(shape.num_elements, 1)
            value = _distinct_floats(count, t, rng).reshape(dims)
        elif t == "f8e8m0fnu":   # no sign, no zero: positive powers of two
            value = rng.uniform(1 / 16, 4, dims).astype(np.float32).astype(shape.dtype)
        else:
            value = rng.uniform(-2, 2, dims).astype(np.float32).astype(shape.dtype)
        out.append(np.asarray(value, dtype=shape.dtype).reshape(dims))
    return out


def _index_vectors(dims: tuple[int, ...], vector_dim: int, unique: bool, ordered: bool,
                   bound: int, rng: np.random.Generator) -> np.ndarray:
    """Scatter indices in [0, bound) as XLA's harness makes them for a
    scatter that promises unique or sorted indices: the index vectors (along
    `vector_dim`; one element each when it is the rank) distinct where
    there are enough of them, and in lexicographic order where sorted."""
    dims = tuple(dims)
    rank = len(dims)
    length = dims[vector_dim] if vector_dim < rank else 1
    count = int(np.prod(dims, dtype=np.int64)) // max(length, 1)
    space = bound ** length if length else 1
    if unique and count <= space and space <= 1 << 24:
        codes = rng.choice(space, size=count, replace=False)
        flat = np.stack([(codes // bound ** (length - 1 - k)) % bound
                         for k in range(length)], axis=-1) if length else \
            np.zeros((count, 0), np.int64)
    elif unique and count <= space:
        # A space too large to list: draw, and redraw the repeated vectors
        # (few: the space is over 2^24 and the draws at most the array).
        flat = rng.integers(0, bound, (count, length))
        for _ in range(16):
            distinct_rows = np.unique(flat, axis=0)
            if len(distinct_rows) == count:
                break
            flat = np.concatenate([distinct_rows, rng.integers(
                0, bound, (count - len(distinct_rows), length))])
        flat = rng.permutation(flat)
    else:  # more vectors than distinct values: repeats cannot be avoided
        flat = rng.integers(0, max(bound, 1), (count, length))
    if ordered and count:
        flat = flat[np.lexsort(flat.T[::-1])] if length else flat
    if vector_dim >= rank:
        return flat.reshape(dims)
    rest = dims[:vector_dim] + dims[vector_dim + 1:]
    return np.moveaxis(flat.reshape(rest + (length,)), -1, vector_dim)


def _distinct_floats(count: int, element_type: str, rng: np.random.Generator) -> np.ndarray:
    """`count` distinct values of a float type in [-4, 4], shuffled (as many
    as the type has when it has fewer)."""
    dtype = numpy_dtype(element_type)
    bits = bit_width(element_type)
    if bits <= 16:
        codes = np.arange(1 << bits, dtype=np.uint16 if bits == 16 else np.uint8)
        with np.errstate(invalid="ignore"):    # the codes include NaNs
            values = codes.view(dtype).astype(np.float64)
        values = np.unique(values[np.isfinite(values) & (np.abs(values) <= 4)])
        if values.size >= count:
            return rng.choice(values, size=count, replace=False).astype(dtype)
        return rng.permutation(np.resize(values, count)).astype(dtype)
    step = 4.0 / max(count, 1)
    return ((rng.permutation(count) - count / 2) * step).astype(dtype)
