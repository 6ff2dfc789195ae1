"""libXlaGpuPjrt.so's Execute (cpu target): after an executable's first run
in Python, the library runs it through xla_gpu.runtime._host_run's C entry
and makes the result buffers itself (blocks in the plugin's map whose value
is the result array, given a Buffer object only when a Python slot asks).
Everything it does not handle goes to the Python slot before anything ran;
results, errors, deletion, donation, traces, threads and several devices
must behave exactly as on the Python path.

Each case runs in a fresh interpreter (jax's backends are process-global)
that counts the calls reaching the Python slots.
"""

import textwrap

import pytest
import slot_counts

pytest.importorskip("jax")

TIMEOUT = 300

HELPERS = """
lib = ctypes.CDLL(__import__("xla_gpu.pjrt").pjrt.library_path())
lib.GetPjrtApi.restype = ctypes.c_void_p
words = (ctypes.c_uint64 * (A.API_STRUCT_SIZE // 8)).from_address(lib.GetPjrtApi())

def message(err):
    msg = (ctypes.c_uint64 * 5)(40, 0, err)
    A.VOID_SLOT_FN(words[5 + A.SLOTS.index("Error_Message")])(ctypes.addressof(msg))
    return ctypes.string_at(msg[3], msg[4]).decode()

def execute(exe_addr, arg_addrs, num_outputs):
    # PJRT_LoadedExecutable_Execute through jax's table, one device.
    arg_list = (ctypes.c_uint64 * max(1, len(arg_addrs)))(*arg_addrs)
    lists = (ctypes.c_uint64 * 1)(ctypes.addressof(arg_list))
    outs = (ctypes.c_uint64 * max(1, num_outputs))()
    out_lists = (ctypes.c_uint64 * 1)(ctypes.addressof(outs))
    events = (ctypes.c_uint64 * 1)()
    args = (ctypes.c_uint64 * 10)(80, 0, exe_addr, 0, ctypes.addressof(lists), 1,
                                  len(arg_addrs), ctypes.addressof(out_lists),
                                  ctypes.addressof(events), 0)
    err = A.SLOT_FN(words[5 + A.SLOTS.index("LoadedExecutable_Execute")])(
        ctypes.addressof(args))
    return message(err) if err else list(outs[:num_outputs])

def library_made(addr):
    return P._HandleBlock.from_address(addr)[P._W["library_owned"]] == 1

def handle_of(array):
    # The PJRT buffer behind a jax array (its Buffer object made if need be).
    ptr = array.unsafe_buffer_pointer()
    return next(a for a, o in list(P._objects.items()) if isinstance(o, P.Buffer)
                and o.array is not None and o.array.ctypes.data == ptr)

def library_handles():
    # Result buffers the library made that no Python slot has asked for.
    return [a for a, o in list(P._objects.items()) if o.__class__ is np.ndarray]

def call(slot, *fields):
    args = (ctypes.c_uint64 * 8)(8 * 8, 0, *fields)
    err = A.SLOT_FN(words[5 + A.SLOTS.index(slot)])(ctypes.addressof(args))
    return message(err) if err else list(args[3:5])

def library_executable(name):
    return next(o for o in list(P._objects.values()) if isinstance(o, P.Executable)
                and o.host_run is not None and name in o.name_text)
"""


def run_counted(script: str, extra_env=None) -> dict:
    return slot_counts.run_counted(script, extra_env, prelude=HELPERS, timeout=TIMEOUT)


