"""Where the host's time goes when a saved program runs: cProfile around
many runs of one program, the functions that took the most time.

    # a cuda program saved by `bench/run_gpu.py prepare-programs`, on the GPU machine
    python bench/profile_program_run.py build/run_gpu_programs random_dropout/cb
    # a cpu program here (xla_gpu.compile(..., target="cpu").save(DIR/NAME))
    python bench/profile_program_run.py DIR NAME --runs 500

The inputs are the stored program's (tests/python/programs/NAME); on cuda
they are uploaded once, and the outputs stay on the device, so the profile
is the run's own issue path: argument checks, buffers, thunks, launches,
graph updates, synchronization.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
try:
    import xla_gpu  # noqa: F401
except ImportError:  # a bare source tree on the GPU machine
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "python"))

import numpy as np  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("program", help="NAME/VARIANT under the directory (cb, nocb)")
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--top", type=int, default=35)
    args = parser.parse_args(argv)
    from program_data import load_program as load_data
    from xla_gpu.runtime.program import load_program
    exe = load_program(args.directory / args.program, trusted=True)
    data = load_data(args.program.split("/")[0])
    if exe.target == "cuda":
        from xla_gpu.runtime.cuda import DeviceArray
        inputs = [DeviceArray.from_host(np.require(a, requirements="C")) for a in data.inputs]
        kwargs = {"device_outputs": True}
    else:
        inputs, kwargs = list(data.inputs), {}
    for _ in range(5):
        exe.run(*inputs, **kwargs)
    start = time.perf_counter()
    for _ in range(args.runs):
        exe.run(*inputs, **kwargs)
    plain = (time.perf_counter() - start) / args.runs
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(args.runs):
        exe.run(*inputs, **kwargs)
    profile.disable()
    launches = exe.kernel_launches()
    print(f"{args.program}: {plain * 1e6:.1f} us per run without the profiler, "
          f"{launches} kernel launches a run ({plain / max(launches, 1) * 1e6:.1f} us each)")
    for order in ("tottime", "cumulative"):
        text = io.StringIO()
        stats = pstats.Stats(profile, stream=text).strip_dirs()
        stats.sort_stats(order).print_stats(args.top)
        print(f"== by {order}, {args.runs} runs")
        print("\n".join(line for line in text.getvalue().splitlines()
                        if line.strip() and not line.startswith("   Ordered by")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
