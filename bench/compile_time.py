"""Whole-program compile time on the cpu target, for SMALL programs: what a
test suite going through the PJRT plugin compiles thousands of times (a
few fusions of a few ops on small arrays).

Each program is compiled with an EMPTY cache every time (the bench's
XLA_GPU_CACHE_DIR emptied but for its key, the in-memory caches
cleared), in a process that
has compiled something before (the one-time imports and MLIR context
set-up are left out). Printed per program, medians over --repeat
compiles:

  total     `xla_gpu.compile(text, target="cpu")`, ms (wall clock)
  cpu       the CPU time it took, all threads and child processes (the
            linker) together, ms: steadier than the wall clock on a busy
            machine
  kernels   kernels built by that compile
  emit, pipeline, llvm
            summed over its kernels (`exe.timings`): fusion analysis +
            emitter, the MLIR pass pipeline, LLVM (optimization, code
            generation, the shared object); the kernels are built on
            several threads, so the sum may exceed the total
  run1      the executable's first run (native launch tables, the first
            page faults), ms; run us: a later run, microseconds
  XLA:CPU   `jax.jit(fn).lower(*args).compile()` of the same function,
            jax's persistent cache off (when jax is installed)
  digest    a hash of the outputs' bytes on fixed inputs: compare it
            across versions to see that the results stayed identical

    python bench/compile_time.py [--repeat 5] [--only dot,sort] [--no-jax]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import statistics
import tempfile
import time

import numpy as np

_ADD = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""

_MAX = """max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
"""

# name -> (HLO text, inputs, the same computation in jax for XLA:CPU or None)
# The texts are these functions' HLO as jax lowers them, names shortened.


def _programs():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    y = rng.standard_normal((4, 5)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    idx = np.array([0, 2, -1], np.int32)
    v = rng.standard_normal((3, 4)).astype(np.float32)
    big = rng.standard_normal((64, 256)).astype(np.float32)

    def jnp():
        import jax.numpy
        return jax.numpy

    def lax():
        import jax
        return jax.lax

    return {
        "elementwise": ("""HloModule elementwise
ENTRY main {
  x = f32[3,4] parameter(0)
  s = f32[3,4] sine(x)
  c2 = f32[] constant(2)
  b2 = f32[3,4] broadcast(c2), dimensions={}
  m = f32[3,4] multiply(s, b2)
  c1 = f32[] constant(1)
  b1 = f32[3,4] broadcast(c1), dimensions={}
  ROOT a = f32[3,4] add(m, b1)
}
""", (x,), lambda x: jnp().sin(x) * 2 + 1),
        "reduce": ("HloModule reduce\n" + _ADD + """
ENTRY main {
  x = f32[3,4] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[4] reduce(x, z), dimensions={0}, to_apply=add
}
""", (x,), lambda x: x.sum(0)),
        "dot": ("""HloModule dot