def test_results_and_result_buffers_after_the_first_run():
    # Programs whose results are pooled arrays, views of one allocation,
    # several outputs, scalars, zero-size, sub-byte and 16-bit types; each
    # runs 5 times, and only the first run reaches Python.
    out = run_counted("""
        import ml_dtypes
        cases = [
            ("f32", lambda v: jnp.tanh(v) * 2 + 1, np.arange(16, dtype=np.float32) / 7),
            ("pair", lambda v: (v + 1, v * v), np.arange(6, dtype=np.int32).reshape(2, 3)),
            ("slice", lambda v: v[1:3], np.arange(12, dtype=np.float32).reshape(4, 3)),
            ("transpose", lambda v: v.T, np.arange(6, dtype=np.float32).reshape(2, 3)),
            ("scalar", lambda v: jnp.sum(v), np.arange(5, dtype=np.float64)),
            ("empty", lambda v: v * 2, np.zeros((0, 3), np.float32)),
            ("bool", lambda v: v > 2, np.arange(5, dtype=np.int8)),
            ("bf16", lambda v: v * 3, np.arange(4).astype(ml_dtypes.bfloat16)),
            ("int4", lambda v: v + 1, np.array([1, -2, 3], dtype=ml_dtypes.int4)),
        ]
        res = {}
        for name, fn, host in cases:
            x = jax.device_put(host, dev)
            f = jax.jit(fn)
            calls.clear()
            # The first run is Python's, the others the library's.
            got = [jax.tree.map(np.asarray, f(x)) for _ in range(5)]
            want = jax.tree.map(np.asarray, jax.jit(fn, backend="cpu")(host))
            same = all(all(np.array_equal(a, b) and a.dtype == b.dtype and a.shape == b.shape
                           for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(got[0])))
                       for g in got)
            close = all(np.allclose(np.asarray(a, np.float64), np.asarray(b, np.float64))
                        and a.dtype == b.dtype and a.shape == b.shape
                        for a, b in zip(jax.tree.leaves(got[0]), jax.tree.leaves(want)))
            e = [o for o in list(P._objects.values()) if isinstance(o, P.Executable)][-1]
            res[name] = [same, close, calls["LoadedExecutable_Execute"], e.host_run is not None]
        # A result the library made: every Python slot that asks for it
        # gets its Buffer (made then), with the facts of the block.
        x = jax.device_put(np.arange(6, dtype=np.float32).reshape(2, 3), dev)
        f = jax.jit(lambda v: v * 2)
        f(x)
        y = f(x)
        addr = handle_of(y)
        res["library_made"] = library_made(addr)
        b = P._objects[addr]
        res["facts"] = [list(b.shape), str(b.dtype), b.nbytes, b.device is P._client().devices[0],
                        y.on_device_size_in_bytes(), y.devices() == {dev}]
        res["copy"] = np.asarray(jax.device_put(y, jax.devices("cpu")[0])).tolist()
        res["chained"] = np.asarray(f(f(y))).tolist()
        print(json.dumps(res))
    """)
    for name in ("f32", "pair", "slice", "transpose", "scalar", "empty", "bool", "bf16",
                 "int4"):
        same, close, executes, library = out[name]
        assert same and close, name
        # A result that needs converting (a transpose the compiler leaves
        # strided, int4 kept a byte each) is Python's, every run; so is a
        # run on zero-size arguments (the C run refuses them before running,
        # and the library hands the call to Python).
        assert library or name in ("transpose", "int4"), name
        assert executes == (1 if library and name != "empty" else 5), (name, executes)
    assert out["library_made"]
    assert out["facts"] == [[2, 3], "float32", 24, True, 24, True]
    assert out["copy"] == [[0.0, 2.0, 4.0], [6.0, 8.0, 10.0]]
    assert out["chained"] == [[0.0, 8.0, 16.0], [24.0, 32.0, 40.0]]


def test_without_the_library_execute_every_run_is_python():
    out = run_counted("""
        x = jax.device_put(np.arange(4, dtype=np.float32), dev)
        f = jax.jit(lambda v: v + 1)
        calls.clear()
        ys = [np.asarray(f(x)).tolist() for _ in range(5)]
        print(json.dumps({"ys": ys, "executes": calls["LoadedExecutable_Execute"],
                          "on": P.LIBRARY_EXECUTE}))
    """, extra_env={"XLA_GPU_PJRT_LIBRARY_EXECUTE": "0"})
    assert out == {"ys": [[1.0, 2.0, 3.0, 4.0]] * 5, "executes": 5, "on": False}


def test_deleted_arguments_and_executables_get_the_python_errors():
    out = run_counted("""
        x = jax.device_put(np.arange(4, dtype=np.float32), dev)
        f = jax.jit(lambda v: v + 1)
        f(x)
        gc.collect()
        y = f(x)                       # made by the library
        [y_addr] = library_handles()
        e = library_executable("")
        res = {"ok": len(execute(e.addr, [handle_of(x)], 1)) == 1}
        res["y_library_made"] = library_made(y_addr)
        calls.clear()
        # Deleted (not destroyed: jax still holds it), as a donation or
        # Buffer_Delete leaves it; the library reads the mark Python made.
        call("Buffer_Delete", y_addr)
        res["y_deleted"] = y.is_deleted()
        res["deleted_arg"] = execute(e.addr, [y_addr], 1)
        try:
            f(y)
            res["jax"] = "ran"
        except Exception as exc:
            res["jax"] = str(exc)
        # Not a buffer, and an executable deleted: Python answers.
        res["not_a_buffer"] = execute(e.addr, [e.addr], 1)
        z = jax.device_put(np.arange(4, dtype=np.float32), dev)
        z_addr = handle_of(z)
        delete = (ctypes.c_uint64 * 3)(24, 0, e.addr)
        A.SLOT_FN(words[5 + A.SLOTS.index("LoadedExecutable_Delete")])(ctypes.addressof(delete))
        res["deleted_executable"] = execute(e.addr, [z_addr], 1)
        print(json.dumps(res))
    """)
    assert out["ok"] and out["y_library_made"] and out["y_deleted"]
    assert out["deleted_arg"].endswith("the buffer has been deleted or donated"), \
        out["deleted_arg"]
    assert "deleted" in out["jax"].lower()
    assert out["not_a_buffer"].startswith("PJRT_LoadedExecutable_Execute argument 0: not a live")
    assert out["deleted_executable"].endswith("was deleted"), out["deleted_executable"]


