"""The artifact loader under fuzzing: one file of a saved program replaced
by the fuzzer's bytes, digests.json re-hashed to match (what anyone who can
write the directory can do), then loaded as trusted.

An XlaGpuError is the only acceptable failure of the load. When only
program.json or constants.npz changed, the kernels and their manifests are
still what the compiler wrote, so the load's checks (slices, views,
constants) must also make the RUN memory-safe: the loaded program is run
on zeros (stopped after 2 s: an edited loop may never end), and anything but
a result or an XlaGpuError is a crash. A changed
kernel.json is only loaded: a manifest that lies about its own code is
what `trusted=True` vouches against (SECURITY.md).

Importable without atheris: tests/python/api/test_fuzz.py replays saved inputs
through `load_artifact` and writes the seeds with `write_seeds`."""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path

# A loop, a constant, a reduction and an elementwise fusion: thunks of
# several kinds, nested sequences, two kernels.
PROGRAM = """HloModule fuzzed
cond {
  s = (s32[], f32[16]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[16]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[16] get-tuple-element(s), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  k = f32[16] constant({1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16})
  y = f32[16] multiply(x, k)
  ROOT t = (s32[], f32[16]) tuple(j, y)
}
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
ENTRY main {
  x = f32[16] parameter(0)
  zero = s32[] constant(0)
  s = (s32[], f32[16]) tuple(zero, x)
  w = (s32[], f32[16]) while(s), condition=cond, body=body
  r = f32[16] get-tuple-element(w), index=1
  z = f32[] constant(0)
  total = f32[] reduce(r, z), dimensions={0}, to_apply=add
  e = f32[16] exponential(x)
  ROOT out = (f32[], f32[16]) tuple(total, e)
}
"""

# What the first byte of an input picks: the file its other bytes replace.
TARGETS = ("program.json", "kernel.json", "constants.npz")
# Inputs larger than this in all are not run (the fuzzer looks for
# crashes, not for out-of-memory).
_MAX_RUN_BYTES = 1 << 24
_template: Path | None = None


def _template_directory() -> Path:
    """The program above, compiled and saved once per process."""
    global _template
    if _template is None:
        import xla_gpu
        directory = Path(tempfile.mkdtemp(prefix="xla_gpu_fuzz_artifact_")) / "program"
        xla_gpu.compile(PROGRAM, target="cpu", cache=False).save(directory)
        _template = directory
    return _template


def _kernel_manifest(directory: Path) -> str:
    return sorted(str(p.relative_to(directory))
                  for p in directory.glob("kernels/*/kernel.json"))[0]


def write_seeds(corpus: Path) -> None:
    """One seed per target: the template's own file behind its byte."""
    template = _template_directory()
    names = {"program.json": "program.json", "kernel.json": _kernel_manifest(template),
             "constants.npz": "constants.npz"}
    for index, target in enumerate(TARGETS):
        data = (template / names[target]).read_bytes()
        (corpus / f"seed_{target}").write_bytes(bytes([index]) + data)


def load_artifact(data: bytes) -> None:
    if len(data) < 2:
        return
    import numpy as np

    from xla_gpu import runtime
    from xla_gpu.errors import XlaGpuError
    template = _template_directory()
    target = TARGETS[data[0] % len(TARGETS)]
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "program"
        shutil.copytree(template, directory)
        name = _kernel_manifest(directory) if target == "kernel.json" else target
        body = data[1:]
        (directory / name).write_bytes(body)
        digests = json.loads((directory / "digests.json").read_text())
        digests[name] = hashlib.sha256(body).hexdigest()
        (directory / "digests.json").write_text(json.dumps(digests))
        try:
            program = runtime.load(directory, trusted=True)
        except XlaGpuError:
            return
        if target == "kernel.json":
            return
        refs = [ref for group in program.parameters for ref in group]
        if sum(ref.nbytes for ref in refs) > _MAX_RUN_BYTES:
            return
        arguments = [np.zeros(ref.dims, ref.dtype) for ref in refs]
        try:
            # An edited manifest may make a loop that never ends (a
            # predicate nothing writes): that is a program, not a crash.
            program.run(*arguments, timeout=2.0)
        except XlaGpuError:
            pass
