"""The benchmark on a machine without a GPU, ours and XLA side by side in one
run, over the corpus of bench/corpus.py:

    python bench/run_cpu.py                # everything (~10 minutes on 2 cores)
    python bench/run_cpu.py gelu_f32 adam  # some cases
    python bench/run_cpu.py --quick        # fewer repetitions (a smoke test)

1. Compile latency (gpu-size HLO, target="cuda", sm_90; ours to PTX, and
   to cubin where ptxas is found) against XLA:CPU's
   `jax.jit(f).lower(*specs).compile()` for the same function:
   - cold: a fresh Python process, wall time of `import xla_gpu` + compile
     (jax: `import jax` + lower + compile), measured inside the process;
   - warm: in this process after one warm-up compile, cache off (ours), a
     fresh function object after `jax.clear_caches()` (jax);
   - cache hits: the in-memory cache, and the disk cache (a fresh
     XLA_GPU_CACHE_DIR, memory cache cleared before each hit).
   Ours and XLA alternate within each repetition; medians are reported.
2. Run time of the cpu target (the kernel with its GPU grid emulated on the
   host) against XLA:CPU (`jax.jit(f)`, block_until_ready after each call)
   on the same inputs, at the corpus' cpu sizes; outputs checked against
   jax's with xla_gpu.hlo.numerics.compare.
3. Peak memory (ru_maxrss) of a process that compiles the whole corpus
   (ours, target="cuda"), and of one that compiles it with XLA:CPU.
4. Whole programs (tests/python/programs, `--programs N`): cpu-target run
   time and warm compile (target="cuda", to cubin) against XLA:CPU's
   jax.jit of the same program.

Writes bench/results/run_cpu.{md,json,png} and the run_cpu section of
bench/RESULTS.md (--no-results-md to leave it alone). jax and matplotlib
are benchmark tools here, not dependencies of xla_gpu.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
try:  # the installed package: its native part and generated op builders
    import xla_gpu  # noqa: F401,E402
except ImportError:  # a bare source tree (a GPU machine: runtime and hlo only)
    sys.path.insert(0, str(ROOT))

import benchlib as bl  # noqa: E402
import corpus  # noqa: E402

RESULTS = HERE / "results"

_COLD_OURS = r"""
import json, sys, time
t0 = time.perf_counter()
import xla_gpu
t1 = time.perf_counter()
text = open(sys.argv[1]).read()
err = None
try:
    xla_gpu.compile(text, target="cuda", cache=False, fusion=sys.argv[2])
except Exception as e:
    err = f"{type(e).__name__}: {e}"
t2 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "compile": t2 - t1, "total": t2 - t0, "error": err}))
"""

_COLD_XLA = r"""
import json, sys, time
t0 = time.perf_counter()
import jax
t1 = time.perf_counter()
sys.path.insert(0, sys.argv[1])
import corpus
case = corpus.BY_NAME[sys.argv[2]]
specs = case.specs("gpu")
t2 = time.perf_counter()
jax.jit(case.fn).lower(*specs).compile()
t3 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "compile": t3 - t2, "total": (t1 - t0) + (t3 - t2)}))
"""

_PEAK_OURS = r"""
import json, re, sys

def mem():
    # ru_maxrss (KiB), and VmHWM (the peak resident set of this process image)
    import resource
    hwm = 0
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, hwm
import xla_gpu
from xla_gpu import emitters, ir, pipeline
from xla_gpu.backends.cuda import codegen
ir.Context()
base = mem()
done, failed = 0, 0
for path in sys.argv[1:]:
    try:
        text = open(path).read()
        entry = re.search(r"^ENTRY\s+%?([\w.\-]+)", text, re.M).group(1)
        xla_gpu.compile(text, target="cuda", cache=False, fusion=entry)
        done += 1
    except Exception:
        failed += 1
peak = mem()
print(json.dumps({"base_kib": base[0], "peak_kib": peak[0], "hwm_kib": peak[1], "compiled": done, "failed": failed}))
"""

_PEAK_XLA = r"""
import json, sys

def mem():
    # ru_maxrss (KiB), and VmHWM (the peak resident set of this process image)
    import resource
    hwm = 0
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, hwm
import jax
jax.devices()
sys.path.insert(0, sys.argv[1])
import corpus
base = mem()
done = 0
for name in sys.argv[2:]:
    case = corpus.BY_NAME[name]
    jax.jit(case.fn).lower(*case.specs("gpu")).compile()
    done += 1
