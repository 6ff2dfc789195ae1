"""The plugin's target: XLA_GPU_PJRT_TARGET=cpu|cuda|auto, and the cuda
target's buffers in device memory.

Without a GPU: auto picks cpu, and a forced cuda is a clear error through
jax. With a GPU: device facts, round trips, chained jitted calls,
donation and optax steps on the real cuda target (device buffers, on_cpu =
0 in the handle block), and a flax/optax training loop, compared with
jax's cpu backend.
"""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("jax")

from xla_gpu.pjrt import _abi as A  # noqa: E402
from xla_gpu.pjrt import _plugin as P  # noqa: E402

TIMEOUT = 300


def _cuda_problem():
    try:
        return P._cuda_problem()
    except Exception as exc:  # noqa: BLE001 - no cuda-python at all
        return f"{type(exc).__name__}: {exc}"


CUDA_PROBLEM = _cuda_problem()
needs_gpu = pytest.mark.skipif(CUDA_PROBLEM is not None,
                               reason=f"the cuda target cannot run here: {CUDA_PROBLEM}")
without_gpu = pytest.mark.skipif(CUDA_PROBLEM is None, reason="a usable GPU is here")


def _run(script: str, env_extra: dict, platforms: str = "xla_gpu,cpu") -> dict:
    env = dict(os.environ, JAX_PLATFORMS=platforms, **env_extra)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=TIMEOUT)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- selection
@without_gpu
@pytest.mark.parametrize("value", ["", "auto", " AUTO "])
def test_auto_picks_cpu_without_a_gpu(monkeypatch, value):
    monkeypatch.setenv(P.TARGET_ENV, value)
    target, why = P.resolve_target()
    assert target == "cpu"
    assert why.startswith("auto: no usable GPU"), why


def test_cpu_is_taken_when_asked(monkeypatch):
    monkeypatch.setenv(P.TARGET_ENV, "cpu")
    assert P.resolve_target() == ("cpu", f"{P.TARGET_ENV}=cpu")


def test_auto_needs_a_cubin_compiler_too(monkeypatch):
    """A GPU without ptxas or nvJitLink: auto stays on cpu, saying why."""
    from xla_gpu.backends.cuda import codegen
    from xla_gpu.runtime import cuda
    monkeypatch.setattr(cuda, "cuda_available", lambda: True)
    monkeypatch.setattr(codegen, "cubin_compiler", lambda: None)
    monkeypatch.delenv(P.TARGET_ENV, raising=False)
    target, why = P.resolve_target()
    assert target == "cpu" and "no cubin compiler" in why, why
    monkeypatch.setenv(P.TARGET_ENV, "cuda")
    with pytest.raises(P._PjrtError, match="no cubin compiler") as info:
        P.resolve_target()
    assert info.value.code == A.FAILED_PRECONDITION


def test_an_unknown_target_is_refused(monkeypatch):
    monkeypatch.setenv(P.TARGET_ENV, "tpu")
    with pytest.raises(P._PjrtError, match="XLA_GPU_PJRT_TARGET='tpu' is not one of") as info:
        P.resolve_target()
    assert info.value.code == A.INVALID_ARGUMENT


@without_gpu
def test_forced_cuda_without_a_gpu_is_a_clear_error_through_jax():
    script = r"""
import json, jax
try:
    jax.devices("xla_gpu")
    print(json.dumps({"error": None}))
except RuntimeError as e:
    print(json.dumps({"error": str(e)}))
"""
    error = _run(script, {P.TARGET_ENV: "cuda"}, platforms="cpu,xla_gpu")["error"]
    assert error is not None, "the client was made without a GPU"
    assert "XLA_GPU_PJRT_TARGET=cuda" in error and "no usable GPU" in error, error