def test_an_error_in_a_cleared_executables_run_reaches_jax_with_our_message():
    # A setting the C run cannot read (XLA_GPU_DEBUG_FILL, read on every
    # run) hands the call to Python, which reports it as before; once the
    # setting is good again, the library runs the calls.
    out = run_counted("""
        import os
        x = jax.device_put(np.arange(4, dtype=np.float32), dev)
        f = jax.jit(lambda v: v + 1)
        f(x)
        calls.clear()
        f(x)
        res = {"cleared": calls["LoadedExecutable_Execute"] == 0}
        os.environ["XLA_GPU_DEBUG_FILL"] = "bogus"
        try:
            f(x)
            res["error"] = "ran"
        except Exception as exc:
            res["error"] = [type(exc).__name__, str(exc)]
        os.environ["XLA_GPU_DEBUG_FILL"] = "0x7"
        calls.clear()
        res["y"] = np.asarray(f(x)).tolist()
        res["after"] = calls["LoadedExecutable_Execute"]
        print(json.dumps(res))
    """)
    assert out["cleared"]
    assert out["error"] == ["ValueError", "INVALID_ARGUMENT: xla_gpu run: ArgumentError: "
                            "XLA_GPU_DEBUG_FILL must be a byte value, got 'bogus'"]
    assert out["y"] == [1.0, 2.0, 3.0, 4.0] and out["after"] == 0


def test_donation_consumes_library_made_inputs():
    # A donated argument the library made (its map value is its array) and
    # one a Python run made (a Buffer object): both consumed; only the
    # first run of the donating executable reaches Python.
    out = run_counted("""
        f = jax.jit(lambda v: v * 3, donate_argnums=0)
        g = jax.jit(lambda v: v + 1)
        x = jax.device_put(np.arange(4, dtype=np.float32), dev)
        g(x)
        a = g(x)                        # made by the library
        a_addr = handle_of(a)
        res = {"a_library_made": library_made(a_addr)}
        calls.clear()
        b = f(a)
        c = f(b)
        res["a_deleted"] = a.is_deleted()
        res["b_deleted"] = b.is_deleted()
        res["c"] = np.asarray(c).tolist()
        # The consumed arrays are gone: the map's value of a result no
        # Python slot asked for (None then, and a deleted Buffer once one
        # asks), and the arrays of Buffer objects (a, and a device_put one).
        res["a_value"] = [P._objects[a_addr]._array is None, P._objects[a_addr].array is None]
        gc.collect()
        before = set(library_handles())
        h = g(x)
        [h_addr] = set(library_handles()) - before
        res["h_value"] = [repr(P._objects[h_addr])]
        f(h)
        res["h_value"] += [repr(P._objects[h_addr]), h.is_deleted()]
        res["h_buffer"] = [P._get(h_addr, P.Buffer, "h").deleted, P._objects[h_addr].array is None,
                           str(P._objects[h_addr].dtype), P._objects[h_addr].shape]
        d = jax.device_put(np.arange(4, dtype=np.float32), dev)
        d_addr = handle_of(d)
        e = f(d)
        res["d"] = [d.is_deleted(), P._objects[d_addr]._array is None,
                    P._objects[d_addr].array is None, np.asarray(e).tolist()]
        res["executes"] = calls["LoadedExecutable_Execute"]
        print(json.dumps(res))
    """)
    assert out["a_library_made"] and out["a_deleted"] and out["b_deleted"]
    assert out["c"] == [9.0, 18.0, 27.0, 36.0]
    assert out["a_value"] == [True, True]
    assert out["h_value"][0].startswith("array(") and out["h_value"][1:] == ["None", True]
    assert out["h_buffer"] == [True, True, "float32", [4]]
    assert out["d"] == [True, True, True, [0.0, 3.0, 6.0, 9.0]]
    assert out["executes"] == 1


# A training-style step: parameters and optimizer state donated, the batch
# not; new parameters, new state and the loss come back.
TRAINING = """
def loss_fn(params, batch):
    w, b = params
    return jnp.mean((jnp.tanh(batch @ w) + b) ** 2)

def step(params, mom, batch):
    loss, grads = jax.value_and_grad(loss_fn)(params, batch)
    mom = jax.tree.map(lambda m, g: 0.9 * m + g, mom, grads)
    params = jax.tree.map(lambda p, m: p - 0.05 * m, params, mom)
    return params, mom, loss

rng = np.random.default_rng(0)
w0 = rng.standard_normal((6, 3)).astype(np.float32)
b0 = rng.standard_normal(3).astype(np.float32)
batch_host = rng.standard_normal((5, 6)).astype(np.float32)

STEP = jax.jit(step, donate_argnums=(0, 1))

def train(device, steps, record=None):
    f = STEP
    params = (jax.device_put(w0, device), jax.device_put(b0, device))
    mom = (jax.device_put(np.zeros_like(w0), device), jax.device_put(np.zeros_like(b0), device))
    batch = jax.device_put(batch_host, device)
    losses = []
    for i in range(steps):
        if record is not None:
            record.append((params, mom))
        params, mom, loss = f(params, mom, batch)
        losses.append(float(loss))
    return params, mom, losses
"""


