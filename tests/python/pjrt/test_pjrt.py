"""xla_gpu as a jax backend (xla_gpu.pjrt): unchanged jax programs on platform
"xla_gpu" (cpu target), compared with jax's own cpu backend.

jax's backends are process-global, so each case runs its script in a fresh
interpreter with JAX_PLATFORMS set (the test's XLA_GPU_CACHE_DIR inherited).
"""
import ctypes
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("jax")

TIMEOUT = 240


def run_jax(script: str, platforms: str = "xla_gpu", extra_env=None) -> dict:
    """Runs `script` under jax and returns the JSON it prints last."""
    env = dict(os.environ, JAX_PLATFORMS=platforms)
    env.update(extra_env or {})
    prelude = "import json, sys\nimport numpy as np\nimport jax, jax.numpy as jnp\n"
    proc = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(script)],
                          capture_output=True, text=True, env=env, timeout=TIMEOUT)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_entry_point_and_lazy_import():
    from importlib.metadata import entry_points
    values = [ep.value for ep in entry_points(group="jax_plugins") if ep.name == "xla_gpu"]
    assert values == ["xla_gpu.pjrt"]
    code = ("import sys, xla_gpu, xla_gpu.pjrt; "
            "print(int('jax' in sys.modules), int('xla_gpu.pjrt._plugin' in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=TIMEOUT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "0"]


def test_every_slot_is_set_and_unimplemented_ones_say_so():
    from xla_gpu.pjrt import _abi, _plugin
    table = _plugin.api_table()
    words = (ctypes.c_uint64 * (_abi.API_STRUCT_SIZE // 8)).from_address(table)
    assert words[0] == 1144
    assert ctypes.c_int32.from_address(table + 32).value == 0
    assert ctypes.c_int32.from_address(table + 36).value == 112
    assert all(words[5:]), "a NULL slot crashes jaxlib when called"
    # Call one slot xla_gpu does not implement, then read its error back
    # through the table as jaxlib does.
    slot = _abi.SLOTS.index("Client_CreateUninitializedBuffer")
    args = (ctypes.c_uint64 * 16)(128)
    err = _abi.SLOT_FN(words[5 + slot])(ctypes.addressof(args))
    assert err
    msg = (ctypes.c_uint64 * 5)(40, 0, err)
    _abi.VOID_SLOT_FN(words[5 + _abi.SLOTS.index("Error_Message")])(ctypes.addressof(msg))
    text = ctypes.string_at(msg[3], msg[4]).decode()
    assert text.startswith("unimplemented: PJRT_Client_CreateUninitializedBuffer")
    code = (ctypes.c_uint64 * 4)(32, 0, err, 0)
    _abi.SLOT_FN(words[5 + _abi.SLOTS.index("Error_GetCode")])(ctypes.addressof(code))
    assert ctypes.c_int32.from_address(ctypes.addressof(code) + 24).value == _abi.UNIMPLEMENTED
    destroy = (ctypes.c_uint64 * 3)(24, 0, err)
    _abi.VOID_SLOT_FN(words[5])(ctypes.addressof(destroy))
    assert err not in _plugin._objects


def test_library_wraps_the_table_in_trampolines():
    # libXlaGpuPjrt.so's trampolines (they keep a Python exception jaxlib has
    # set while it calls a slot; test_errors_surface_as_python_exceptions
    # covers that end to end) forward every slot to the Python table.
    from xla_gpu.pjrt import _abi, _plugin, library_path
    lib = ctypes.CDLL(library_path())
    lib.XlaGpuPjrtWrapApi.argtypes = [ctypes.c_void_p] * 5
    lib.XlaGpuPjrtWrapApi.restype = ctypes.c_void_p
    py = ctypes.pythonapi
    hooks = [ctypes.cast(f, ctypes.c_void_p).value for f in
             (py.PyGILState_Ensure, py.PyGILState_Release, py.PyErr_Fetch, py.PyErr_Restore)]
    assert lib.XlaGpuPjrtWrapApi(_plugin.api_table(), None, *hooks[1:]) is None
    wrapped = lib.XlaGpuPjrtWrapApi(_plugin.api_table(), *hooks)
    assert wrapped
    words = (ctypes.c_uint64 * (_abi.API_STRUCT_SIZE // 8)).from_address(wrapped)
    table = (ctypes.c_uint64 * (_abi.API_STRUCT_SIZE // 8)).from_address(_plugin.api_table())
    assert list(words[:5]) == list(table[:5]) and all(words[5:])
    assert not set(words[5:]) & set(table[5:])   # trampolines, not the Python slots
    args = (ctypes.c_uint64 * 5)(40, 0, 0, 0, 0)
    slot = words[5 + _abi.SLOTS.index("Client_PlatformName")]
    assert _abi.SLOT_FN(slot)(ctypes.addressof(args)) is None
    assert ctypes.string_at(args[3], args[4]) == b"xla_gpu"


def test_devices_and_transfers():
    out = run_jax("""
        import ml_dtypes
        devs = jax.devices("xla_gpu")
        d = devs[0]
        res = {"n": len(devs), "platform": d.platform, "default": jax.default_backend(),
               "kind": d.device_kind, "ok": []}
        cases = [np.arange(6, dtype=np.float32).reshape(2, 3), np.arange(5, dtype=np.int8),
                 np.array([True, False, True]), np.arange(4, dtype=np.uint8),
                 np.arange(4, dtype=np.float16), np.arange(3, dtype=np.int32),
                 np.array([1 + 2j, 3 - 1j], np.complex64), np.float32(3.5),
                 np.arange(4, dtype=ml_dtypes.bfloat16), np.zeros((0, 3), np.float32),
                 np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2],   # strided
                 np.arange(4, dtype=np.float64), np.arange(4, dtype=np.int64)]
        for a in cases:
            x = jax.device_put(a, d)
            back = np.asarray(x)
            same = (back.dtype == np.asarray(a).dtype and back.shape == np.shape(a)
                    and np.array_equal(back, a) and x.devices() == {d})
            res["ok"].append(bool(same))
        print(json.dumps(res))
    """, extra_env={"JAX_ENABLE_X64": "1"})
    assert out["n"] == 1 and out["platform"] == "xla_gpu" and out["default"] == "xla_gpu"
    assert "xla_gpu" in out["kind"]
    assert all(out["ok"]), out["ok"]


def test_jit_matches_jax_cpu():
    out = run_jax("""
        g, c = jax.devices("xla_gpu")[0], jax.devices("cpu")[0]
        rng = np.random.default_rng(0)
        a = rng.standard_normal((8, 16)).astype(np.float32)
        b = rng.standard_normal((16, 4)).astype(np.float32)
        i = rng.integers(-50, 50, (8, 16)).astype(np.int32)
        def loop(x):
            return jax.lax.fori_loop(0, 5, lambda k, v: v * 0.5 + jnp.tanh(v) + k, x)
        fns = {
            "elementwise": (lambda x, y: jnp.exp(x) * 2 - jnp.maximum(x, 0.1) / 3, (a, a)),
            "reduction": (lambda x: (x.sum(axis=0), jnp.max(x, axis=1), x.mean()), (a,)),
            "int": (lambda x: (x // 3 + x % 7, jnp.sum(x)), (i,)),
            "dot": (lambda x, y: jnp.dot(x, y) + 1, (a, b)),
            "while": (loop, (a,)),
            "softmax": (lambda x: jax.nn.softmax(x, axis=-1), (a,)),
        }
        res = {}
        for name, (f, args) in fns.items():
            jf = jax.jit(f)
            got = jf(*[jax.device_put(x, g) for x in args])
            want = jf(*[jax.device_put(x, c) for x in args])
            got_l, want_l = jax.tree.leaves(got), jax.tree.leaves(want)
            res[name] = (all(next(iter(x.devices())) == g for x in got_l) and
                         all(np.allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-5)
                             for x, y in zip(got_l, want_l)))
        compiled = jax.jit(fns["dot"][0]).lower(jax.device_put(a, g), jax.device_put(b, g)).compile()
        res["as_text"] = compiled.as_text()
        res["memory"] = compiled.memory_analysis().output_size_in_bytes
        print(json.dumps(res))
    """, platforms="xla_gpu,cpu")
    for name in ("elementwise", "reduction", "int", "dot", "while", "softmax"):
        assert out[name], name
    assert out["as_text"].startswith("HloModule")
    assert out["memory"] == 8 * 4 * 4


def test_grad_of_mlp_and_block_until_ready():
    script = """
        rng = np.random.default_rng(1)
        params = {"w1": rng.standard_normal((4, 8)).astype(np.float32) * 0.5,
                  "b1": np.zeros(8, np.float32),
                  "w2": rng.standard_normal((8, 1)).astype(np.float32) * 0.5}
        x = rng.standard_normal((16, 4)).astype(np.float32)
        y = rng.standard_normal((16, 1)).astype(np.float32)
        def loss(p, x, y):
            h = jnp.tanh(x @ p["w1"] + p["b1"])
            return jnp.mean((h @ p["w2"] - y) ** 2)
        step = jax.jit(lambda p, x, y: jax.tree.map(lambda a, g: a - 0.1 * g, p,
                                                    jax.grad(loss)(p, x, y)))
        losses = []
        for _ in range(5):
            params = step(params, x, y)
            params = jax.block_until_ready(params)
            losses.append(float(jax.jit(loss)(params, x, y)))
        print(json.dumps({"losses": losses, "platform": jax.devices()[0].platform}))
    """
    ours, ref = run_jax(script), run_jax(script, platforms="cpu")
    assert ours["platform"] == "xla_gpu" and ref["platform"] == "cpu"
    assert ours["losses"][-1] < ours["losses"][0]
    assert ours["losses"] == pytest.approx(ref["losses"], rel=1e-4, abs=1e-6)


def test_errors_surface_as_python_exceptions():
    out = run_jax("""
        res = {}
        x = jnp.ones(4, jnp.float32)
        def no_handler(x):
            return jax.ffi.ffi_call("xla_gpu_test_no_such_target",
                                    jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
        try:
            jax.jit(no_handler)(x)
        except Exception as e:
            res["ffi"] = [type(e).__name__, str(e)]
        y = jnp.ones(3); y.delete()
        try:
            jax.jit(lambda v: v + 1)(y)
        except Exception as e:
            res["deleted"] = [type(e).__name__, str(e)]
        try:   # refused by xla_gpu's compiler (HLO's stateful rng op)
            jax.jit(lambda: jax.lax.rng_uniform(0.0, 1.0, (3,)))()
        except Exception as e:
            res["refused"] = [type(e).__name__, str(e)]
        res["after"] = np.asarray(jax.jit(lambda v: v * 3)(x)).tolist()
        # A handler registered with xla_gpu's FFI serves jax.ffi calls.
        import xla_gpu.ffi
        xla_gpu.ffi.register_ffi_target("xla_gpu_test_pjrt_double", lambda v: v * 2,
                                        platform="cpu")
        def double(v):
            return jax.ffi.ffi_call("xla_gpu_test_pjrt_double",
                                    jax.ShapeDtypeStruct(v.shape, v.dtype))(v)
        res["ffi_ok"] = np.asarray(jax.jit(double)(jnp.arange(3.0))).tolist()
        print(json.dumps(res))
    """)
    name, msg = out["ffi"]
    assert name == "JaxRuntimeError"
    assert "xla_gpu run" in msg and "xla_gpu_test_no_such_target" in msg
    assert "deleted" in out["deleted"][1]
    name, msg = out["refused"]
    assert name == "JaxRuntimeError" and msg.startswith("UNIMPLEMENTED: xla_gpu compile")
    assert "instruction 'rng_uniform" in msg
    assert out["after"] == [3.0] * 4   # the process and the backend carry on
    assert out["ffi_ok"] == [0.0, 2.0, 4.0]


def test_threads_share_one_jitted_function():
    out = run_jax("""
        import threading
        f = jax.jit(lambda x, k: jnp.sin(x) * k + x.sum())
        x = np.linspace(0, 1, 64, dtype=np.float32)
        want = np.sin(x) * 3 + x.sum()
        ok, errors = [], []
        def work():
            try:
                for _ in range(20):
                    ok.append(bool(np.allclose(np.asarray(f(x, 3.0)), want, rtol=1e-5)))
            except Exception as e:
                errors.append(repr(e))
        ts = [threading.Thread(target=work) for _ in range(4)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        print(json.dumps({"n": len(ok), "all": all(ok), "errors": errors}))
    """)
    assert out == {"n": 80, "all": True, "errors": []}


def test_initialize_warns_instead_of_failing_jax(monkeypatch, caplog):
    import xla_gpu.pjrt as plugin
    monkeypatch.setattr(plugin, "_registered", False)
    # A jaxlib whose PJRT C API the plugin does not speak: skipped with a warning.
    monkeypatch.setattr(plugin, "_SUPPORTED_JAXLIB", "9.9.")
    with caplog.at_level("WARNING", logger="xla_gpu.pjrt"):
        plugin.initialize()
    assert "not registered" in caplog.text and not plugin._registered

    # Anything else going wrong while registering: logged, never raised.
    def broken():
        raise OSError("libXlaGpuPjrt.so: cannot open shared object file")
    monkeypatch.setattr(plugin, "_register", broken)
    caplog.clear()
    with caplog.at_level("WARNING", logger="xla_gpu.pjrt"):
        plugin.initialize()
    assert "could not register the jax plugin: OSError: libXlaGpuPjrt.so" in caplog.text


def test_donation_and_persistent_cache(tmp_path):
    out = run_jax(f"""
        import warnings
        jax.config.update("jax_compilation_cache_dir", {str(tmp_path)!r})
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
        from xla_gpu.pjrt import _plugin
        loads = []
        real = _plugin._deserialize
        _plugin._deserialize = lambda blob: loads.append(len(blob)) or real(blob)
        res = {{}}
        def step(x, y):
            return x * 2 + y
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            x, y = jnp.ones(4), jnp.full(4, 3.0)
            r = jax.jit(step, donate_argnums=1)(x, y)
            res["first"] = np.asarray(r).tolist()
            res["donated_deleted"] = y.is_deleted()
            res["kept"] = not x.is_deleted()
            res["warnings"] = [str(w.message) for w in caught if "onat" in str(w.message)]
        jax.clear_caches()   # the next jit reads the executable back from the cache dir
        r = jax.jit(step, donate_argnums=1)(x, jnp.full(4, 1.0))
        res["second"] = np.asarray(r).tolist()
        res["loads"] = len(loads)
        print(json.dumps(res))
    """)
    assert out["first"] == [5.0] * 4 and out["second"] == [3.0] * 4
    assert out["donated_deleted"] and out["kept"] and out["warnings"] == []
    assert out["loads"] >= 1
    assert any(p.name.startswith("jit_step") for p in tmp_path.iterdir())


def test_compiles_on_a_stack_big_enough(tmp_path):
    # jaxlib compiles on worker threads with small stacks; xla_gpu's compiler
    # needs more for some programs (top_k, sort). A fresh compile cache makes
    # sure the compiler really runs.
    out = run_jax("""
        top = jax.lax.top_k(jnp.arange(7.0), 3)[0]
        srt = jnp.sort(jnp.array([3.0, 1.0, 2.0]))
        print(json.dumps({"top": np.asarray(top).tolist(), "sort": np.asarray(srt).tolist()}))
    """, extra_env={"XLA_GPU_CACHE_DIR": str(tmp_path)})
    assert out == {"top": [6.0, 5.0, 4.0], "sort": [1.0, 2.0, 3.0]}


def test_linear_algebra_runs_jaxlibs_lapack_kernels():
    """eigh, eig and schur have no lowering outside cpu, and cholesky and
    triangular_solve lower to HLO ops elsewhere: on the cpu target the
    plugin gives them cpu's LAPACK lowerings."""
    out = run_jax("""
        g, c = jax.devices("xla_gpu")[0], jax.devices("cpu")[0]
        a = np.random.default_rng(0).standard_normal((5, 5)).astype(np.float32)
        spd = a @ a.T + 5 * np.eye(5, dtype=np.float32)
        fns = {
            "cholesky": jnp.linalg.cholesky,
            "eigh": lambda m: jnp.linalg.eigh(m)[0],
            "svd": lambda m: jnp.linalg.svd(m)[1],
            "solve": lambda m: jnp.linalg.solve(m, jnp.ones(5)),
            "triangular": lambda m: jax.scipy.linalg.solve_triangular(m, jnp.ones(5), lower=True),
            "qr": lambda m: jnp.abs(jnp.linalg.qr(m)[1]),
            "eig": lambda m: jnp.sort(jnp.abs(jnp.linalg.eigvals(m))),
            "schur": lambda m: jnp.sort(jnp.abs(jnp.diag(jax.scipy.linalg.schur(m)[0]))),
        }
        res = {}
        for name, f in fns.items():
            got = jax.jit(f)(jax.device_put(spd, g))
            want = jax.jit(f)(jax.device_put(spd, c))
            res[name] = bool(next(iter(got.devices())) == g and
                             np.allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-4))
        print(json.dumps(res))
    """, platforms="xla_gpu,cpu")
    assert all(out.values()), out


def test_several_devices_by_environment():
    out = run_jax("""
        devices = jax.devices("xla_gpu")
        f = jax.jit(lambda v: v * 2 + 1)
        res = {"count": len(devices), "runs": []}
        for d in devices:
            y = f(jax.device_put(np.arange(4, dtype=np.float32), d))
            res["runs"].append([next(iter(y.devices())).id, np.asarray(y).tolist()])
        moved = jax.device_put(jax.device_put(np.ones(2, np.float32), devices[0]), devices[2])
        res["moved"] = [d.id for d in moved.devices()]
        compiled = f.lower(jax.device_put(np.ones(4, np.float32), devices[1])).compile()
        res["assigned"] = [d.id for d in compiled.runtime_executable().local_devices()]
        # A program over the three devices (pmap: one partition each).
        summed = jax.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i")(
            np.arange(6, dtype=np.float32).reshape(3, 2))
        res["pmap"] = np.asarray(summed).tolist()
        print(json.dumps(res))
    """, extra_env={"XLA_GPU_NUM_DEVICES": "3"})
    assert out["count"] == 3
    assert out["runs"] == [[i, [1.0, 3.0, 5.0, 7.0]] for i in range(3)]
    assert out["moved"] == [2]
    assert out["assigned"] == [1]
    assert out["pmap"] == [[6.0, 9.0]] * 3


def test_sharded_programs_on_a_mesh_of_xla_gpu_devices():
    """jax.jit of shard_map and NamedSharding programs on a mesh of 4
    xla_gpu devices (XLA_GPU_NUM_DEVICES=4): compiled for 4 partitions and
    run on every device (run_partitioned), against jax's cpu backend on 4
    host devices."""
    out = run_jax("""
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        res = {}

        def both(name, make, *args):
            outs = []
            for platform in ("xla_gpu", "cpu"):
                mesh = Mesh(np.array(jax.devices(platform)), ("x",))
                f, shardings = make(mesh)
                placed = [jax.device_put(a, s) for a, s in zip(args, shardings)]
                got = jax.jit(f)(*placed)
                outs.append([np.asarray(o) for o in jax.tree.leaves(got)])
                if platform == "xla_gpu":
                    res[name + " devices"] = sorted(
                        {d.platform for o in jax.tree.leaves(got) for d in o.devices()})
            res[name] = all(np.allclose(a, b, rtol=1e-5, atol=1e-5) for a, b in zip(*outs))

        def mapped(body, in_specs, out_specs):
            def make(mesh):
                f = jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                                  check_vma=False)
                return f, [NamedSharding(mesh, s) for s in in_specs]
            return make

        x = np.arange(32, dtype=np.float32).reshape(8, 4)
        ring = [(i, (i + 1) % 4) for i in range(4)]
        both("psum", mapped(lambda a: jax.lax.psum(a, "x"), (P("x"),), P()), x)
        both("all_gather", mapped(lambda a: jax.lax.all_gather(a, "x", tiled=True),
                                  (P("x"),), P()), x)
        both("ppermute", mapped(lambda a: jax.lax.ppermute(a, "x", ring), (P("x"),), P("x")), x)
        both("all_to_all", mapped(lambda a: jax.lax.all_to_all(a, "x", 1, 0, tiled=True),
                                  (P("x"),), P("x")), np.arange(64, dtype=np.float32).reshape(8, 8))
        both("psum_scatter", mapped(lambda a: jax.lax.psum_scatter(a, "x", tiled=True),
                                    (P(),), P("x")), x)

        def dp_step(mesh):
            def step(w, a, y):
                value, grad = jax.value_and_grad(lambda w: jnp.mean((a @ w - y) ** 2))(w)
                return w - 0.1 * grad, value
            return step, [NamedSharding(mesh, P()), NamedSharding(mesh, P("x", None)),
                          NamedSharding(mesh, P("x", None))]
        both("dp_step", dp_step, np.ones((4, 2), np.float32), x, np.ones((8, 2), np.float32))
        print(json.dumps(res))
    """, platforms="xla_gpu,cpu", extra_env={
        "XLA_GPU_NUM_DEVICES": "4",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4"})
    for name in ("psum", "all_gather", "ppermute", "all_to_all", "psum_scatter", "dp_step"):
        assert out[name] is True, (name, out)
        assert out[name + " devices"] == ["xla_gpu"], (name, out)


def test_compile_options_and_double_donation_are_checked():
    out = run_jax("""
        res = {}
        lowered = jax.jit(lambda v: v + 1).lower(1.0)
        for key, opts in {"unknown": {"invalid_key": "x"},
                          "known": {"exec_time_optimization_effort": 0.0,
                                    "xla_embed_ir_in_executable": True},
                          # a bool flag jaxlib's binding does not expose
                          "bad bool": {"xla_embed_ir_in_executable": "invalid_value"},
                          "string flag": {"xla_dump_hlo_pass_re": "fusion"}}.items():
            try:
                lowered.compile(compiler_options=opts)
                res[key] = "compiled"
            except Exception as e:
                res[key] = str(e)
        f = jax.jit(lambda a, b: a + b, donate_argnums=(0,))
        x = jnp.zeros(4, jnp.float32)
        try:
            f(x, x).block_until_ready()
            res["double"] = "ran"
        except RuntimeError as e:
            res["double"] = str(e)
        res["x_alive"] = not x.is_deleted()
        print(json.dumps(res))
    """)
    assert "No such compile option: 'invalid_key'" in out["unknown"]
    assert out["known"] == "compiled" and out["string flag"] == "compiled"
    assert "'invalid_value' is not a valid bool value" in out["bad bool"]
    assert "donate the same buffer twice" in out["double"]
    assert out["x_alive"]   # refused before the run: nothing was consumed


def test_tokens_and_sub_byte_integers_through_jit():
    """Token results come back as PJRT token buffers (jax's core.Token), a
    token passed back in is taken as a parameter with no bytes; int4
    arguments keep their sign."""
    out = run_jax("""
        from jax._src import core
        tok = jax.lax.create_token()
        noop = jax.jit(lambda arr, token: (arr + 1, token))
        arr, out_tok = noop(jnp.ones(3), tok)
        _, captured = jax.jit(lambda x: (x + 2, tok))(7)
        try:
            tok._buf._value
            refused = False
        except RuntimeError as e:
            refused = "token" in str(e)
        x = np.array([1, -2, -3, 4, -8, 7], dtype=jnp.int4)
        wide = jax.jit(lambda v: v.astype(jnp.int8))(x)
        print(json.dumps({
            "tokens": [isinstance(t, core.Token) for t in (tok, out_tok, captured)],
            "distinct": out_tok is not tok, "arr": np.asarray(arr).tolist(),
            "refused": refused, "wide": np.asarray(wide).tolist()}))
    """)
    assert out["tokens"] == [True, True, True] and out["distinct"]
    assert out["arr"] == [2.0, 2.0, 2.0]
    assert out["refused"]
    assert out["wide"] == [1, -2, -3, 4, -8, 7]


def test_large_constants_reach_the_compiler_with_their_values():
    """jax's HLO printer elides constants of more than 10 elements ({...})
    by default; the plugin asks for them in full."""
    out = run_jax("""
        edges = np.arange(-5.0, 6.0, dtype=np.float32)   # 11 elements
        f = jax.jit(lambda v: jnp.searchsorted(edges, v))
        x = np.array([-4.5, 0.2, 3.7], np.float32)
        print(json.dumps(np.asarray(f(x)).tolist()))
    """)
    assert out == [1, 6, 9]


def test_a_jit_call_leaves_no_ctypes_types_as_garbage():
    # The plugin's strings and host copies used to make a ctypes array type
    # per length (`create_string_buffer`, `c_char * n`): types live in
    # reference cycles, so every compile left some for the collector (jax's
    # core_test counts a jit call's garbage).
    out = run_jax("""
        import ctypes, gc
        gc.collect()
        f = jax.jit(lambda x: x.sum() * 2)
        f(jnp.arange(69.0)).block_until_ready()
        jax.device_put(np.arange(7, dtype=np.int8)).block_until_ready()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        types = [o.__name__ for o in gc.garbage if isinstance(o, type)
                 and issubclass(o, ctypes.Array)]
        gc.set_debug(0)
        print(json.dumps({"types": types}))
    """)
    assert out["types"] == []


def test_the_optimized_program_jax_reads_back_is_ours():
    # After every compile jaxlib reads the program back (layouts, shardings,
    # `compiled.as_text()`): the plugin hands it our optimized HLO as a
    # protobuf. A dot algorithm StableHLO cannot spell stays in it (the
    # StableHLO importer crashed on it), and a transposed result keeps the
    # row-major layout jax asked for.
    out = run_jax("""
        g = jax.devices("xla_gpu")[0]
        a = jax.device_put(np.ones((4, 8), np.float32), g)
        b = jax.device_put(np.ones((8, 3), np.float32), g)
        f = lambda a, b: (jnp.dot(a, b, precision=jax.lax.DotAlgorithmPreset.BF16_BF16_F32_X9),
                          (a * 2).T)
        compiled = jax.jit(f).lower(a, b).compile()
        dot, moved = compiled(a, b)
        print(json.dumps({
            "text": compiled.as_text(),
            "layouts": [list(o.layout.major_to_minor) for o in compiled.output_formats],
            "dot": np.asarray(dot).tolist(), "moved": list(moved.shape)}))
    """)
    assert out["text"].startswith("HloModule jit__lambda")
    assert "algorithm=dot_bf16_bf16_f32_x9" in out["text"]
    assert "kind=kLoop" in out["text"]           # our fusions, as we compiled them
    assert out["layouts"] == [[0, 1], [0, 1]]
    assert out["dot"] == [[8.0] * 3] * 4 and out["moved"] == [8, 4]


def test_the_optimized_program_is_a_module_with_its_config():
    hlo = pytest.importorskip("jaxlib._hlo")
    from xla_gpu.pjrt import _plugin
    module = bytes(hlo.hlo_module_from_text(
        "HloModule m, entry_computation_layout={(f32[2,3]{0,1})->f32[2,3]{1,0}}\n"
        "ENTRY e {\n  p = f32[2,3]{0,1} parameter(0)\n"
        "  ROOT c = f32[2,3]{1,0} copy(p)\n}\n").as_serialized_hlo_module_proto())
    wrapped = _plugin._hlo_module_with_config(module, replicas=2, partitions=3)
    fields = _plugin._proto_fields(wrapped)
    assert fields[1] == module
    config = _plugin._proto_fields(fields[2])
    # The config's entry layout is the module's program shape, layouts and all.
    assert config[1] == _plugin._proto_fields(module)[4]
    assert _plugin._proto_field(4, 2) in fields[2] and _plugin._proto_field(5, 3) in fields[2]
    back = hlo.HloModule.from_serialized_hlo_module_proto(fields[1])
    assert "copy" in back.to_string()
    with pytest.raises(ValueError, match="host program shape"):
        _plugin._hlo_module_with_config(_plugin._proto_field(1, b"m"))


def test_a_jit_compile_leaves_no_cyclic_garbage(tmp_path):
    # jax's core_test counts what a jit call leaves for the cyclic
    # collector. A compile drops HLO modules (whose instructions point at
    # each other), pass objects and the JSON the compile cache writes: each
    # is unlinked or written without cycles, so none is left.
    out = run_jax("""
        import gc
        warm = jax.jit(lambda x: x * 2)
        warm(jnp.zeros([])).block_until_ready()   # loads the compiler
        gc.collect()
        found, kept = [], []
        for f in (lambda x: x.sum(), lambda x: jnp.argmax(x * 3.0), lambda x: x @ x.T):
            # (kept, as `warm` is: a function dropped frees its executable
            # whenever jaxlib gets to it, and a program's kernel libraries
            # and ctypes types are cycles: not the compile's garbage)
            kept.append(jax.jit(f))
            kept[-1](jnp.ones((3, 4))).block_until_ready()
            gc.set_debug(gc.DEBUG_SAVEALL)
            found.append(gc.collect())
            kinds = sorted({type(o).__name__ for o in gc.garbage})
            gc.set_debug(0)
            gc.garbage.clear()
        print(json.dumps({"found": found, "kinds": kinds}))
    """, extra_env={"XLA_GPU_CACHE_DIR": str(tmp_path / "cache")})
    assert out["found"] == [0, 0, 0], out