@without_gpu
def test_auto_runs_on_the_cpu_target_through_jax():
    script = r"""
import json, jax, jax.numpy as jnp, numpy as np
from xla_gpu.pjrt import _plugin as P
d = jax.devices("xla_gpu")[0]
y = jax.jit(lambda x: x * 2)(jnp.arange(3.0, device=d))
print(json.dumps({"version": d.client.platform_version, "kind": d.device_kind,
                  "target": P.TARGET, "why": P.TARGET_REASON,
                  "zero_copy": np.asarray(y).tolist()}))
"""
    out = _run(script, {P.TARGET_ENV: "auto"})
    assert out["target"] == "cpu" and out["why"].startswith("auto: no usable GPU")
    assert out["version"].endswith("(cpu target)") and out["kind"] == "xla_gpu (cpu target)"
    assert out["zero_copy"] == [0.0, 2.0, 4.0]


# ----------------------------------------------------------------------------- the checks
# Run on the cuda target: device facts, round
# trips of several dtypes, jitted calls chained on device buffers,
# donation, a transfer back to jax's cpu, a few optax steps against cpu.
CHECKS = r"""
import json
import jax, jax.numpy as jnp, ml_dtypes, numpy as np, optax
from xla_gpu.pjrt import _plugin as P

dev, cpu = jax.devices("xla_gpu")[0], jax.devices("cpu")[0]
out = {"kind": dev.device_kind, "version": dev.client.platform_version,
       "cc": getattr(dev, "compute_capability", None), "target": P.TARGET}
rng = np.random.default_rng(0)
trips = {}
for name in ["float32", "float16", "bfloat16", "float64", "int8", "uint32", "int64", "bool",
             "complex64"]:
    dt = np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)
    x = rng.random((3, 5)) > 0.5 if name == "bool" else (
        rng.standard_normal((3, 5)) * 10).astype(dt)
    back = np.asarray(jax.device_put(x, dev))
    ref = np.asarray(jax.device_put(x, cpu))   # jax's canonical dtype (x64 off)
    trips[name] = bool(back.dtype == ref.dtype and back.shape == ref.shape and
                       back.tobytes() == ref.tobytes())
out["trips"] = trips
y = jax.device_put(np.ones((3, 5), np.float32), dev)
out["size"] = y.on_device_size_in_bytes()
out["pointer"] = y.unsafe_buffer_pointer() != 0

def f(a, b):
    return jnp.tanh(a @ b) + a.sum()

a = rng.standard_normal((8, 16)).astype(np.float32)
b = rng.standard_normal((16, 4)).astype(np.float32)
got = jax.jit(f)(jax.device_put(a, dev), jax.device_put(b, dev))
chained = jax.jit(lambda v: v * 3 - 1)(got)          # a device result as an argument
want = jax.jit(f)(jax.device_put(a, cpu), jax.device_put(b, cpu))
out["jit"] = float(np.max(np.abs(np.asarray(got) - np.asarray(want))))
out["chained"] = float(np.max(np.abs(np.asarray(chained) - (np.asarray(want) * 3 - 1))))
out["to_cpu"] = np.array_equal(np.asarray(jax.device_put(got, cpu)), np.asarray(got))

add = jax.jit(lambda x, y: x + y, donate_argnums=0)
x = jax.device_put(np.arange(4, dtype=np.float32), dev)
z = add(x, jax.device_put(np.full(4, 2, np.float32), dev))
out["donation"] = [x.is_deleted(), np.asarray(z).tolist()]

# Host memory: arrays put there and back, a result placed there, and a
# host array fed to the next call.
host = jax.sharding.SingleDeviceSharding(dev, memory_kind="pinned_host")
hx = jax.device_put(np.arange(6, dtype=np.float32), host)
hd = jax.device_put(hx, host.with_memory_kind("device"))
twice = jax.jit(lambda v: v * 2, out_shardings=host)
hr = twice(hd)
hr2 = twice(hr)
out["memories"] = [hx.sharding.memory_kind, hd.sharding.memory_kind, hr.sharding.memory_kind,
                   np.asarray(hx).tolist(), np.asarray(hr2).tolist()]

# A remat that offloads its residuals to pinned host memory: the program's
# host allocation (cuMemHostAlloc) and the copies to it and back.
from jax.ad_checkpoint import Offloadable

def offload(prim, *avals, **params):
    return Offloadable(src="device", dst="pinned_host")

def residuals(x):
    return jnp.sum(jnp.sin(jnp.sin(x) @ x))

xo = (rng.standard_normal((16, 16)) * 0.3).astype(np.float32)
grad = jax.jit(jax.grad(jax.remat(residuals, policy=offload)))
offloaded = grad.lower(jax.device_put(xo, dev)).compile()
g_dev = offloaded(jax.device_put(xo, dev))
g_cpu = grad(jax.device_put(xo, cpu))
out["offload"] = [float(np.max(np.abs(np.asarray(g_dev) - np.asarray(g_cpu)))),
                  offloaded.memory_analysis().host_temp_size_in_bytes]

def train(device, steps):
    with jax.default_device(device):
        k1, k2 = np.random.default_rng(1).standard_normal((2, 16, 16)).astype(np.float32)
        params = {"w1": jnp.asarray(k1 * 0.3), "w2": jnp.asarray(k2 * 0.3)}
        data = np.random.default_rng(2).standard_normal((32, 16)).astype(np.float32)
        xs, ys = jnp.asarray(data), jnp.asarray(np.sin(data))
        opt = optax.adam(1e-2)
        state = opt.init(params)

        @jax.jit
        def step(params, state, xs, ys):
            def loss(p):
                return jnp.mean((jnp.tanh(xs @ p["w1"]) @ p["w2"] - ys) ** 2)
            value, grads = jax.value_and_grad(loss)(params)
            updates, state = opt.update(grads, state, params)
            return optax.apply_updates(params, updates), state, value

        losses = []
        for _ in range(steps):
            params, state, value = step(params, state, xs, ys)
            losses.append(float(value))
        return losses, str(list(params["w1"].devices())[0].platform)

out["losses_cpu"], _ = train(cpu, 3)
out["losses"], out["where"] = train(dev, 3)
out["on_cpu_words"] = sorted({o._block[P._W["on_cpu"]] for o in list(P._objects.values())
                              if isinstance(o, P.Buffer)})
"""