def _training_run(extra_env=None) -> dict:
    return run_counted(TRAINING + textwrap.dedent("""
        seen = []
        calls.clear()
        params, mom, losses = train(dev, 50, seen)
        res = {"python_executes": calls["LoadedExecutable_Execute"],
               "donation_on": P.LIBRARY_DONATION,
               "losses": losses,
               "params": [np.asarray(p).tolist() for p in params],
               "mom": [np.asarray(m).tolist() for m in mom]}
        # Every donated input of the 50 calls is deleted; nothing else is.
        res["all_deleted"] = all(a.is_deleted() for p, m in seen for a in (*p, *m))
        res["live"] = not any(a.is_deleted() for a in (*params, *mom))
        try:
            STEP(*seen[-1], jax.device_put(batch_host, dev))
            res["reuse"] = "ran"
        except Exception as exc:
            res["reuse"] = str(exc)
        try:
            seen[-1][0][0] + 1
            res["reuse_op"] = "ran"
        except Exception as exc:
            res["reuse_op"] = str(exc)
        # The consumed buffers leave the plugin's map when jax drops them.
        del seen
        gc.collect()
        before = len(P._objects)
        train(dev, 30)
        gc.collect()
        res["map_growth"] = len(P._objects) - before
        cpu = train(jax.devices("cpu")[0], 50)
        res["cpu_close"] = bool(np.allclose(cpu[2], losses, rtol=1e-4, atol=1e-6) and all(
            np.allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)
            for a, b in zip((*cpu[0], *cpu[1]), (*params, *mom))))
        print(json.dumps(res))
    """), extra_env)


def test_a_donated_training_loop_runs_in_the_library_as_in_python():
    lib = _training_run()
    py = _training_run({"XLA_GPU_PJRT_LIBRARY_EXECUTE": "0"})
    assert lib["donation_on"] and not py["donation_on"]
    # The first call of the step is Python's, the other 49 the library's.
    assert lib["python_executes"] == 1, lib["python_executes"]
    assert py["python_executes"] == 50
    # Bit for bit what the Python path computes, and XLA:CPU's up to rounding.
    for key in ("losses", "params", "mom", "all_deleted", "live", "reuse", "reuse_op",
                "cpu_close"):
        assert lib[key] == py[key], key
    assert lib["all_deleted"] and lib["live"] and lib["cpu_close"]
    assert "has been deleted or donated" in lib["reuse"], lib["reuse"]
    assert "deleted" in lib["reuse_op"], lib["reuse_op"]
    assert lib["map_growth"] <= 8, lib["map_growth"]


DONATION_CASES = """
def attempt(fn):
    try:
        return ["ok", jax.tree.map(lambda a: np.asarray(a).tolist(), fn())]
    except Exception as exc:
        return ["error", str(exc)]

res = {}
f = jax.jit(lambda a, b: (a * 2 + b, b - a), donate_argnums=0)
x = jax.device_put(np.arange(4, dtype=np.float32), dev)
y = jax.device_put(np.ones(4, np.float32), dev)
f(f(x, y)[0], y)                          # cleared after the first run
calls.clear()
# The donated buffer passed again as the other argument: refused before
# anything ran, the buffer left as it was.
z = f(jax.device_put(np.arange(4, dtype=np.float32), dev), y)[0]
res["twice"] = attempt(lambda: f(z, z))
res["twice_kept"] = [z.is_deleted(), np.asarray(z).tolist()]
# The same buffer at two positions, neither donated twice: an ordinary call.
g = jax.jit(lambda a, b, c: a + b * c, donate_argnums=0)
g(jax.device_put(np.ones(4, np.float32), dev), y, y)
w = jax.device_put(np.full(4, 2, np.float32), dev)
res["same_undonated"] = attempt(lambda: g(w, y, y))
res["same_undonated_state"] = [w.is_deleted(), y.is_deleted()]
# A numpy view still reading the donated input: the call runs, the input
# stays (as on XLA:CPU).
v = f(jax.device_put(np.arange(4, dtype=np.float32), dev), y)[0]
view = np.asarray(v)
res["viewed"] = attempt(lambda: f(v, y))
res["viewed_state"] = [v.is_deleted(), view.tolist(), np.asarray(v).tolist()]
# Many donated arguments (the library sorts them to find a twin).
leaves = [jax.device_put(np.full(3, i, np.float32), dev) for i in range(80)]
h = jax.jit(lambda ls: [l + 1 for l in ls], donate_argnums=0)
leaves = h(h(leaves))
many_twin = list(leaves)
many_twin[41] = many_twin[7]
res["many_twice"] = attempt(lambda: h(many_twin))
res["many_twice_kept"] = not any(l.is_deleted() for l in leaves)
out = h(leaves)
res["many"] = [np.asarray(out[79]).tolist(), all(l.is_deleted() for l in leaves)]
res["python_executes"] = calls["LoadedExecutable_Execute"]
print(json.dumps(res))
"""