peak = mem()
print(json.dumps({"base_kib": base[0], "peak_kib": peak[0], "hwm_kib": peak[1], "compiled": done}))
"""


def _subprocess_json(args: list[str], env: dict, clean_rss: bool = False) -> tuple[dict, float]:
    command = [sys.executable, "-c", *args]
    if clean_rss:
        # Linux carries ru_maxrss over exec: a child exec'd from this large
        # process would report at least our size. A shell in between that
        # forks (no exec) starts the measured process from a small image.
        command = ["/bin/sh", "-c", '"$@"; exit $?', "sh", *command]
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=HERE, env=env,
                          capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"subprocess failed ({proc.returncode}): "
                           f"{(proc.stderr or proc.stdout).strip()[-400:]}")
    return json.loads(lines[-1]), wall


def _unsupported(e: BaseException | str) -> str:
    return f"not supported yet ({bl.reason(e)})"


# -- 1. compile latency ----------------------------------------------------------

def compile_latency(cases, repeat: int, cold_repeat: int, env: dict, log) -> list[dict]:
    import jax

    import xla_gpu
    from xla_gpu.compiler import clear_memory_cache
    rows = []
    for case in cases:
        text = case.hlo("gpu")
        path = str(case.hlo_path("gpu"))
        entry = bl.entry_name(text)
        row = {"case": case.name, "what": case.what}
        log(f"[compile] {case.name}")
        # cold: fresh processes, ours and XLA alternating
        cold_o, cold_x, cold_o_wall = [], [], []
        for _ in range(cold_repeat):
            try:
                r, wall = _subprocess_json([_COLD_OURS, path, entry], env)
                if r["error"]:
                    row["error"] = r["error"]
                else:
                    cold_o.append(r["total"])
                    cold_o_wall.append(wall)
            except (RuntimeError, subprocess.SubprocessError) as e:
                row["error"] = str(e)
            try:
                r, _ = _subprocess_json([_COLD_XLA, str(HERE), case.name], env)
                cold_x.append(r["total"])
            except (RuntimeError, subprocess.SubprocessError) as e:
                row["xla_error"] = str(e)
        row["cold_ours_s"] = bl.median(cold_o) if cold_o else None
        row["cold_ours_process_s"] = bl.median(cold_o_wall) if cold_o_wall else None
        row["cold_xla_s"] = bl.median(cold_x) if cold_x else None

        # warm: one warm-up each, then alternate
        specs = case.specs("gpu")

        def xla_once(fn=case.fn, specs=specs):
            jax.clear_caches()

            def fresh(*a):
                return fn(*a)
            t0 = time.perf_counter()
            lowered = jax.jit(fresh).lower(*specs)
            t1 = time.perf_counter()
            lowered.compile()
            t2 = time.perf_counter()
            return t2 - t0, t2 - t1

        exe = None
        try:
            exe = xla_gpu.compile(text, target="cuda", cache=False, fusion=entry)
            row["emitter"] = exe.spec.emitter
            row["launch"] = f"{exe.spec.blocks}x{exe.spec.threads}"
            row["notes"] = exe.notes
            row["cubin"] = exe.cubin is not None
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {e}"
        xla_once()
        warm_cubin, warm_ptx, stages, x_total, x_compile = [], [], [], [], []
        for _ in range(repeat):
            if exe is not None:
                gc.collect()
                t0 = time.perf_counter()
                e2 = xla_gpu.compile(text, target="cuda", cache=False, fusion=entry)
                total = time.perf_counter() - t0
                warm_cubin.append(total)
                warm_ptx.append(total - e2.timings.get("cubin", 0.0))
                stages.append(dict(e2.timings, parse_analysis=max(
                    0.0, e2.timings.get("total", total) - sum(
                        v for k, v in e2.timings.items() if k != "total"))))
            gc.collect()
            a, b = xla_once()
            x_total.append(a)
            x_compile.append(b)
        # The other cubin path on the same PTX: compile uses nvJitLink in
        # process where it loads; a ptxas process (~17 ms to start) beside it.
        if exe is not None and exe.ptx and row.get("cubin"):
            from xla_gpu.backends.cuda import codegen
            if codegen.find_ptxas():
                separate = []
                for _ in range(max(repeat, 3)):
                    t0 = time.perf_counter()
                    cubin = codegen.to_cubin(exe.ptx, "sm_90", use_ptxas=True)
                    separate.append(time.perf_counter() - t0)
                if cubin is not None and warm_ptx:
                    row["warm_ptxas_s"] = bl.median(warm_ptx) + bl.median(separate)
        row["warm_ptx_s"] = bl.median(warm_ptx) if warm_ptx else None
        row["warm_cubin_s"] = bl.median(warm_cubin) if warm_cubin and row.get("cubin") else None
        row["stages_s"] = {k: bl.median([s.get(k) for s in stages])
                           for k in (stages[0] if stages else {})}
        row["xla_warm_s"] = bl.median(x_total)
        row["xla_compile_only_s"] = bl.median(x_compile)

        # cache hits: memory, then disk (memory cleared before each)
        if exe is not None:
            xla_gpu.compile(text, target="cuda", fusion=entry)  # miss: fills both caches
            mem, disk = [], []
            for _ in range(max(repeat, 5)):
                t0 = time.perf_counter()
                xla_gpu.compile(text, target="cuda", fusion=entry)
                mem.append(time.perf_counter() - t0)
            for _ in range(max(repeat, 5)):
                clear_memory_cache()
                t0 = time.perf_counter()
                hit = xla_gpu.compile(text, target="cuda", fusion=entry)
                disk.append(time.perf_counter() - t0)
            assert hit.ptx, "a disk hit without PTX"
            row["mem_hit_s"] = bl.median(mem)
            row["disk_hit_s"] = bl.median(disk)
        rows.append(row)
    return rows


# -- 2. run time, cpu target -------------------------------------------------------

def _outputs_of(value) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def run_time(cases, rounds: int, target_s: float, log) -> list[dict]:
    import jax

    import xla_gpu
    from xla_gpu import hlo
    from xla_gpu.hlo.fusions import fusion_computation
    rows = []
    for case in cases:
        text = case.hlo("cpu")
        row = {"case": case.name, "shapes": ", ".join(
            f"{t}[{','.join(map(str, s))}]" for s, t in case.args["cpu"])}
        log(f"[run] {case.name}")
        _, comp = fusion_computation(hlo.parse_module(text, source=case.name))
        inputs = case.inputs(comp, seed=1)
        jitted = jax.jit(case.fn)
        dev = [jax.device_put(a) for a in inputs]

        def xla_call(jitted=jitted, dev=dev):
            return jax.block_until_ready(jitted(*dev))
        want = _outputs_of(xla_call())
        t0 = time.perf_counter()
        xla_call()
        t_x1 = time.perf_counter() - t0
        try:
            exe = xla_gpu.compile(text, target="cpu", fusion=bl.entry_name(text))
            row["emitter"] = exe.spec.emitter
            got = exe.run(*inputs)
            t0 = time.perf_counter()
            exe.run(*inputs)
            t_o1 = time.perf_counter() - t0
            row["check"], row["ok"] = bl.check_outputs(got, want, exe.spec.outputs,
                reduction=exe.spec.emitter == "reduction")
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {e}"
            exe = None
        n_x = int(min(max(target_s / max(t_x1, 1e-6), 3), 2000))
        # The kernel alone: the loaded kernel launched on buffers prepared
        # once (no argument checks, no output buffers), the rest of
        # `exe.run` being its call path.
        launch = None
        if exe is not None:
            try:
                kernel = exe._load()
                buffers, _ = kernel.spec.host_buffers(inputs)
                pointers = [b.ctypes.data for b in buffers]

                def launch(kernel=kernel, pointers=pointers):
                    kernel.launch(pointers)
            except Exception:   # an executable without a host kernel
                launch = None
        ours, xla, kernel_s = [], [], []
        for _ in range(rounds):
            if exe is not None:
                n_o = int(min(max(target_s / max(t_o1, 1e-6), 2), 2000))
                ours.append(exe.time(*inputs, iterations=n_o, warmup=1))
            if launch is not None:
                t0 = time.perf_counter()
                for _ in range(n_o):
                    launch()
                kernel_s.append((time.perf_counter() - t0) / n_o)
            t0 = time.perf_counter()
            for _ in range(n_x):
                xla_call()
            xla.append((time.perf_counter() - t0) / n_x)
        row["ours_s"] = bl.median(ours) if ours else None
        row["kernel_s"] = bl.median(kernel_s) if kernel_s else None
        row["xla_s"] = bl.median(xla)
        rows.append(row)
        del xla_call, dev, want, inputs
        gc.collect()
    return rows


# -- 3. peak memory ------------------------------------------------------------------

def peak_memory(cases, env: dict) -> dict:
    out = {}
    try:
        r, wall = _subprocess_json([_PEAK_OURS, *[str(c.hlo_path("gpu")) for c in cases]], env,
                                   clean_rss=True)
        out["ours"] = dict(r, wall_s=wall)
    except (RuntimeError, subprocess.SubprocessError) as e:
        out["ours"] = {"error": str(e)}
    try:
        r, wall = _subprocess_json([_PEAK_XLA, str(HERE), *[c.name for c in cases]], env,
                                   clean_rss=True)
        out["xla"] = dict(r, wall_s=wall)
    except (RuntimeError, subprocess.SubprocessError) as e:
        out["xla"] = {"error": str(e)}
    return out


# -- 4. whole programs ------------------------------------------------------------------

# Programs first in the table (the rest follow in name order): a training
# step, a transformer block, normalization, reductions, loops, gathers.
_PROGRAM_ORDER = ("mlp_train_step", "transformer_block", "adam_step", "layer_norm_bf16",
                  "softmax_xent", "reductions", "scan_rnn", "embedding_lookup",
                  "kv_cache_update", "conv_grouped_grad", "sort_topk", "random_dropout")


def program_selection(count: int | None) -> list[str]:
    """The first `count` programs of tests/python/programs (None: all) in
    _PROGRAM_ORDER, then by name."""
    sys.path.insert(0, str(ROOT / "tests" / "python"))
    from program_data import program_names
    names = program_names()
    ordered = [n for n in _PROGRAM_ORDER if n in names] + sorted(
        n for n in names if n not in _PROGRAM_ORDER)
    return ordered if count is None else ordered[:max(count, 0)]


def whole_programs(names: list[str], repeat: int, rounds: int, target_s: float,
                   log) -> list[dict]:
    """Per program (JAX's pre-optimization HLO, `before_optimizations.hlo`,
    through xla_gpu's own HLO passes, as XLA:CPU gets it from jax):
      - run time: `exe.run(*inputs)` of `xla_gpu.compile(text, target="cpu")`
        on the stored inputs (checked against the stored XLA:CPU outputs)
        against `jax.jit(fn)` of the program's jax function on device-put
        inputs of the same shapes, rounds alternating;
      - warm compile: `xla_gpu.compile(text, target="cuda", cache=False)`
        (the kernels linked into cubins when a cubin compiler is found) against
        `jax.jit(fn).lower(*args).compile()` of a fresh function after
        `jax.clear_caches()`, after one warm-up each, alternating.
    Programs whose jax side needs a setup hook (ffi_call registers a C
    handler with jax, which retypes ctypes' PyCapsule_New for the whole
    process) are left out."""
    import jax
    import numpy as np

    import xla_gpu
    from xla_gpu import hlo
    sys.path.insert(0, str(ROOT / "tests" / "python"))
    from program_data import load_program
    sys.path.insert(0, str(HERE))
    from programs import _jax_programs, _register_python_handlers
    _register_python_handlers()
    jax_programs = _jax_programs() or {}
    rows = []
    for name in names:
        prog = jax_programs.get(name)
        row = {"program": name}
        if prog is None or prog.setup is not None:
            row["skipped"] = ("no jax function" if prog is None else
                              "its jax side registers a C handler (left out)")
            rows.append(row)
            continue
        log(f"[program] {name}")
        data = load_program(name)
        text = data.before_path.read_text()
        args = prog.make_inputs(np.random.default_rng(0))
        with jax.enable_x64(prog.x64):
            jitted = jax.jit(prog.fn, keep_unused=True)
            dev = jax.device_put(args, jax.devices("cpu")[0])

            def xla_call(jitted=jitted, dev=dev):
                return jax.block_until_ready(jitted(*dev))

            def xla_compile(fn=prog.fn, args=args):
                jax.clear_caches()

                def fresh(*a):
                    return fn(*a)
                t0 = time.perf_counter()
                jax.jit(fresh, keep_unused=True).lower(*args).compile()
                return time.perf_counter() - t0
            try:
                exe = xla_gpu.compile(text, target="cpu")
                results = exe.run(*data.inputs)
                row["match"] = not data.mismatches(results, hlo.parse_module(text))
                row["kernels"] = len(exe.kernels)
                row["launches"] = exe.kernel_launches()
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {bl.first_line(e, 160)}"
                exe = None
            xla_call()
            t0 = time.perf_counter()
            xla_call()
            n_x = int(min(max(target_s / max(time.perf_counter() - t0, 1e-6), 3), 2000))
            n_o = 3
            if exe is not None:
                t0 = time.perf_counter()
                exe.run(*data.inputs)
                n_o = int(min(max(target_s / max(time.perf_counter() - t0, 1e-6), 3), 2000))
            ours, xla = [], []
            for _ in range(rounds):
                if exe is not None:
                    t0 = time.perf_counter()
                    for _ in range(n_o):
                        exe.run(*data.inputs)
                    ours.append((time.perf_counter() - t0) / n_o)
                t0 = time.perf_counter()
                for _ in range(n_x):
                    xla_call()
                xla.append((time.perf_counter() - t0) / n_x)
            row["ours_run_s"] = bl.median(ours) if ours else None
            row["xla_run_s"] = bl.median(xla)

            warm_ours, warm_xla = [], []
            cuda_ok = True
            try:
                xla_gpu.compile(text, target="cuda", cache=False)
            except Exception as e:
                row["compile_error"] = f"{type(e).__name__}: {bl.first_line(e, 160)}"
                cuda_ok = False
            xla_compile()
            for _ in range(repeat):
                if cuda_ok:
                    gc.collect()
                    t0 = time.perf_counter()
                    xla_gpu.compile(text, target="cuda", cache=False)
                    warm_ours.append(time.perf_counter() - t0)
                gc.collect()
                warm_xla.append(xla_compile())
            row["ours_compile_s"] = bl.median(warm_ours) if warm_ours else None
            row["xla_compile_s"] = bl.median(warm_xla)
        rows.append(row)
        del xla_call, dev
        gc.collect()
    return rows


# -- the report ------------------------------------------------------------------------

def _ms(s):
    return None if s is None else s * 1e3


def report(meta: dict, comp_rows, run_rows, peak, chart_note: str,
           program_rows=()) -> str:
    out = [f"## On a machine without a GPU: `{meta['command']}`", "",
           f"- date: {meta['date']}",
           f"- machine: {meta['machine_line']}",
           f"- tree: {meta['git']}; jax {meta['jax']} (XLA:CPU), MLIR bindings {meta['mlir']}",
           f"- ptxas: {meta['ptxas'] or 'not found (no cubin)'}",
           f"- repetitions: warm {meta['repeat']}, cold {meta['cold_repeat']} processes, "
           f"run-time rounds {meta['rounds']}; medians. Another job (a C++ build) may "
           "share these cores: ours and XLA alternate inside each repetition so that "
           "both see the same load, and the ratios are the figures to read.",
           f"- wall time of the whole benchmark: {meta['wall_s']:.0f} s", ""]
    if comp_rows:
        out += ["### Compile latency: HLO text -> PTX (target=\"cuda\", sm_90), "
                "gpu-size corpus", "",
                "ours: `xla_gpu.compile(text, target=\"cuda\", cache=False)`; \"→PTX\" "
                "leaves out the cubin step that compile also runs (\"→cubin\": nvJitLink in "
                "process where it loads, else a ptxas process). "
                "XLA:CPU: `jax.jit(f).lower(*specs).compile()` (a fresh function after "
                "`jax.clear_caches()`); \"compile()\" is the XLA compile alone. Cold: a "
                "fresh process, `import` + compile, timed inside it. Ratio < 1: ours is "
                "faster.", ""]
        header = ["case", "emitter", "ours cold ms", "XLA cold ms", "ours warm →PTX ms",
                  "ours warm →cubin ms", "ours warm →cubin (ptxas process) ms",
                  "XLA warm lower+compile ms", "XLA compile() ms",
                  "ratio warm →PTX / XLA", "ratio warm →cubin / XLA",
                  "ratio warm →cubin (ptxas process) / XLA", "ratio cold",
                  "memory hit µs", "disk hit ms"]
        rows, r_ptx, r_cubin, r_jit, r_cold, mems, disks = [], [], [], [], [], [], []
        for r in comp_rows:
            if r.get("error") and r.get("warm_ptx_s") is None:
                rows.append([r["case"], _unsupported(r["error"]), "-",
                             bl.fmt(_ms(r["cold_xla_s"])), "-", "-", "-",
                             bl.fmt(_ms(r["xla_warm_s"])), bl.fmt(_ms(r["xla_compile_only_s"])),
                             "-", "-", "-", "-", "-", "-"])
                continue
            a = bl.ratio(r["warm_ptx_s"], r["xla_warm_s"])
            b = bl.ratio(r["warm_cubin_s"], r["xla_warm_s"])
            j = bl.ratio(r.get("warm_ptxas_s"), r["xla_warm_s"])
            c = bl.ratio(r["cold_ours_s"], r["cold_xla_s"])
            r_ptx.append(a), r_cubin.append(b), r_jit.append(j), r_cold.append(c)
            mems.append(r.get("mem_hit_s")), disks.append(r.get("disk_hit_s"))
            rows.append([r["case"], r.get("emitter", "-"), bl.fmt(_ms(r["cold_ours_s"]), 0),
                         bl.fmt(_ms(r["cold_xla_s"]), 0), bl.fmt(_ms(r["warm_ptx_s"])),
                         bl.fmt(_ms(r["warm_cubin_s"])), bl.fmt(_ms(r.get("warm_ptxas_s"))),
                         bl.fmt(_ms(r["xla_warm_s"])),
                         bl.fmt(_ms(r["xla_compile_only_s"])), bl.fmt_ratio(a), bl.fmt_ratio(b),
                         bl.fmt_ratio(j), bl.fmt_ratio(c),
                         bl.fmt(r["mem_hit_s"] * 1e6 if r.get("mem_hit_s") else None),
                         bl.fmt(_ms(r.get("disk_hit_s")), 2)])
        gm = [bl.geomean(r_ptx), bl.geomean(r_cubin), bl.geomean(r_cold),
              bl.geomean([j for j in r_jit if j is not None])]
        rows.append(["**geomean**", "", "", "", "", "", "", "", "", f"**{bl.fmt_ratio(gm[0])}**",
                     f"**{bl.fmt_ratio(gm[1])}**", f"**{bl.fmt_ratio(gm[3])}**",
                     f"**{bl.fmt_ratio(gm[2])}**", "", ""])
        out += [bl.md_table(header, rows, "ll" + "r" * (len(header) - 2)), ""]
        worst_disk = max((d for d in disks if d), default=None)
        worst_mem = max((d for d in mems if d), default=None)
        out += [f"Goals: warm ratio ≤ 1.0 — geomean {bl.fmt_ratio(gm[0])} to PTX "
                f"({'met' if gm[0] <= 1 else 'not met'}), {bl.fmt_ratio(gm[1])} to cubin "
                f"as compile makes it ({meta.get('cubin_compiler') or '?'}; "
                f"{'met' if gm[1] is not None and gm[1] <= 1 else 'not met'}), "
                f"{bl.fmt_ratio(gm[3])} with a ptxas process instead; "
                f"cache hit < 5 ms — slowest memory hit "
                f"{bl.fmt(worst_mem * 1e6 if worst_mem else None)} µs, "
                f"slowest disk hit {bl.fmt(_ms(worst_disk), 2)} ms "
                f"({'met' if worst_disk is not None and worst_disk < 5e-3 else 'not met'}).",
                ""]
        stage_names = ["parse_analysis", "emit", "pipeline", "ptx", "cubin"]
        srows = []
        for r in comp_rows:
            st = r.get("stages_s") or {}
            if not st:
                continue
            srows.append([r["case"], *[bl.fmt(_ms(st.get(k))) for k in stage_names],
                          bl.fmt(_ms(r.get("cold_ours_process_s")), 0)])
        if srows:
            out += ["Where our warm compile goes (median ms; \"parse+analysis\" is the "
                    "rest of the call: parsing, fusion analysis, cache key), and the cold "
                    "process' wall time including interpreter start:", "",
                    bl.md_table(["case", "parse+analysis", "emit", "pipeline", "PTX",
                                 "cubin (ptxas)", "cold process wall"], srows), ""]
        notes = [(r["case"], n) for r in comp_rows for n in r.get("notes", [])]
        if notes:
            out += ["Emitter notes:", ""] + [f"- {c}: {n}" for c, n in notes] + [""]
    if run_rows:
        out += ["### Run time: the cpu target (GPU grid emulated on the host) vs XLA:CPU, "
                "cpu-size corpus", "",
                "ours: `exe.time(*inputs)` of `xla_gpu.compile(text, target=\"cpu\")` "
                "(includes allocating outputs, and copying the buffer an in-place kernel "
                "writes into); XLA:CPU: `jax.jit(f)` on device-put inputs, "
                "`block_until_ready` after each call. The cpu target runs the GPU kernel's "
                "grid as loops: block ranges on host threads where timing shows that it "
                "pays, in a block the threads as the innermost loop, which LLVM "
                "vectorizes across threads (consecutive threads in SIMD lanes), with "
                "polynomial math (xla-approximate-host-math). Both sides may use both "
                "cores; the machine is shared, so ratios move with its load. Check: ours "
                "against jax's outputs, tolerances of xla_gpu.hlo.numerics.", ""]
        rows, ratios, kernel_ratios = [], [], []
        for r in run_rows:
            if r.get("error"):
                rows.append([r["case"], r["shapes"], _unsupported(r["error"]), "-", "-",
                             bl.fmt(_ms(r["xla_s"]), 2), "-", "-", "-"])
                continue
            q = bl.ratio(r["ours_s"], r["xla_s"])
            k = bl.ratio(r.get("kernel_s"), r["xla_s"])
            ratios.append(q)
            kernel_ratios.append(k)
            rows.append([r["case"], r["shapes"], r.get("emitter", "-"),
                         bl.fmt(_ms(r["ours_s"]), 2), bl.fmt(_ms(r.get("kernel_s")), 2),
                         bl.fmt(_ms(r["xla_s"]), 2), bl.fmt_ratio(q), bl.fmt_ratio(k),
                         r.get("check", "-")])
        geomean = bl.geomean(ratios)
        kernel_geomean = bl.geomean([k for k in kernel_ratios if k is not None])
        rows.append(["**geomean**", "", "", "", "", "", f"**{bl.fmt_ratio(geomean)}**",
                     f"**{bl.fmt_ratio(kernel_geomean)}**", ""])
        out += ["\"ours kernel ms\": the loaded kernel launched on buffers prepared once "
                "(what `exe.run` adds to it is its call path, in C (xla_gpu.runtime._host_run): "
                "argument checks, output buffers from a pool, the launch; for the in-place kernels, "
                "scatter and dynamic-update-slice, also the copy of the operand they "
                "update, which the kernel alone leaves out).", ""]
        out += [bl.md_table(["case", "sizes (cpu)", "emitter", "ours ms", "ours kernel ms",
                             "XLA:CPU ms", "ratio ours/XLA", "ratio kernel/XLA",
                             "check vs XLA"], rows, "lll" + "rrrrr" + "l"), ""]
        rated = [(q, r["case"]) for r in run_rows
                 if not r.get("error") and (q := bl.ratio(r["ours_s"], r["xla_s"])) is not None]
        if rated:
            worst, worst_case = max(rated)
            over = [c for q, c in sorted(rated, reverse=True) if q > 2.0]
            out += [f"Goals: geomean ≤ 1.0 — {bl.fmt_ratio(geomean)} "
                    f"({'met' if geomean is not None and geomean <= 1.0 else 'not met'}); "
                    f"no case worse than 2x — worst {bl.fmt_ratio(worst)} ({worst_case}; "
                    f"{'met' if not over else 'not met: ' + ', '.join(over)}).", ""]
    if program_rows:
        out += ["### Whole programs: cpu-target run time and warm compile vs XLA:CPU", "",
                "The programs of tests/python/programs (part 1), JAX's pre-optimization "
                "HLO through xla_gpu's HLO passes. Run: `exe.run(*inputs)` of "
                "`xla_gpu.compile(text, target=\"cpu\")` (the thunk sequence in one "
                "native call, outputs from the program's buffer pool) vs `jax.jit(fn)` "
                "on device-put inputs. Compile: warm `xla_gpu.compile(text, "
                "target=\"cuda\", cache=False)`, the kernels lowered on the compile "
                "threads and linked into one PTX module and cubin per thread "
                "(nvJitLink where it loads, else ptxas) vs `jax.jit(fn).lower(*args)"
                ".compile()` after `jax.clear_caches()`. Medians; ours and XLA "
                "alternate. Result: ours against XLA:CPU's stored outputs.", ""]
        rows, r_run, r_comp = [], [], []
        for r in program_rows:
            if r.get("skipped"):
                rows.append([r["program"], "-", "-", "-", "-", "-", "-", "-", "-",
                             r["skipped"]])
                continue
            a = bl.ratio(r.get("ours_run_s"), r.get("xla_run_s"))
            b = bl.ratio(r.get("ours_compile_s"), r.get("xla_compile_s"))
            if a is not None:
                r_run.append(a)
            if b is not None:
                r_comp.append(b)
            result = ("error: " + r["error"]) if r.get("error") else \
                ("ok" if r.get("match") else "differs from XLA:CPU")
            if r.get("compile_error"):
                result += "; cuda compile: " + r["compile_error"]
            rows.append([r["program"], str(r.get("kernels", "-")),
                         str(r.get("launches", "-")), bl.fmt(_ms(r.get("ours_run_s")), 2),
                         bl.fmt(_ms(r.get("xla_run_s")), 2), bl.fmt_ratio(a),
                         bl.fmt(_ms(r.get("ours_compile_s")), 0),
                         bl.fmt(_ms(r.get("xla_compile_s")), 0), bl.fmt_ratio(b), result])
        g_run, g_comp = bl.geomean(r_run), bl.geomean(r_comp)
        rows.append(["**geomean**", "", "", "", "", f"**{bl.fmt_ratio(g_run)}**", "", "",
                     f"**{bl.fmt_ratio(g_comp)}**", ""])
        out += [bl.md_table(["program", "kernels", "launches/run", "ours run ms",
                             "XLA:CPU run ms", "ratio run", "ours warm compile ms",
                             "XLA:CPU warm compile ms", "ratio compile", "result"], rows,
                            "l" + "r" * 8 + "l"), ""]
        out += [f"Goals: run ratio ≤ 1.0 — geomean {bl.fmt_ratio(g_run)} "
                f"({'met' if g_run is not None and g_run <= 1 else 'not met'}); warm "
                f"compile ratio ≤ 1.0 — geomean {bl.fmt_ratio(g_comp)} "
                f"({'met' if g_comp is not None and g_comp <= 1 else 'not met'}).", ""]
    if peak:
        out += ["### Peak memory of compiling the whole corpus (one process, "
                "ru_maxrss)", ""]
        prow = []
        for who, label in (("ours", "ours, target=\"cuda\", cache off"),
                           ("xla", "XLA:CPU, jax.jit(f).lower(...).compile()")):
            p = peak.get(who, {})
            if "error" in p:
                prow.append([label, "error: " + bl.first_line(p["error"]), "", "", "", ""])
                continue
            prow.append([label, f"{p['peak_kib'] / 1024:.0f}", f"{p['hwm_kib'] / 1024:.0f}",
                         f"{p['base_kib'] / 1024:.0f}",
                         f"{(p['peak_kib'] - p['base_kib']) / 1024:.0f}",
                         f"{p['compiled']} ({p.get('failed', 0)} failed)"
                         if who == "ours" else str(p["compiled"])])
        out += [bl.md_table(["process", "ru_maxrss MiB", "VmHWM MiB", "after imports MiB",
                             "growth MiB", "fusions compiled"], prow), "",
                "The process is started through a shell that forks it, since Linux "
                "carries ru_maxrss over exec from the (large) benchmark process; VmHWM "
                "(/proc/self/status) is the same peak for the process image alone. "
                "\"after imports\": ru_maxrss once the compiler (MLIR, the dialect) or "
                "jax is loaded, before the first compile.", ""]
    out += [f"Chart: `bench/results/run_cpu.png` ({chart_note}).", ""]
    return "\n".join(out)


def chart(path: Path, comp_rows, run_rows) -> str:
    panels = []
    if comp_rows:
        labels = [r["case"] for r in comp_rows]
        panels.append((labels, {
            "ours cold (import+compile)": [_ms(r.get("cold_ours_s")) for r in comp_rows],
            "XLA:CPU cold": [_ms(r.get("cold_xla_s")) for r in comp_rows],
            "ours warm →PTX": [_ms(r.get("warm_ptx_s")) for r in comp_rows],
            "XLA:CPU warm lower+compile": [_ms(r.get("xla_warm_s")) for r in comp_rows],
            "ours disk-cache hit": [_ms(r.get("disk_hit_s")) for r in comp_rows],
        }, "compile latency (ms, log scale; missing bars: not supported yet)", "ms", True, None))
    if run_rows:
        labels = [r["case"] for r in run_rows]
        panels.append((labels, {
            "run time ratio ours (cpu target) / XLA:CPU": [
                bl.ratio(r.get("ours_s"), r.get("xla_s")) for r in run_rows],
            "compile ratio ours warm →PTX / XLA:CPU warm": [
                bl.ratio(c.get("warm_ptx_s"), c.get("xla_warm_s"))
                for c in (comp_rows or [{}] * len(run_rows))][:len(labels)],
        }, "ours / XLA (log scale; < 1: ours faster)", "ratio", True, 1.0))
    if not panels:
        return "no chart"
    return bl.bar_chart(path, [], {}, "", "", panels=panels)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*")
    parser.add_argument("--repeat", type=int, default=7, help="warm repetitions")
    parser.add_argument("--cold-repeat", type=int, default=3, help="cold processes per case")
    parser.add_argument("--rounds", type=int, default=5, help="run-time rounds")
    parser.add_argument("--round-seconds", type=float, default=0.25)
    parser.add_argument("--quick", action="store_true", help="repeat 2, cold 1, rounds 2")
    parser.add_argument("--skip", action="append", default=[],
                        choices=["compile", "cold", "run", "memory", "programs"])
    parser.add_argument("--programs", type=int, default=10, metavar="N",
                        help="whole programs in the program table (0: none; "
                             "-1: all of tests/python/programs)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--no-results-md", action="store_true",
                        help="do not rewrite the run_cpu section of bench/RESULTS.md")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeat, args.cold_repeat, args.rounds, args.round_seconds = 2, 1, 2, 0.1
    if "cold" in args.skip:
        args.cold_repeat = 0
    # The GEMM cases are the GEMM emitter's (bench/run_gpu.py, bench/gemm_fusion.py):
    # compiled here as one fusion their dot would go to the loop emitter.
    cases = [c for c in corpus.select(args.cases) if args.cases or not c.gemm]
    start = time.perf_counter()
    info = bl.machine()

    def log(msg):
        print(f"{time.perf_counter() - start:7.1f}s {msg}", file=sys.stderr, flush=True)

    cache = tempfile.mkdtemp(prefix="xla_gpu_bench_cache.")
    os.environ["XLA_GPU_CACHE_DIR"] = cache            # a fresh disk cache
    env = dict(os.environ)
    env.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    from xla_gpu.backends.cuda import codegen
    comp_rows = compile_latency(cases, args.repeat, args.cold_repeat, env, log) \
        if "compile" not in args.skip else []
    run_rows = run_time(cases, args.rounds, args.round_seconds, log) \
        if "run" not in args.skip else []
    log("[memory]")
    peak = peak_memory(cases, env) if "memory" not in args.skip else {}
    program_names = [] if "programs" in args.skip else \
        program_selection(None if args.programs < 0 else args.programs)
    program_rows = whole_programs(program_names, max(args.repeat // 2, 2), args.rounds,
                                  args.round_seconds, log) if program_names else []
    try:
        from importlib.metadata import version
        mlir_version = version("xtc-mlir-python-bindings")
    except Exception:
        mlir_version = "?"
    meta = {"date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
            "machine": info, "machine_line": bl.machine_line(info), "git": bl.git_head(),
            "jax": jax.__version__, "mlir": mlir_version, "ptxas": codegen.find_ptxas(),
            "cubin_compiler": " ".join(codegen.cubin_compiler() or ("none",)),
            "command": "python bench/run_cpu.py" + (" " + " ".join(argv or sys.argv[1:])
                                                    if (argv or sys.argv[1:]) else ""),
            "repeat": args.repeat, "cold_repeat": args.cold_repeat, "rounds": args.rounds,
            "wall_s": time.perf_counter() - start}
    args.out.mkdir(parents=True, exist_ok=True)
    note = chart(args.out / "run_cpu.png", comp_rows, run_rows)
    text = report(meta, comp_rows, run_rows, peak, note, program_rows)
    (args.out / "run_cpu.md").write_text(text)
    (args.out / "run_cpu.json").write_text(json.dumps(
        {"meta": meta, "compile": comp_rows, "run": run_rows, "peak_memory": peak,
         "programs": program_rows},
        indent=1, default=str))
    if not args.no_results_md:
        bl.update_section(HERE / "RESULTS.md", "run_cpu", text)
    print(text)
    import shutil
    shutil.rmtree(cache, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
