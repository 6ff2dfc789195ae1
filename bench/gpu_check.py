"""The GPU check: compile every example and test fusion here, run them
where the GPU is.

    # on the compiler machine (MLIR installed): write the artifacts
    python bench/gpu_check.py prepare --out build/gpu_check
    # on the GPU machine (numpy + cuda-python + this source tree; no MLIR):
    python bench/gpu_check.py run build/gpu_check
    # the same table here, on the cpu target (needs the compiler):
    python bench/gpu_check.py run build/gpu_check --target cpu

`run` loads each kernel with `xla_gpu.runtime`, feeds it seeded random
inputs, compares with the numpy reference interpreter (`xla_gpu.hlo`),
times it with CUDA events and prints one table row per kernel: emitter,
launch, result, time, and bandwidth as a fraction of a device-to-device
copy measured in the same run. Exit status 1 when any kernel mismatches.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from xla_gpu import hlo  # noqa: E402
from xla_gpu.hlo.fusions import fusion_computation  # noqa: E402
from xla_gpu.hlo.numerics import compare, has_reduction, random_inputs, tolerance_type  # noqa: E402

SOURCES = [ROOT / "examples" / "gelu.hlo",
           *sorted((ROOT / "tests" / "python" / "hlo_inputs").glob("*.hlo")),
           *sorted(p for p in (ROOT / "tests" / "lit" / "emitters").glob("*.hlo")
                   if p.name != "invalid.hlo")]


def _fusions(module) -> list[str | None]:
    if not any(c.is_entry for c in module.computations):
        return [None]
    names = [i.name for i in module.entry.instructions if i.opcode == "fusion"]
    return names or [None]


def prepare(out: Path, arch: str) -> int:
    import xla_gpu
    out.mkdir(parents=True, exist_ok=True)
    index, failures = [], 0
    for path in SOURCES:
        text = path.read_text()
        module = hlo.parse_module(text, source=str(path))
        for fusion in _fusions(module):
            case = f"{path.stem}.{fusion or 'entry'}".replace("/", "_")
            try:
                exe = xla_gpu.compile(text, target="cuda", arch=arch, fusion=fusion)
            except Exception as e:  # report and go on: the table shows it
                index.append({"case": case, "error": f"{type(e).__name__}: {e}".splitlines()[0]})
                failures += 1
                continue
            exe.save(out / case)
            (out / case / "fusion.json").write_text(json.dumps({"fusion": fusion}))
            index.append({"case": case, "emitter": exe.spec.emitter,
                          "cubin": exe.cubin is not None})
    (out / "index.json").write_text(json.dumps(index, indent=1))
    print(f"wrote {len(index) - failures} kernels to {out} ({failures} did not compile)")
    for entry in index:
        if "error" in entry:
            print(f"  {entry['case']}: {entry['error']}")
    return 0


def _copy_bandwidth() -> float:
    """Bytes per second of a 256 MiB device-to-device copy (read + write)."""
    from xla_gpu.runtime import DeviceArray
    from xla_gpu.runtime.cuda import _check, _driver
    cu = _driver()
    n = 256 << 20
    src, dst = DeviceArray((n,), np.uint8), DeviceArray((n,), np.uint8)
    for _ in range(3):
        dst.copy_from_device(src.ptr)
    start = _check("cuEventCreate", cu.cuEventCreate(0))
    stop = _check("cuEventCreate", cu.cuEventCreate(0))
    reps = 20
    _check("cuEventRecord", cu.cuEventRecord(start, 0))
    for _ in range(reps):
        dst.copy_from_device(src.ptr)
    _check("cuEventRecord", cu.cuEventRecord(stop, 0))
    _check("cuEventSynchronize", cu.cuEventSynchronize(stop))
    ms = _check("cuEventElapsedTime", cu.cuEventElapsedTime(start, stop))
    return 2 * n * reps / (ms / 1e3)


def run(directory: Path, target: str, iterations: int) -> int:
    index = json.loads((directory / "index.json").read_text())
    if target == "cuda":
        from xla_gpu import runtime
        copy_bw = _copy_bandwidth()
        print(f"device-to-device copy: {copy_bw / 1e9:.0f} GB/s")
    else:
        copy_bw = None
    rows, bad = [], 0
    for entry in index:
        case = entry["case"]
        if "error" in entry:
            rows.append((case, "-", "-", "NOT COMPILED: " + entry["error"][:60], "", ""))
            continue
        kdir = directory / case
        try:
            fusion = json.loads((kdir / "fusion.json").read_text())["fusion"]
            module = hlo.parse_module((kdir / "fusion.hlo").read_text(), source=case)
            _, comp = fusion_computation(module, fusion)
            inputs = random_inputs(comp, seed=1)
            if target == "cuda":
                kernel = runtime.load(kdir)
            else:
                from xla_gpu.compiler import Executable, compile
                saved = Executable.load(kdir)
                kernel = compile(saved.hlo_text, target="cpu", fusion=fusion)
            spec = kernel.spec
            got = kernel.run(*inputs)
            want = hlo.evaluate(comp, *inputs)
            worst = None
            for k, (g, w, o) in enumerate(zip(got, want, spec.outputs)):
                m = compare(np.asarray(g), np.asarray(w), o.dtype, k, tolerance_type(comp, o.dtype),
                            has_reduction(comp))
                if m is not None and (worst is None or m.count > worst.count):
                    worst = m
            result = "ok" if worst is None else f"MISMATCH {worst}"
            bad += worst is not None
            seconds = kernel.time(*inputs, iterations=iterations, warmup=3)
            moved = sum(p.nbytes for p in spec.parameters) + sum(o.nbytes for o in spec.outputs)
            bw = moved / seconds
            frac = f"{bw / copy_bw:.0%}" if copy_bw else f"{bw / 1e9:.2f} GB/s"
            rows.append((case, spec.emitter, f"{spec.blocks}x{spec.threads}", result,
                         f"{seconds * 1e6:.1f} us", frac))
        except Exception as e:
            bad += 1
            rows.append((case, "-", "-", f"ERROR {type(e).__name__}: {e}".splitlines()[0][:90],
                         "", ""))
            traceback.print_exc(file=sys.stderr)
    header = ("kernel", "emitter", "grid", "result", "time", "of copy bw" if copy_bw else "bw")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(6)]
    print(" | ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("-|-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    print(f"{len(rows) - bad} of {len(rows)} kernels match the reference interpreter")
    return 1 if bad else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="compile every fusion to cuda artifacts")
    p.add_argument("--out", type=Path, default=ROOT / "build" / "gpu_check")
    p.add_argument("--arch", default="sm_90")
    r = sub.add_parser("run", help="run the artifacts and check them")
    r.add_argument("directory", type=Path)
    r.add_argument("--target", choices=["cuda", "cpu"], default="cuda")
    r.add_argument("--iterations", type=int, default=50)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    code = prepare(args.out, args.arch) if args.cmd == "prepare" else \
        run(args.directory, args.target, args.iterations)
    print(f"({time.perf_counter() - start:.1f} s)")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