REPORT = "\nprint(json.dumps(out))\n"


def _check_common(out: dict) -> None:
    assert out["target"] == "cuda"
    assert all(out["trips"].values()), out["trips"]
    assert out["size"] == 60
    assert out["pointer"]
    assert out["to_cpu"]
    assert out["donation"] == [True, [2.0, 3.0, 4.0, 5.0]]
    assert out["memories"] == ["pinned_host", "device", "pinned_host", [0, 1, 2, 3, 4, 5],
                               [0, 4, 8, 12, 16, 20]], out["memories"]
    assert out["offload"][0] < 1e-4 and out["offload"][1] > 0, out["offload"]
    assert out["where"] == "xla_gpu"
    # Device memory: the handle block tells jax (and the C fast path) so.
    assert out["on_cpu_words"] == [0], out["on_cpu_words"]
    assert "cuda" not in out["version"], out["version"]   # jax's test utils read it as CUDA


def _check_numbers(out: dict) -> None:
    """Against jax's cpu backend (xla_gpu's kernels round differently)."""
    assert out["jit"] < 1e-4 and out["chained"] < 1e-3, out
    assert len(out["losses"]) == 3
    for a, b in zip(out["losses"], out["losses_cpu"]):
        assert abs(a - b) <= 1e-4 * max(1.0, abs(a)), out


# ----------------------------------------------------------------------------- on a GPU
@needs_gpu
def test_cuda_target_on_the_gpu():
    out = _run(CHECKS + REPORT, {P.TARGET_ENV: "cuda"})
    _check_common(out)
    assert out["kind"].endswith("(xla_gpu cuda target)")
    assert out["cc"] and "." in out["cc"]
    _check_numbers(out)


@needs_gpu
def test_flax_training_loop_on_the_gpu_matches_jax_cpu():
    from test_pjrt_training import SCRIPT
    env = dict(os.environ, JAX_PLATFORMS="cpu,xla_gpu", **{P.TARGET_ENV: "cuda"})
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["where"] == "xla_gpu"
    cpu, ours = result["cpu"], result["xla_gpu"]
    assert len(ours) == 10 and ours[-1] < 0.5 * ours[0]
    # The GPU's reductions add in another order than XLA:CPU's.
    for step, (a, b) in enumerate(zip(cpu, ours)):
        assert abs(a - b) <= 1e-3 * max(1.0, abs(a)), (step, cpu, ours)