def test_donation_refusals_and_kept_inputs_match_the_python_path():
    lib = run_counted(DONATION_CASES)
    py = run_counted(DONATION_CASES, {"XLA_GPU_PJRT_LIBRARY_EXECUTE": "0"})
    assert {k: v for k, v in lib.items() if k != "python_executes"} == \
        {k: v for k, v in py.items() if k != "python_executes"}
    assert lib["twice"][0] == "error" and "donate the same buffer twice" in lib["twice"][1]
    assert lib["twice_kept"] == [False, [1.0, 3.0, 5.0, 7.0]]
    assert lib["same_undonated"] == ["ok", [3.0, 3.0, 3.0, 3.0]]
    assert lib["same_undonated_state"] == [True, False]
    assert lib["viewed"][0] == "ok"
    assert lib["viewed_state"] == [False, [1.0, 3.0, 5.0, 7.0], [1.0, 3.0, 5.0, 7.0]]
    assert lib["many_twice"][0] == "error", lib["many_twice"]
    assert "donate the same buffer twice" in lib["many_twice"][1]
    assert lib["many_twice_kept"] and lib["many"] == [[82.0, 82.0, 82.0], True]
    # Python ran only what it refuses (the two calls passing a buffer twice)
    # and g's and h's first runs; the Python path ran every call.
    assert lib["python_executes"] == 4, lib["python_executes"]
    assert py["python_executes"] == 10, py["python_executes"]


def test_inputs_jaxlib_lists_as_not_donatable_stay():
    # PJRT_ExecuteOptions.non_donatable_input_indices: such an input is read,
    # not consumed; the others are.
    script = """
        f = jax.jit(lambda a, b: (a + b, a * b), donate_argnums=(0, 1))
        x = jax.device_put(np.arange(4, dtype=np.float32), dev)
        y = jax.device_put(np.ones(4, np.float32), dev)
        f(x, y)
        e = [o for o in list(P._objects.values()) if isinstance(o, P.Executable)
             and o.donated][-1]
        a = jax.device_put(np.arange(4, dtype=np.float32), dev)
        b = jax.device_put(np.full(4, 3, np.float32), dev)
        a_addr, b_addr = handle_of(a), handle_of(b)
        keep = (ctypes.c_int64 * 1)(1)
        options = (ctypes.c_uint64 * (A.EXECUTE_OPTIONS.size // 8))()
        options[0] = A.EXECUTE_OPTIONS.size
        options[A.EXECUTE_OPTIONS.non_donatable_input_indices // 8] = ctypes.addressof(keep)
        options[A.EXECUTE_OPTIONS.num_non_donatable_input_indices // 8] = 1
        arg_list = (ctypes.c_uint64 * 2)(a_addr, b_addr)
        lists = (ctypes.c_uint64 * 1)(ctypes.addressof(arg_list))
        outs = (ctypes.c_uint64 * 2)()
        out_lists = (ctypes.c_uint64 * 1)(ctypes.addressof(outs))
        args = (ctypes.c_uint64 * 10)(80, 0, e.addr, ctypes.addressof(options),
                                      ctypes.addressof(lists), 1, 2,
                                      ctypes.addressof(out_lists), 0, 0)
        calls.clear()
        err = A.SLOT_FN(words[5 + A.SLOTS.index("LoadedExecutable_Execute")])(
            ctypes.addressof(args))
        res = {"error": message(err) if err else None,
               "python_executes": calls["LoadedExecutable_Execute"],
               "deleted": [a.is_deleted(), b.is_deleted()],
               "b": np.asarray(b).tolist(),
               "outs": [P._get(o, P.Buffer, "out").array.tolist() for o in outs]}
        print(json.dumps(res))
    """
    lib = run_counted(script)
    py = run_counted(script, {"XLA_GPU_PJRT_LIBRARY_EXECUTE": "0"})
    assert lib["python_executes"] == 0 and py["python_executes"] == 1
    del lib["python_executes"], py["python_executes"]
    assert lib == py
    assert lib["error"] is None and lib["deleted"] == [True, False]
    assert lib["b"] == [3.0] * 4 and lib["outs"] == [[3.0, 4.0, 5.0, 6.0], [0.0, 3.0, 6.0, 9.0]]


