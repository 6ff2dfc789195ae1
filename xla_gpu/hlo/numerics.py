"""Inputs and comparisons for checking kernels against the reference
interpreter. numpy only (runs on the GPU machine too).

Tolerances are per element type and live here, in one place. They are
relative to each output's scale: |actual - expected| <= atol + rtol * |expected|,
NaNs must match, infinities must match exactly. Integers and pred compare
exactly."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .module import HloComputation, HloInstruction
from .shape import Shape, bit_width, is_float, is_integral

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
}


def tolerance_type(comp: HloComputation, output_type: str) -> str:
    """The element type whose tolerance applies to an output: the least
    precise float type the computation (or what it calls) computes in, when
    it is less precise than the output's (an f64 output of f32 math is only
    as exact as f32)."""
    if not is_float(output_type):
        return output_type
    seen, stack, loosest = set(), [comp], output_type
    while stack:
        c = stack.pop()
        if id(c) in seen:
            continue
        seen.add(id(c))
        for inst in c.instructions:
            for leaf in inst.shape.leaves():
                t = leaf.element_type
                if is_float(t) and TOLERANCES.get(t, (0, 0))[0] > \
                        TOLERANCES.get(loosest, (0, 0))[0]:
                    loosest = t
            stack.extend(inst.called_computations)
    return loosest


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


def _index_limits(comp: HloComputation) -> dict[int, int]:
    """Parameter number -> largest valid index, for parameters used as
    indices (dynamic-slice starts, gather/scatter indices): random values in
    range exercise the kernel rather than only the clamping."""
    limits: dict[int, int] = {}

    def note(inst: HloInstruction, limit: int) -> None:
        while inst.opcode in ("convert", "bitcast", "reshape", "broadcast", "copy"):
            inst = inst.operands[0]
        if inst.opcode == "parameter":
            n = inst.parameter_number
            limits[n] = min(limits.get(n, limit), limit)

    for inst in comp.instructions:
        op = inst.opcode
        if op == "dynamic-slice":
            sizes = inst.attrs.get("dynamic_slice_sizes", ())
            for d, start in enumerate(inst.operands[1:]):
                note(start, inst.operands[0].shape.dims[d] - sizes[d])
        elif op == "dynamic-update-slice":
            upd = inst.operands[1].shape.dims
            for d, start in enumerate(inst.operands[2:]):
                note(start, inst.operands[0].shape.dims[d] - upd[d])
        elif op in ("gather", "scatter"):
            note(inst.operands[1], max(min(inst.operands[0].shape.dims or (1,)) - 1, 0))
    return limits


def random_inputs(comp: HloComputation, seed: int = 0) -> list[np.ndarray]:
    """Seeded random arguments for the parameters of `comp`: floats in
    [-2, 2), integers small (so that products do not all overflow), indices
    within range where an op uses them as indices."""
    rng = np.random.default_rng(seed)
    limits = _index_limits(comp)
    out = []
    for param in comp.parameters:
        shape: Shape = param.shape
        t = shape.element_type
        dims = shape.dims
        if t == "pred":
            value = rng.random(dims) < 0.5
        elif t in ("c64", "c128"):
            value = (rng.uniform(-2, 2, dims) + 1j * rng.uniform(-2, 2, dims)).astype(shape.dtype)
        elif is_integral(t):
            bits = bit_width(t)
            lo, hi = (-64, 64) if t.startswith("s") else (0, 128)
            if bits < 8:
                lo, hi = (-(1 << (bits - 1)), 1 << (bits - 1)) if t.startswith("s") \
                    else (0, 1 << bits)
            if param.parameter_number in limits:
                lo, hi = 0, limits[param.parameter_number] + 1
            value = rng.integers(lo, max(hi, lo + 1), dims).astype(shape.dtype)
        else:
            value = rng.uniform(-2, 2, dims).astype(np.float32).astype(shape.dtype)
        out.append(np.asarray(value, dtype=shape.dtype).reshape(dims))
    return out
