"""The benchmark on a GPU: our kernels (through xla_gpu.runtime) against
XLA:GPU (jax.jit) on the same shapes and data, in one run.

    # here (the compiler, MLIR): cuda artifacts for the corpus, sm_90
    python bench/run_gpu.py prepare                      # -> build/run_gpu (small)
    # on the GPU machine (numpy, cuda-python, jax with a GPU; no MLIR; this
    # tree copied there, build/run_gpu carried along):
    python bench/run_gpu.py run build/run_gpu --out "$OUT"
    # back here: the table into bench/RESULTS.md
    python bench/run_gpu.py report results/run_gpu.json
    # whole programs: ours (CUDA graphs on and off) vs jax.jit, launch overhead
    python bench/run_gpu.py prepare-programs             # -> build/run_gpu_programs
    python bench/run_gpu.py run-programs build/run_gpu_programs --out "$OUT"
    # the script's logic without a GPU: cpu target vs XLA:CPU, small sizes
    python bench/run_gpu.py prepare --sizes cpu --out /tmp/run_gpu_cpu
    python bench/run_gpu.py run /tmp/run_gpu_cpu --target cpu

`run` feeds both sides the same seeded inputs (xla_gpu.hlo.numerics
.random_inputs on the stored HLO, then the case's fixups), checks our
outputs against jax's with the tolerances of xla_gpu.hlo.numerics, and times:

- ours, CUDA events around N back-to-back launches (`LoadedKernel.time`),
  and wall clock around the same N launches then a synchronize;
- XLA:GPU, wall clock around N back-to-back calls of the jitted function
  (dispatch is asynchronous, so the GPU stays busy when a call takes longer
  than its dispatch) then block_until_ready. XLA runs on its own streams,
  which CUDA events on ours cannot bracket, hence the wall clock; the ratio
  compares wall with wall. Arguments that our kernel updates in place
  (dynamic-update-slice, scatter) are donated to XLA too, each call's result
  feeding the next, so neither side copies the buffer.

Bandwidth: the bytes a kernel must move (each input and output once; the
update only for in-place kernels) per second, as a fraction of a 256 MiB
device-to-device copy measured in the same run. A time budget (--budget,
default 400 s for the cases) keeps the whole run under 8 minutes; cases
past it are listed as skipped.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import shutil
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
try:  # the installed package: its native part and generated op builders
    import xla_gpu  # noqa: F401,E402
except ImportError:  # a bare source tree (a GPU machine: runtime and hlo only)
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import benchlib as bl  # noqa: E402
import corpus  # noqa: E402

DEFAULT_DIR = ROOT / "build" / "run_gpu"


# -- prepare (needs the compiler) -------------------------------------------------

def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def prepare(out: Path, sizes: str, arch: str, cases) -> int:
    import xla_gpu
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    index = {"sizes": sizes, "arch": arch, "git": bl.git_head(),
             "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
             "cases": []}
    for case in cases:
        text = case.hlo(sizes)
        (out / f"{case.name}.hlo").write_text(text)
        entry = {"case": case.name, "hlo": f"{case.name}.hlo"}
        t0 = time.perf_counter()
        try:
            kernel_text, fusion = text, bl.entry_name(text)
            if case.gemm:
                kernel_text, fusion = gemm_fusion_text(text)
                (out / f"{case.name}.kernel.hlo").write_text(kernel_text)
                entry.update(kernel_hlo=f"{case.name}.kernel.hlo", fusion=fusion)
            exe = xla_gpu.compile(kernel_text, target="cuda", arch=arch, cache=False,
                                  fusion=fusion)
        except Exception as e:  # recorded: the table says "not supported yet"
            entry["error"] = f"{type(e).__name__}: {e}"
        else:
            exe.save(out / case.name)
            entry.update(artifact=case.name, emitter=exe.spec.emitter,
                         launch=f"{exe.spec.blocks}x{exe.spec.threads}",
                         cubin=exe.cubin is not None, notes=exe.notes)
        entry["compile_s"] = time.perf_counter() - t0
        index["cases"].append(entry)
        print(f"  {case.name:22s} " + (f"not supported yet ({bl.reason(entry['error'])})"
                                       if "error" in entry else
                                       f"{entry['emitter']} {entry['launch']}"
                                       f"{'' if entry['cubin'] else ' (PTX only)'}"))
    (out / "index.json").write_text(json.dumps(index, indent=1))
    size = _dir_bytes(out)
    ok = sum("error" not in e for e in index["cases"])
    print(f"wrote {ok} of {len(cases)} kernels ({sizes} sizes, {arch}) to {out}: "
          f"{size / (1 << 20):.2f} MiB")
    if size > 60 << 20:
        print("warning: over 60 MiB, too large to carry to the GPU machine", file=sys.stderr)
        return 1
    if ok == 0:
        print("error: no kernel was prepared", file=sys.stderr)
        return 1
    try:
        rel = out.resolve().relative_to(ROOT)
        print(f"on the GPU machine: python bench/run_gpu.py run {rel} --out \"$OUT\" "
              f"(carry {rel})")
    except ValueError:
        pass
    return 0


def gemm_fusion_text(text: str) -> tuple[str, str]:
    """A GEMM case's kernel: xla_gpu's HLO passes on jax's text, plain
    products fused too (else they stay library calls), -> (the optimized
    module's text, its GEMM fusion's name)."""
    from xla_gpu import hlo
    from xla_gpu.hlo.passes import optimize
    from xla_gpu.hlo.passes.gemm_fusion import GemmFusion
    from xla_gpu.hlo.printer import module_to_text
    module = optimize(hlo.parse_module(text))
    GemmFusion(enabled=True, pure_matmuls=True).run(module)
    fusions = [i for i in module.entry.instructions
               if i.opcode == "fusion" and str(i.attrs.get("kind")) == "kCustom"]
    entry = module.entry
    if len(fusions) != 1 or entry.root is not fusions[0] or \
            list(fusions[0].operands) != list(entry.parameters):
        # The run feeds the kernel the case's arguments: it must be the
        # whole program, on the parameters in their order.
        raise ValueError("the passes did not make the case one GEMM fusion of the "
                         "parameters in order")
    return module_to_text(module), fusions[0].name


# -- run (numpy + cuda-python + jax; no MLIR for --target cuda) -----------------------

def _copy_bandwidth_host() -> float:
    n = 64 << 20
    src, dst = np.ones(n, np.uint8), np.empty(n, np.uint8)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return 2 * n / best


class _Ours:
    """Our kernel for one case: `run(inputs)` -> numpy outputs, `time(n)` ->
    (events seconds or None, wall seconds) per launch."""

    def __init__(self, directory: Path, entry: dict, text: str, target: str):
        self.target = target
        if target == "cuda":
            from xla_gpu import runtime
            self.kernel = runtime.load(directory / entry["artifact"], trusted=True)
            self.spec = self.kernel.spec
        else:
            import xla_gpu
            if "kernel_hlo" in entry:
                text, fusion = (directory / entry["kernel_hlo"]).read_text(), entry["fusion"]
            else:
                fusion = bl.entry_name(text)
            self.kernel = xla_gpu.compile(text, target="cpu", fusion=fusion)
            self.spec = self.kernel.spec
        self.device_inputs = None

    def run(self, inputs):
        return self.kernel.run(*inputs)

    def upload(self, inputs):
        if self.target == "cuda":
            from xla_gpu.runtime import DeviceArray
            from xla_gpu.runtime.cuda import _check, _driver
            # Not DeviceArray.from_host: it makes a 0-d array 1-d
            # (np.ascontiguousarray), which check_arguments then rejects.
            self.device_inputs = []
            for a in inputs:
                d = DeviceArray(a.shape, a.dtype)
                d.copy_from_host(np.ascontiguousarray(a))
                self.device_inputs.append(d)
            _check("cuCtxSynchronize", _driver().cuCtxSynchronize())
        else:
            self.device_inputs = inputs

    def time(self, n: int) -> tuple[float | None, float]:
        if self.target != "cuda":
            return None, self.kernel.time(*self.device_inputs, iterations=n, warmup=1)
        from xla_gpu.runtime.cuda import _check, _driver
        cu = _driver()
        events = self.kernel.time(*self.device_inputs, iterations=n, warmup=3)
        impl = self.kernel._kernel()          # the CudaKernel: same launches, wall clock
        pointers, outputs, keep = impl.prepare(self.device_inputs)
        for _ in range(3):
            impl.launch(pointers)
        _check("cuCtxSynchronize", cu.cuCtxSynchronize())
        t0 = time.perf_counter()
        for _ in range(n):
            impl.launch(pointers)
        _check("cuCtxSynchronize", cu.cuCtxSynchronize())
        wall = (time.perf_counter() - t0) / n
        del outputs, keep
        return events, wall

    def release(self):
        self.device_inputs = None


class _Xla:
    """jax.jit(f) on the same inputs; donated arguments carry each call's
    result into the next. `options`: XLA compiler options (DebugOptions
    fields), e.g. {"xla_gpu_enable_triton_gemm": False} for cuBLAS alone."""

    def __init__(self, case, inputs, donate: bool, options: dict | None = None):
        import jax
        self.jax = jax
        self.donate = case.donate if donate else ()
        self.fn = jax.jit(case.fn, donate_argnums=self.donate)
        self.inputs = inputs
        self.state = [jax.device_put(a) for a in inputs]
        self.compiled_text = ""
        if options or case.gemm:   # compiled once, its text read (which GEMM XLA chose)
            lowered = self.fn.lower(*self.state)
            compiled = lowered.compile(compiler_options=options) if options else \
                lowered.compile()
            self.compiled_text = compiled.as_text() or ""
            self.fn = compiled

    def gemm_kind(self) -> str | None:
        """Which GEMM XLA compiled: its Triton GEMM fusion or cuBLAS."""
        text = self.compiled_text
        if "__triton_gemm" in text or '"kind":"__triton' in text:
            return "triton"
        if "__cublas" in text:
            return "cuBLAS"
        return None

    def outputs(self) -> tuple[np.ndarray, ...]:
        args = [self.jax.device_put(a) for a in self.inputs]   # fresh: may be donated
        out = self.fn(*args)
        out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        return tuple(np.asarray(o) for o in out)

    def _call(self):
        out = self.fn(*self.state)
        for d in self.donate:       # the in-place result is output 0
            self.state[d] = out[0] if isinstance(out, (tuple, list)) else out
        return out

    def time(self, n: int) -> float:
        self.jax.block_until_ready(self._call())
        t0 = time.perf_counter()
        out = None
        for _ in range(n):
            out = self._call()
        self.jax.block_until_ready(out)
        return (time.perf_counter() - t0) / n

    def release(self):
        self.state = None


def _iterations(seconds_per_call: float, round_seconds: float) -> int:
    return int(min(max(round_seconds / max(seconds_per_call, 1e-7), 5), 5000))


def run(directory: Path, target: str, rounds: int, round_seconds: float, budget: float,
        only: list[str], log) -> dict:
    start = time.perf_counter()
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # leave us memory
    if target == "cpu":
        os.environ["JAX_PLATFORMS"] = "cpu"
    import jax

    from xla_gpu import hlo
    from xla_gpu.hlo.fusions import fusion_computation
    backend = jax.default_backend()
    if target == "cuda" and backend != "gpu":
        raise SystemExit(f"jax runs on '{backend}', not a GPU: install jax with CUDA, "
                         "or use --target cpu")
    index = json.loads((directory / "index.json").read_text())
    device = str(jax.devices()[0].device_kind) if target == "cuda" else "host (cpu target)"
    try:
        if target == "cuda":
            from gpu_check import _copy_bandwidth
            copy_bw = _copy_bandwidth()
        else:
            copy_bw = _copy_bandwidth_host()
    except Exception:  # the table goes on without bandwidth fractions
        traceback.print_exc(file=sys.stderr)
        copy_bw = None
    log(f"device: {device}; copy bandwidth "
        f"{'?' if copy_bw is None else f'{copy_bw / 1e9:.0f}'} GB/s")
    rows = []
    for entry in index["cases"]:
        name = entry["case"]
        if only and name not in only:
            continue
        case = corpus.BY_NAME[name]
        row = {"case": name, "emitter": entry.get("emitter"), "launch": entry.get("launch"),
               "flops": case.flops(index["sizes"])}
        rows.append(row)
        if time.perf_counter() - start > budget:
            row["skipped"] = "time budget"
            log(f"[skip] {name}: past the {budget:.0f} s budget")
            continue
        log(f"[case] {name}")
        ours = xla = xla_lib = None
        try:
            text = (directory / entry["hlo"]).read_text()
            _, comp = fusion_computation(hlo.parse_module(text, source=name))
            inputs = case.inputs(comp, seed=1)
            xla = _Xla(case, inputs, donate=True)
            if case.gemm and target == "cuda":
                row["xla_gemm"] = xla.gemm_kind()
                try:
                    xla_lib = _Xla(case, inputs, donate=True,
                                   options={"xla_gpu_enable_triton_gemm": False})
                    row["xla_lib_gemm"] = xla_lib.gemm_kind()
                except Exception as e:  # the table goes on without cuBLAS alone
                    row["xla_lib_error"] = f"{type(e).__name__}: {e}"[:200]
            want = xla.outputs()
            row["bytes"] = case.bytes_moved(inputs, list(want))
            if "error" in entry:
                row["error"] = entry["error"]
            else:
                ours = _Ours(directory, entry, text, target)
                got = ours.run(inputs)
                row["check"], row["ok"] = bl.check_outputs(got, want, ours.spec.outputs,
                    reduction=ours.spec.emitter == "reduction")
                ours.upload(inputs)
                del got
            del want
            # per-call estimates, then rounds with ours and XLA alternating
            t_x = xla.time(3)
            n_x = _iterations(t_x, round_seconds)
            if ours is not None:
                _, t_o = ours.time(3)
                n_o = _iterations(t_o, round_seconds)
            ev, wall, xt, lt = [], [], [], []
            for _ in range(rounds):
                if ours is not None:
                    e, w = ours.time(n_o)
                    ev.append(e)
                    wall.append(w)
                xt.append(xla.time(n_x))
                if xla_lib is not None:
                    lt.append(xla_lib.time(n_x))
            if lt:
                row["xla_lib_s"] = bl.median(lt)
            row["ours_events_s"] = bl.median(ev) if any(e is not None for e in ev) else None
            row["ours_wall_s"] = bl.median(wall) if wall else None
            row["xla_s"] = bl.median(xt)
            row["iterations"] = {"ours": n_o if ours else None, "xla": n_x}
        except Exception as e:
            row["failure"] = f"{type(e).__name__}: {e}"
            traceback.print_exc(file=sys.stderr)
        finally:
            for side in (ours, xla, xla_lib):
                if side is not None:
                    side.release()
            ours = xla = xla_lib = None
            gc.collect()
    return {"meta": {"target": target, "device": device, "copy_bw": copy_bw,
                     "jax": jax.__version__, "backend": backend, "sizes": index["sizes"],
                     "arch": index["arch"], "prepared": index.get("date"),
                     "prepared_git": index.get("git"), "rounds": rounds,
                     "round_seconds": round_seconds, "machine": bl.machine(),
                     "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
                     "wall_s": time.perf_counter() - start},
            "rows": rows}


def report(result: dict, command: str) -> str:
    meta, rows = result["meta"], result["rows"]
    cuda = meta["target"] == "cuda"
    xla_name = "XLA:GPU" if cuda else "XLA:CPU"
    copy_gbs = f"{meta['copy_bw'] / 1e9:.0f}" if meta.get("copy_bw") else "not measured"
    title = "On a GPU" if cuda else "The GPU script's logic on the cpu target (not GPU figures)"
    out = [f"## {title}: `{command}`", "",
           f"- date: {meta['date']}; device: {meta['device']}; jax {meta['jax']} "
           f"({meta['backend']})",
           f"- host: {bl.machine_line(meta['machine'])}",
           f"- kernels: prepared {meta.get('prepared')} from {meta.get('prepared_git')}, "
           f"{meta['sizes']} sizes, {meta['arch']}",
           f"- copy bandwidth ({'256 MiB device-to-device' if cuda else '64 MiB host memcpy'},"
           f" read + write): "
           f"{copy_gbs} GB/s",
           f"- {meta['rounds']} rounds of about {meta['round_seconds']} s per side, "
           "alternating; medians. Ours: " + (
               "CUDA events around N launches, and wall clock around the same launches "
               "then a synchronize" if cuda else
               "`exe.time` of xla_gpu.compile(text, target=\"cpu\") (the grid emulated "
               "on the host)") + f"; {xla_name}: wall clock around N calls of the jitted "
           "function (asynchronous dispatch) then block_until_ready. Ratio: wall / wall.",
           f"- wall time of the run: {meta['wall_s']:.0f} s", ""]
    header = ["case", "emitter", "grid", "check vs " + xla_name,
              "ours µs (events)" if cuda else "ours µs", "ours µs (wall)",
              f"{xla_name} µs (wall)", f"ratio ours/{xla_name.split(':')[0]}",
              "ours of copy bw", f"{xla_name} of copy bw"]
    table, ratios = [], []
    us = lambda s: bl.fmt(None if s is None else s * 1e6)  # noqa: E731
    for r in rows:
        bw = lambda s: "-" if not s or not r.get("bytes") or not meta["copy_bw"] else \
            f"{r['bytes'] / s / meta['copy_bw']:.0%}"  # noqa: E731
        if r.get("skipped"):
            table.append([r["case"], "-", "-", f"skipped ({r['skipped']})"] + ["-"] * 6)
            continue
        if r.get("failure"):
            table.append([r["case"], r.get("emitter") or "-", r.get("launch") or "-",
                          "FAILED: " + bl.reason(r["failure"])] + ["-"] * 6)
            continue
        if r.get("error"):
            table.append([r["case"], f"not supported yet ({bl.reason(r['error'])})", "-", "-",
                          "-", "-", us(r.get("xla_s")), "-", "-", bw(r.get("xla_s"))])
            continue
        q = bl.ratio(r.get("ours_wall_s"), r.get("xla_s"))
        ratios.append(q)
        table.append([r["case"], r["emitter"], r["launch"], r.get("check", "-"),
                      us(r.get("ours_events_s") if cuda else r.get("ours_wall_s")),
                      us(r.get("ours_wall_s")), us(r.get("xla_s")), bl.fmt_ratio(q),
                      bw(r.get("ours_events_s") or r.get("ours_wall_s")), bw(r.get("xla_s"))])
    table.append(["**geomean**", "", "", "", "", "", "", f"**{bl.fmt_ratio(bl.geomean(ratios))}**",
                  "", ""])
    out += [bl.md_table(header, table, "llll" + "r" * 6), ""]
    out += _gemm_table(rows, cuda, xla_name)
    bad = [r["case"] for r in rows if r.get("ok") is False or r.get("failure")]
    if bad:
        out += [f"Mismatches or failures: {', '.join(bad)}.", ""]
    return "\n".join(out)


def _gemm_table(rows: list[dict], cuda: bool, xla_name: str) -> list[str]:
    """The GEMM cases again in TFLOP/s, with XLA's own choice (its Triton
    GEMM or cuBLAS) and cuBLAS alone (Triton GEMMs turned off)."""
    gemms = [r for r in rows if r.get("flops") and r.get("xla_s")]
    if not gemms:
        return []
    tflops = lambda r, s: "-" if not s else f"{r['flops'] / s / 1e12:.1f}"  # noqa: E731
    us = lambda s: bl.fmt(None if s is None else s * 1e6)  # noqa: E731
    header = ["case", "ours (GEMM emitter) µs", f"{xla_name} µs (its choice)",
              f"{xla_name} cuBLAS alone µs", "ours TFLOP/s", f"{xla_name} TFLOP/s",
              "cuBLAS TFLOP/s", f"ratio ours/{xla_name.split(':')[0]}"]
    table = []
    for r in gemms:
        ours = r.get("ours_events_s") if cuda else r.get("ours_wall_s")
        choice = f" ({r['xla_gemm']})" if r.get("xla_gemm") else ""
        table.append([r["case"], us(ours), us(r.get("xla_s")) + choice,
                      us(r.get("xla_lib_s")), tflops(r, ours), tflops(r, r.get("xla_s")),
                      tflops(r, r.get("xla_lib_s")),
                      bl.fmt_ratio(bl.ratio(r.get("ours_wall_s"), r.get("xla_s")))])
    return ["GEMMs (the flops of the product, 2·M·N·K, per second):", "",
            bl.md_table(header, table, "l" + "r" * 7), ""]


def main(argv=None) -> int:
    argv_list = list(sys.argv[1:] if argv is None else argv)
    if argv_list and argv_list[0] in ("prepare-programs", "run-programs"):
        # Whole programs (tests/python/programs): ours with and without
        # command buffers against jax.jit; see bench/programs.py.
        import programs
        command = "prepare-gpu" if argv_list[0] == "prepare-programs" else "run-gpu"
        return programs.main([command, *argv_list[1:]])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="compile the corpus to cuda artifacts (needs MLIR)")
    p.add_argument("cases", nargs="*")
    p.add_argument("--out", type=Path, default=DEFAULT_DIR)
    p.add_argument("--sizes", choices=corpus.SIZES, default="gpu")
    p.add_argument("--arch", default="sm_90")
    r = sub.add_parser("run", help="run ours and XLA side by side")
    r.add_argument("directory", type=Path)
    r.add_argument("--cases", nargs="+", default=[], help="only these cases")
    r.add_argument("--target", choices=["cuda", "cpu"], default="cuda")
    r.add_argument("--rounds", type=int, default=3)
    r.add_argument("--round-seconds", type=float, default=0.2)
    r.add_argument("--budget", type=float, default=400.0,
                   help="seconds after which the remaining cases are skipped")
    r.add_argument("--out", type=Path, default=None,
                   help="where run_gpu.{md,json} go (default: DIRECTORY/results)")
    r.add_argument("--results-md", type=Path, default=None,
                   help="also write the table into this RESULTS.md")
    g = sub.add_parser("report", help="put a run's json into bench/RESULTS.md")
    g.add_argument("json", type=Path)
    g.add_argument("--results-md", type=Path, default=HERE / "RESULTS.md")
    args = parser.parse_args(argv)
    start = time.perf_counter()

    def log(msg):
        print(f"{time.perf_counter() - start:7.1f}s {msg}", file=sys.stderr, flush=True)

    if args.cmd == "prepare":
        return prepare(args.out, args.sizes, args.arch, corpus.select(args.cases))
    if args.cmd == "report":
        result = json.loads(args.json.read_text())
        text = report(result, result["meta"].get("command", "python bench/run_gpu.py run"))
        section = "run_gpu" if result["meta"]["target"] == "cuda" else "run_gpu_cpu"
        bl.update_section(args.results_md, section, text)
        print(text)
        return 0
    corpus.select(args.cases)  # unknown names fail early
    result = run(args.directory, args.target, args.rounds, args.round_seconds, args.budget,
                 args.cases, log)
    command = "python bench/run_gpu.py " + " ".join(argv if argv is not None else sys.argv[1:])
    result["meta"]["command"] = command
    text = report(result, command)
    out = args.out or args.directory / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "run_gpu.md").write_text(text)
    (out / "run_gpu.json").write_text(json.dumps(result, indent=1, default=str))
    if args.results_md:
        bl.update_section(args.results_md, "run_gpu" if args.target == "cuda" else "run_gpu_cpu",
                          text)
    print(text)
    print(f"(wrote {out / 'run_gpu.md'} and run_gpu.json)")
    bad = [r for r in result["rows"] if r.get("ok") is False or r.get("failure")]
    ran = [r for r in result["rows"] if r.get("ok") is True]
    if not ran:
        print("error: no kernel ran", file=sys.stderr)
    return 1 if bad or not ran else 0


if __name__ == "__main__":
    raise SystemExit(main())