ENTRY main {
  x = f32[3,4] parameter(0)
  y = f32[4,5] parameter(1)
  ROOT d = f32[3,5] dot(x, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
""", (x, y), lambda x, y: x @ y),
        "transpose": ("""HloModule transpose
ENTRY main {
  x = f32[3,4] parameter(0)
  t = f32[4,3] transpose(x), dimensions={1,0}
  c = f32[] constant(1)
  b = f32[4,3] broadcast(c), dimensions={}
  ROOT a = f32[4,3] add(t, b)
}
""", (x,), lambda x: x.T + 1),
        "broadcast_select": ("""HloModule broadcast_select
ENTRY main {
  x = f32[3,4] parameter(0)
  b = f32[4] parameter(1)
  z = f32[] constant(0)
  zb = f32[3,4] broadcast(z), dimensions={}
  gt = pred[3,4] compare(x, zb), direction=GT
  bb = f32[3,4] broadcast(b), dimensions={1}
  ROOT s = f32[3,4] select(gt, x, bb)
}
""", (x, b), lambda x, b: jnp().where(x > 0, x, b[None, :])),
        "gather": ("""HloModule gather
ENTRY main {
  x = f32[3,4] parameter(0)
  i = s32[3] parameter(1)
  z = s32[] constant(0)
  zb = s32[3] broadcast(z), dimensions={}
  lt = pred[3] compare(i, zb), direction=LT
  n = s32[] constant(3)
  nb = s32[3] broadcast(n), dimensions={}
  w = s32[3] add(i, nb)
  s = s32[3] select(lt, w, i)
  r = s32[3,1] reshape(s)
  ROOT g = f32[3,4] gather(x, r), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}
}
""", (x, idx), lambda x, i: x[i]),
        "scatter": ("HloModule scatter\n" + _ADD + """
ENTRY main {
  x = f32[3,4] parameter(0)
  i = s32[3] parameter(1)
  z = s32[] constant(0)
  zb = s32[3] broadcast(z), dimensions={}
  lt = pred[3] compare(i, zb), direction=LT
  n = s32[] constant(3)
  nb = s32[3] broadcast(n), dimensions={}
  w = s32[3] add(i, nb)
  s = s32[3] select(lt, w, i)
  r = s32[3,1] reshape(s)
  v = f32[3,4] parameter(2)
  ROOT sc = f32[3,4] scatter(x, r, v), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
}
""", (x, idx, v), lambda x, i, v: x.at[i].add(v)),
        "while": ("""HloModule while
body {
  t = (s32[], f32[3,4]) parameter(0)
  i = s32[] get-tuple-element(t), index=0
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  x = f32[3,4] get-tuple-element(t), index=1
  h = f32[] constant(0.5)
  hb = f32[3,4] broadcast(h), dimensions={}
  m = f32[3,4] multiply(x, hb)
  c = f32[] constant(1)
  cb = f32[3,4] broadcast(c), dimensions={}
  a = f32[3,4] add(m, cb)
  ROOT r = (s32[], f32[3,4]) tuple(i1, a)
}
cond {
  t = (s32[], f32[3,4]) parameter(0)
  i = s32[] get-tuple-element(t), index=0
  n = s32[] constant(10)
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY main {
  z = s32[] constant(0)
  x = f32[3,4] parameter(0)
  t = (s32[], f32[3,4]) tuple(z, x)
  w = (s32[], f32[3,4]) while(t), condition=cond, body=body
  ROOT r = f32[3,4] get-tuple-element(w), index=1
}
""", (x,), lambda x: lax().fori_loop(0, 10, lambda i, x: x * 0.5 + 1, x)),
        "sort": ("""HloModule sort
less {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT lt = pred[] compare(a, b), direction=LT, type=TOTALORDER
}
ENTRY main {
  x = f32[3,4] parameter(0)
  ROOT s = f32[3,4] sort(x), dimensions={1}, is_stable=true, to_apply=less
}
""", (x,), lambda x: jnp().sort(x, axis=-1)),
        # Several kernels: a row softmax (reductions and elementwise).
        "softmax": ("HloModule softmax\n" + _ADD + _MAX + """
ENTRY main {
  x = f32[64,256] parameter(0)
  ninf = f32[] constant(-inf)
  mx = f32[64] reduce(x, ninf), dimensions={1}, to_apply=max
  mb = f32[64,256] broadcast(mx), dimensions={0}
  d = f32[64,256] subtract(x, mb)
  e = f32[64,256] exponential(d)
  z = f32[] constant(0)
  s = f32[64] reduce(e, z), dimensions={1}, to_apply=add
  sb = f32[64,256] broadcast(s), dimensions={0}
  ROOT r = f32[64,256] divide(e, sb)
}
""", (big,), lambda x: (lambda e: e / e.sum(1, keepdims=True))(
            jnp().exp(x - x.max(1, keepdims=True)))),
        # prof3's program: sin, a column sum and a broadcast add (3 kernels).
        "sin_plus_sum": ("HloModule sin_plus_sum\n" + _ADD + """
ENTRY main {
  x = f32[3,4] parameter(0)
  s = f32[3,4] sine(x)
  c = f32[] constant(2)
  cb = f32[3,4] broadcast(c), dimensions={}
  m = f32[3,4] multiply(s, cb)
  z = f32[] constant(0)
  r = f32[4] reduce(x, z), dimensions={0}, to_apply=add
  rb = f32[3,4] broadcast(r), dimensions={1}
  ROOT a = f32[3,4] add(m, rb)
}
""", (x,), lambda x: jnp().sin(x) * 2 + x.sum(0)),
    }


# A program compiled once before the measurements (imports, contexts, the
# compile threads).
_WARMUP = """HloModule warmup
ENTRY main {
  x = f32[5] parameter(0)
  ROOT n = f32[5] negate(x)
}
"""


def _fresh_caches() -> None:
    """Empties the in-memory caches and the bench's cache directory, all
    but the signing key (a user's cache keeps it: making it costs an
    fsync that no later compile pays)."""
    from xla_gpu import compiler
    root = os.environ.get("XLA_GPU_CACHE_DIR", "")
    if not root.startswith(os.path.join(tempfile.gettempdir(), "xla_gpu_bench_")):
        root = os.environ["XLA_GPU_CACHE_DIR"] = tempfile.mkdtemp(prefix="xla_gpu_bench_")
    for entry in os.listdir(root):
        if entry != ".key":
            path = os.path.join(root, entry)
            shutil.rmtree(path) if os.path.isdir(path) else os.unlink(path)
    compiler.clear_memory_cache()


def _kernel_stages(exe) -> dict[str, float]:
    """Seconds per stage summed over the kernels this compile built."""
    stages = {}
    for key in ("emit", "pipeline", "llvm"):
        if key in exe.timings:
            stages[key] = exe.timings[key]
    if stages:
        return stages
    # Versions without the program-level split: the kernels in memory
    # (the memory cache was emptied before the compile).
    from xla_gpu import kernel_compiler
    for kernel in list(kernel_compiler.memory._entries.values()):
        timings = getattr(kernel, "timings", None) or {}
        if "total" not in timings:
            continue
        for key, names in (("emit", ("emit",)), ("pipeline", ("pipeline",)),
                           ("llvm", ("llvm", "jit"))):
            stages[key] = stages.get(key, 0.0) + sum(timings.get(n, 0.0) for n in names)
    return stages


def _cpu_seconds() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _digest(outputs) -> str:
    h = hashlib.sha256()
    for out in outputs:
        h.update(np.ascontiguousarray(out).tobytes())
    return h.hexdigest()[:12]


def bench_program(text: str, inputs, repeat: int) -> dict:
    import xla_gpu
    totals, cpus, stages, first_runs, runs, kernels = [], [], {}, [], [], 0
    digest = ""
    for _ in range(repeat):
        _fresh_caches()
        cpu = _cpu_seconds()
        start = time.perf_counter()
        exe = xla_gpu.compile(text, target="cpu")
        totals.append(time.perf_counter() - start)
        cpus.append(_cpu_seconds() - cpu)
        for key, value in _kernel_stages(exe).items():
            stages.setdefault(key, []).append(value)
        kernels = len(exe.kernels)
        start = time.perf_counter()
        outputs = exe.run(*inputs)
        first_runs.append(time.perf_counter() - start)
        for _ in range(3):
            start = time.perf_counter()
            exe.run(*inputs)
            runs.append(time.perf_counter() - start)
        digest = _digest(outputs)
    result = {"total": statistics.median(totals), "cpu": statistics.median(cpus),
              "kernels": kernels,
              "run1": statistics.median(first_runs), "run": statistics.median(runs),
              "digest": digest}
    for key, values in stages.items():
        result[key] = statistics.median(values)
    return result


def xla_cpu_compile(fn, inputs, repeat: int) -> float | None:
    try:
        import jax
    except ImportError:
        return None
    jax.config.update("jax_enable_compilation_cache", False)
    times = []
    for _ in range(repeat + 1):
        jitted = jax.jit(lambda *a: fn(*a))     # a new function: no in-memory hit
        lowered = jitted.lower(*inputs)
        start = time.perf_counter()
        lowered.compile()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--only", default="", help="comma-separated program names")
    parser.add_argument("--no-jax", action="store_true", help="skip XLA:CPU's timings")
    args = parser.parse_args()
    if not args.no_jax:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import xla_gpu
    programs = _programs()
    if args.only:
        wanted = args.only.split(",")
        unknown = [n for n in wanted if n not in programs]
        if unknown:
            parser.error(f"unknown programs {unknown}: {', '.join(programs)}")
        programs = {n: programs[n] for n in wanted}
    _fresh_caches()
    xla_gpu.compile(_WARMUP, target="cpu").run(np.ones(5, np.float32))

    ms = lambda s: "-" if s is None else f"{s * 1e3:.1f}"   # noqa: E731
    print(f"cpu target, empty cache, median of {args.repeat} compiles; ms "
          f"(emit / pipeline / llvm: summed over the kernels; {os.cpu_count()} cores)\n")
    print("| program | total | cpu | kernels | emit | pipeline | llvm | run1 | run us | "
          "XLA:CPU | digest |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    sums = {"total": 0.0, "cpu": 0.0, "xla": 0.0}
    for name, (text, inputs, fn) in programs.items():
        r = bench_program(text, inputs, args.repeat)
        xla = None if args.no_jax else xla_cpu_compile(fn, inputs, args.repeat)
        sums["total"] += r["total"]
        sums["cpu"] += r["cpu"]
        sums["xla"] += xla or 0.0
        print(f"| {name} | {ms(r['total'])} | {ms(r['cpu'])} | {r['kernels']} | {ms(r.get('emit'))} | "
              f"{ms(r.get('pipeline'))} | {ms(r.get('llvm'))} | {ms(r['run1'])} | "
              f"{r['run'] * 1e6:.0f} | {ms(xla)} | {r['digest']} |")
    print(f"| sum | {ms(sums['total'])} | {ms(sums['cpu'])} | | | | | | | "
          f"{ms(sums['xla']) if sums['xla'] else '-'} | |")


if __name__ == "__main__":
    main()