def test_threads_running_donated_loops_at_once():
    out = run_counted("""
        f = jax.jit(lambda p, k: (p * 0.5 + k, jnp.sum(p)), donate_argnums=0)
        f(jax.device_put(np.ones(32, np.float32), dev), jax.device_put(np.float32(1), dev))
        bad, finals = [], {}
        def work(t):
            p_host = np.arange(32, dtype=np.float32) * (t + 1)
            k = jax.device_put(np.float32(t), dev)
            p = jax.device_put(p_host, dev)
            olds = []
            for i in range(200):
                olds.append(p)
                p, s = f(p, k)
                # (Reading p itself would keep it: a numpy view of it.)
                if i % 25 == 0 and not np.isclose(float(s), p_host.sum(), rtol=1e-5):
                    bad.append((t, i))
                p_host = p_host * np.float32(0.5) + np.float32(t)
            if not all(o.is_deleted() for o in olds):
                bad.append((t, "not deleted"))
            finals[t] = np.array_equal(np.asarray(p), p_host)
        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        calls.clear()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        print(json.dumps({"bad": bad[:5], "finals": finals,
                          "python_executes": calls["LoadedExecutable_Execute"]}))
    """)
    assert out["bad"] == [] and out["finals"] == {str(t): True for t in range(4)}
    # f's 800 calls are the library's; only a few first runs (the reads'
    # small programs) reach Python.
    assert out["python_executes"] < 40, out["python_executes"]


def test_runs_inside_a_trace_are_recorded_by_python():
    out = run_counted("""
        import xla_gpu
        x = jax.device_put(np.arange(4, dtype=np.float32), dev)
        f = jax.jit(lambda v: jnp.exp(v))
        f(x)
        f(x)
        calls.clear()
        with xla_gpu.trace() as t:
            y = f(x)
        inside = calls["LoadedExecutable_Execute"]
        outside = [f(x) for _ in range(3)]
        print(json.dumps({"inside": inside, "outside": calls["LoadedExecutable_Execute"] - inside,
                          "events": len(t.events()),
                          "y": np.allclose(np.asarray(y), np.exp(np.arange(4)))}))
    """)
    assert out["inside"] == 1 and out["events"] > 0 and out["y"]
    assert out["outside"] == 0


def test_threads_dispatching_at_once_get_their_own_results():
    out = run_counted("""
        f = jax.jit(lambda v, k: jnp.tanh(v) * k + v)
        hosts = [np.arange(64, dtype=np.float32) / (t + 1) for t in range(4)]
        xs = [jax.device_put(h, dev) for h in hosts]
        ks = [jax.device_put(np.float32(t + 1), dev) for t in range(4)]
        f(xs[0], ks[0])
        bad = []
        def work(t):
            want = np.tanh(hosts[t]) * (t + 1) + hosts[t]
            for i in range(300):
                y = f(xs[t], ks[t])
                if i % 7 == 0:
                    y = f(y, ks[t]) - f(y, ks[t]) + y
                if not np.allclose(np.asarray(y), want, rtol=1e-5):
                    bad.append((t, i))
        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        calls.clear()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        print(json.dumps({"bad": bad[:5], "python_executes": calls["LoadedExecutable_Execute"]}))
    """)
    assert out["bad"] == []
    # Only first runs reach Python (the arithmetic's executables, made once
    # or a few times by racing threads), not the 1200 calls of f.
    assert out["python_executes"] < 50


def test_several_devices_each_run_where_their_arguments_live():
    out = run_counted("""
        devs = jax.devices("xla_gpu")
        f = jax.jit(lambda v: v * 2 + 1)
        res = {"n": len(devs)}
        for d in devs:
            x = jax.device_put(np.arange(3, dtype=np.float32) + d.id, d)
            ys = [f(x) for _ in range(3)]
            res[str(d.id)] = [np.asarray(ys[-1]).tolist(), ys[-1].devices() == {d}]
        # An argument on device 1 handed to device 0's executable: Python's error.
        x0 = jax.device_put(np.arange(3, dtype=np.float32), devs[0])
        x1 = jax.device_put(np.arange(3, dtype=np.float32), devs[1])
        g = jax.jit(lambda v: v - 1)
        g(x0)
        g(x0)
        e = next(o for o in list(P._objects.values()) if isinstance(o, P.Executable)
                 and o.host_run is not None and o.device is P._client().devices[0]
                 and "lambda" in o.name_text and o.num_outputs == 1)
        res["wrong_device"] = execute(e.addr, [handle_of(x1)], 1)
        print(json.dumps(res))
    """, extra_env={"XLA_GPU_NUM_DEVICES": "2"})
    assert out["n"] == 2
    assert out["0"] == [[1.0, 3.0, 5.0], True]
    assert out["1"] == [[3.0, 5.0, 7.0], True]
    assert "is on device 1, the executable runs it on 0" in out["wrong_device"], out


