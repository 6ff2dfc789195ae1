"""Runs a jax script in a fresh interpreter (jax's backends are
process-global) in which every Python slot of the plugin counts its calls:
`PRELUDE` (jax, `dev` the first xla_gpu device, `calls` the counter) goes
before the script, whose last line of output is JSON."""
import json
import os
import subprocess
import sys
import textwrap

# Installed before jax loads the plugin.
PRELUDE = """
import collections, ctypes, gc, json, sys, threading
import numpy as np
from xla_gpu.pjrt import _abi as A, _plugin as P
calls = collections.Counter()
for _name, _fn in list(P.IMPL.items()):
    def _counted(a, _fn=_fn, _name=_name):
        calls[_name] += 1
        return _fn(a)
    P.IMPL[_name] = _counted
import jax, jax.numpy as jnp
dev = jax.devices("xla_gpu")[0]
"""


def run_counted(script: str, extra_env=None, *, prelude: str = "", timeout: int = 300) -> dict:
    """The JSON the script prints last, after `PRELUDE` and `prelude`."""
    env = dict(os.environ, JAX_PLATFORMS="xla_gpu,cpu")
    env.update(extra_env or {})
    code = PRELUDE + textwrap.dedent(prelude) + textwrap.dedent(script)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=timeout)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])
