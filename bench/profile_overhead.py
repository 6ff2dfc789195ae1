"""What profiling costs, on the cpu target, side by side in one process.

Per program (the example and stored whole programs), medians over --repeat:

  run off      `exe.run(*inputs)` with no trace active: the native executor,
               after one context-variable read that looks for a trace (us)
  run raw      the executable's C run path called directly, without that
               read (us): `off - raw` is what the profiling hook costs
               when profiling is off
  run on       `exe.run(*inputs)` inside `xla_gpu.trace()`: every thunk
               timed from Python (us), and the events it recorded
  compile off / on
               `xla_gpu.compile(text, target="cpu", cache=False)` without
               and with a trace (ms); the in-memory kernel cache is cleared
               before each compile

    python bench/profile_overhead.py [--repeat 20] [--only NAME,...]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchlib import median_seconds

ROOT = Path(__file__).resolve().parents[1]

PROGRAMS = {
    "mlp_train_step": ROOT / "examples" / "mlp_train_step.hlo",
    "scan_rnn": ROOT / "tests/python/programs/scan_rnn/before_optimizations.hlo",
    "transformer_block": ROOT / "tests/python/programs/transformer_block/"
                                "before_optimizations.hlo",
    "cond_switch": ROOT / "tests/python/programs/cond_switch/before_optimizations.hlo",
}


def median_us(fn, repeat: int) -> float:
    return median_seconds(fn, repeat) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--only", default="")
    args = parser.parse_args()

    import xla_gpu
    from xla_gpu import _trace, hlo
    from xla_gpu.hlo.numerics import random_inputs

    names = [n for n in PROGRAMS if not args.only or n in args.only.split(",")]
    print(f"{'program':20s} {'run off us':>11s} {'run raw us':>11s} {'hook us':>8s} "
          f"{'run on us':>10s} {'on/off':>7s} {'events':>7s} {'compile off ms':>15s} "
          f"{'compile on ms':>14s}")
    for name in names:
        text = PROGRAMS[name].read_text()
        module = hlo.parse_module(text)
        inputs = random_inputs(module.entry, 0)
        exe = xla_gpu.compile(text, target="cpu")
        exe.run(*inputs)
        raw_path = exe._make_host_run()
        off = median_us(lambda: exe.run(*inputs), args.repeat)
        raw = median_us(lambda: raw_path(*inputs), args.repeat) if raw_path else float("nan")
        with _trace.recording() as trace:
            on = median_us(lambda: exe.run(*inputs), args.repeat)
        events = len(trace.events()) // (args.repeat + 1)

        def compile_once():
            xla_gpu.compiler.clear_memory_cache()
            xla_gpu.compile(text, target="cpu", cache=False)

        repeat = max(args.repeat // 5, 3)
        compile_off = median_us(compile_once, repeat) / 1e3
        with _trace.recording():
            compile_on = median_us(compile_once, repeat) / 1e3
        print(f"{name:20s} {off:11.1f} {raw:11.1f} {off - raw:8.1f} {on:10.1f} "
              f"{on / off:7.1f} {events:7d} {compile_off:15.1f} {compile_on:14.1f}")


if __name__ == "__main__":
    main()