def test_destroyed_handles_leave_the_live_set():
    # Getters for a handle the library answers without the GIL (a result
    # it made, an executable) go to Python once it is destroyed, which
    # refuses it. jax still holds both: the process ends without its
    # teardown.
    out = run_counted("""
        import os
        x = jax.device_put(np.arange(4, dtype=np.float32), dev)
        f = jax.jit(lambda v: v + 1)
        f(x)
        gc.collect()
        y = f(x)
        [y_addr] = library_handles()
        e = library_executable("")
        res = {"before": [call("Buffer_Device", y_addr)[0] == P._client().devices[0].addr,
                          call("Executable_NumOutputs", e.view.addr)[0]]}
        calls.clear()
        call("Buffer_Destroy", y_addr)
        res["destroy_calls"] = calls["Buffer_Destroy"]
        res["buffer"] = call("Buffer_Device", y_addr)
        call("LoadedExecutable_Destroy", e.addr)
        res["executable"] = call("Executable_NumOutputs", e.view.addr)
        print(json.dumps(res), flush=True)
        os._exit(0)
    """)
    assert out["before"] == [True, 1] and out["destroy_calls"] == 0
    assert out["buffer"] == "PJRT_Buffer_Device: not a live xla_gpu Buffer handle"
    assert out["executable"] == "PJRT_Executable_NumOutputs: not a live xla_gpu executable handle"


# An output in column-major layout (a strided view of its buffer), a
# row-major one and a constant (a copy).
TRANSPOSED = """HloModule m, entry_computation_layout={(f32[4,8]{1,0}, f32[4,8]{1,0})->\
(f32[4,8]{1,0}, f32[4,8]{0,1}, f32[8]{0})}
ENTRY e {
  p = f32[4,8]{1,0} parameter(0)
  q = f32[4,8]{1,0} parameter(1)
  a = f32[4,8]{1,0} add(p, q)
  t = f32[4,8]{0,1} copy(a)
  c = f32[8]{0} constant({1,2,3,4,5,6,7,8})
  ROOT r = (f32[4,8]{1,0}, f32[4,8]{0,1}, f32[8]{0}) tuple(a, t, c)
}
"""


def test_the_runtimes_c_entry_and_what_it_says_of_its_outputs():
    # What the plugin's Execute is built on: HostRun.outputs() says which
    # results come back as the plugin hands them to jax (C-contiguous, of
    # the output's dtype and shape), and the C entry runs on an array of
    # arguments, refusing a wrong count of results before running.
    import ctypes

    import numpy as np

    import xla_gpu
    host_run = pytest.importorskip("xla_gpu.runtime._host_run")
    exe = xla_gpu.compile(TRANSPOSED, target="cpu")
    p = np.arange(32, dtype=np.float32).reshape(4, 8)
    q = np.full((4, 8), 0.5, np.float32)
    want = exe.run(p, q)
    run = exe._host_run
    assert isinstance(run, host_run.HostRun)
    f32 = np.dtype(np.float32)
    assert run.outputs() == ((f32, (4, 8), True), (f32, (4, 8), False), (f32, (8,), True))
    args = (ctypes.py_object * 2)(p, q)
    results = (ctypes.c_void_p * 3)()
    # ctypes releases the GIL around a foreign call; the entry needs it.
    entry = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p, ctypes.c_ssize_t,
                              ctypes.c_void_p, ctypes.c_ssize_t)(host_run.call_address())
    assert entry(run, ctypes.addressof(args), 2, ctypes.addressof(results), 2) == 1
    assert list(results) == [None, None, None]
    assert entry(run, ctypes.addressof(args), 1, ctypes.addressof(results), 3) == 1
    assert entry(run, ctypes.addressof(args), 2, ctypes.addressof(results), 3) == 0
    got = [ctypes.cast(r, ctypes.py_object).value for r in results]
    for r in results:   # the entry's references
        ctypes.pythonapi.Py_DecRef(ctypes.c_void_p(r))
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


