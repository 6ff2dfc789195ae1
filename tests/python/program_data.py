"""The stored whole-program test data (tests/python/programs/NAME/): JAX
programs as HLO before and after XLA:CPU's passes, with jax's inputs and
outputs. numpy + ml_dtypes only; generate.py (jax) writes the data.

    from program_data import load_program, program_names
    prog = load_program("mlp_train_step")
    module = parse_file(prog.before_path)
    results = evaluate(module, *prog.inputs)
    assert not prog.mismatches(results, module)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import ml_dtypes
import numpy as np

from xla_gpu.hlo import HloModule, numerics

PROGRAMS_DIR = Path(__file__).resolve().parent / "programs"

_COMPLEX_PARTS = {"c64": "f32", "c128": "f64"}

__all__ = ["PROGRAMS_DIR", "ProgramData", "load_program", "program_names", "add_scaled"]


def program_names() -> list[str]:
    """Every stored program, sorted by name."""
    return sorted(p.name for p in PROGRAMS_DIR.iterdir()
                  if (p / "program.json").is_file())


def _leaves(path: Path, prefix: str, records: list[dict]) -> list[np.ndarray]:
    with np.load(path) as stored:
        out = []
        for i, rec in enumerate(records):
            arr = stored[f"{prefix}{i}"]
            if rec["type"] == "bf16":  # stored as its uint16 bit pattern
                arr = arr.view(ml_dtypes.bfloat16)
            if list(arr.shape) != rec["shape"]:
                raise ValueError(f"{path}: {prefix}{i} has shape "
                                 f"{list(arr.shape)}, program.json says "
                                 f"{rec['shape']}")
            out.append(arr)
    return out


@dataclass
class ProgramData:
    name: str
    folder: Path
    meta: dict
    inputs: list[np.ndarray]
    outputs: list[np.ndarray]
    xla_memory: dict[str, int]

    @property
    def before_path(self) -> Path:
        return self.folder / "before_optimizations.hlo"

    @property
    def after_path(self) -> Path:
        return self.folder / "after_optimizations_cpu.hlo"

    @property
    def output_types(self) -> list[str]:
        return [rec["type"] for rec in self.meta["outputs"]]

    def mismatches(self, results: Sequence[np.ndarray],
                   module: HloModule, tf32: bool = False,
                   expected: Sequence[np.ndarray] | None = None) -> list[str]:
        """Differences between `results` (the entry's flattened outputs)
        and jax's, each output within xla_gpu.hlo.numerics' tolerance of
        the least precise float type the module computes in, relative to
        the output's scale (complex: both parts as floats); integers and
        pred exactly. `tf32`: results of a GPU, whose f32 dots compute in
        TF32; `expected`: other outputs than the stored ones (XLA:GPU's)."""
        outputs = self.outputs if expected is None else [np.asarray(e) for e in expected]
        if len(results) != len(outputs):
            return [f"{len(results)} outputs, jax gave {len(outputs)}"]
        found = []
        for i, (actual, expected, etype) in enumerate(
                zip(results, outputs, self.output_types)):
            actual = np.asarray(actual)
            if actual.dtype != expected.dtype:
                found.append(f"output {i}: dtype {actual.dtype}, jax gave "
                             f"{expected.dtype}")
                continue
            if etype in _COMPLEX_PARTS:
                # Complex values: real and imaginary parts as floats.
                part = _COMPLEX_PARTS[etype]
                actual = np.stack([actual.real, actual.imag], axis=-1)
                expected = np.stack([expected.real, expected.imag], axis=-1)
                etype = part
            loosest = numerics.tolerance_type(module.entry, etype, tf32=tf32)
            bad = numerics.compare(actual, expected, etype, i, loosest,
                                   scale_relative=True)
            if bad is not None:
                found.append(str(bad))
        return found


def load_program(name: str) -> ProgramData:
    folder = PROGRAMS_DIR / name
    meta = json.loads((folder / "program.json").read_text())
    return ProgramData(
        name=name, folder=folder, meta=meta,
        inputs=_leaves(folder / "inputs.npz", "arg", meta["inputs"]),
        outputs=_leaves(folder / "outputs.npz", "out", meta["outputs"]),
        xla_memory=json.loads((folder / "xla_memory.json").read_text()))


def add_scaled(x, y, *, scale, mode):
    """A Python twin of programs/ffi_call/handler.cc (custom call target
    xla_gpu_test_add_scaled) for the interpreter: f32 math, as the C++
    handler does it."""
    assert x.dtype == y.dtype == np.float32
    if mode == 0:
        return scale * x
    if mode == 1:
        return scale * x + y
    if mode == 2:
        return scale * (x - y)
    raise ValueError(f"unknown mode {mode}")