# A donated step over parameters big enough that copying them would show:
# the output buffer is the donated input's memory on every call, on the
# library's path and on the Python slot's.
IN_PLACE = """
def sgd(params, grads):
    return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads), jnp.sum(grads[1])

STEP = jax.jit(sgd, donate_argnums=0)
COPYING = jax.jit(sgd)
rng = np.random.default_rng(1)
p_host = [rng.standard_normal(4096).astype(np.float32),
          rng.standard_normal((64, 33)).astype(np.float32)]
g_host = [rng.standard_normal(4096).astype(np.float32),
          rng.standard_normal((64, 33)).astype(np.float32)]
grads = [jax.device_put(g, dev) for g in g_host]

def memory(a):
    # The array behind a jax array's PJRT buffer.
    return P._objects[handle_of(a)].array

res = {"in_place_on": P.LIBRARY_IN_PLACE_DONATION}
params = [jax.device_put(p, dev) for p in p_host]
want = [jax.device_put(p, dev) for p in p_host]
shared, pointers = [], []
for i in range(6):
    before = [memory(p) for p in params]
    old_pointers = [p.unsafe_buffer_pointer() for p in params]
    params, s = STEP(params, grads)
    want, _ = COPYING(want, grads)
    shared.append([bool(np.shares_memory(b, memory(p))) for b, p in zip(before, params)])
    pointers.append([o == p.unsafe_buffer_pointer() for o, p in zip(old_pointers, params)])
    del before
res["shared"], res["pointers"] = shared, pointers
res["exact"] = all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(params, want))
res["values"] = [np.asarray(p).ravel()[:3].tolist() for p in params]
# The copying run it replaced (switched off): other memory, the same bits.
import xla_gpu.pjrt
xla_gpu.pjrt.set_in_place_donation(False)
copied = [jax.device_put(p, dev) for p in p_host]
copy_shared = []
for i in range(6):
    before = [memory(p) for p in copied]
    copied, _ = STEP(copied, grads)
    copy_shared += [bool(np.shares_memory(b, memory(p))) for b, p in zip(before, copied)]
    del before
xla_gpu.pjrt.set_in_place_donation(True)
res["copy_shared"] = any(copy_shared)
res["copy_exact"] = all(np.array_equal(np.asarray(a), np.asarray(b))
                        for a, b in zip(params, copied))
# Refusals copy: a numpy view still reading the input (it stays, unchanged),
# and a misaligned host array put on the device (the plugin's copy is
# aligned, so it is in place again).
viewed = jax.device_put(p_host[0], dev)
view = np.asarray(viewed)
out, _ = STEP([viewed, jax.device_put(p_host[1], dev)], grads)
res["viewed"] = [bool(np.shares_memory(view, memory(out[0]))), viewed.is_deleted(),
                 bool(np.array_equal(view, p_host[0]))]
raw = np.zeros(4096 + 1, np.float32)
raw[1:] = p_host[0]
odd = jax.device_put(raw[1:], dev)
res["odd_aligned"] = memory(odd).ctypes.data % 64 == 0
res["python_executes"] = calls["LoadedExecutable_Execute"]
print(json.dumps(res))
"""


def _in_place_run(extra_env=None) -> dict:
    return run_counted(IN_PLACE, extra_env)


def test_a_donated_step_writes_its_parameters_in_place():
    lib = _in_place_run()
    py = _in_place_run({"XLA_GPU_PJRT_LIBRARY_EXECUTE": "0"})
    assert lib["in_place_on"] and not py["in_place_on"]
    for out in (lib, py):
        # Every call: each new parameter is the donated one's memory.
        assert out["shared"] == [[True, True]] * 6, out["shared"]
        assert out["pointers"] == [[True, True]] * 6, out["pointers"]
        # Bit for bit the copying (undonated) step's results.
        assert out["exact"] and out["copy_exact"] and not out["copy_shared"]
        assert out["viewed"] == [False, False, True]
        assert out["odd_aligned"]
    assert lib["values"] == py["values"]
    # The library ran the donated calls (one first run per executable).
    assert lib["python_executes"] < py["python_executes"]


def test_the_runtimes_donating_c_entry_writes_flagged_arguments_in_place():
    # `call_donated_address`: the C entry with a flag per argument; a
    # flagged argument the program writes is its output's memory, an
    # unflagged one is copied (and left as it was).
    import ctypes

    import numpy as np

    import xla_gpu
    from xla_gpu.runtime.spec import aligned_empty
    host_run = pytest.importorskip("xla_gpu.runtime._host_run")
    exe = xla_gpu.compile(TRANSPOSED.replace(
        "HloModule m,", "HloModule m, input_output_alias={ {0}: (0, {}, may-alias) },"),
        target="cpu")
    q = np.full((4, 8), 0.5, np.float32)
    want = exe.run(np.arange(32, dtype=np.float32).reshape(4, 8), q)
    run = exe._host_run
    assert isinstance(run, host_run.HostRun)
    entry = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p, ctypes.c_ssize_t,
                              ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_char_p)(
        host_run.call_donated_address())
    for flags, in_place in ((b"\x01\x00", True), (b"\x00\x00", False), (None, False)):
        p = aligned_empty((4, 8), np.float32, 64)
        p[...] = np.arange(32, dtype=np.float32).reshape(4, 8)
        args = (ctypes.py_object * 2)(p, q)
        results = (ctypes.c_void_p * 3)()
        assert entry(run, ctypes.addressof(args), 2, ctypes.addressof(results), 3, flags) == 0
        got = [ctypes.cast(r, ctypes.py_object).value for r in results]
        for r in results:
            ctypes.pythonapi.Py_DecRef(ctypes.c_void_p(r))
        assert (got[0] is p) == in_place
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
        if not in_place:
            np.testing.assert_array_equal(p, np.arange(32, dtype=np.float32).reshape(4, 8))
