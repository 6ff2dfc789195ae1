"""libXlaGpuPjrt.so's fast paths: the getters jax calls around every
execute (executable counts, a result buffer's device, memory, type,
dimensions and size, its destruction, the completion event) are answered in
C from the handle's block, without entering Python; they must answer
exactly what the Python slots answer, and hand anything that is not a live
handle of the right kind to Python, which reports the error.

Each case runs in a fresh interpreter (jax's backends are process-global)
that counts the calls reaching the Python slots.
"""
import ctypes

import pytest
from slot_counts import run_counted

pytest.importorskip("jax")


def test_steady_state_execute_never_enters_python():
    out = run_counted("""
        x = jax.device_put(np.arange(16, dtype=np.float32), dev)
        f = jax.jit(lambda v: jnp.tanh(v) * 2 + 1)
        g = jax.jit(lambda a, b: (a + b, a * b))
        for _ in range(3):
            f(x).block_until_ready()
            jax.block_until_ready(g(x, x))
        gc.collect()
        calls.clear()
        for _ in range(50):
            y = f(x)
            p, q = g(x, x)
        jax.block_until_ready((y, p, q))
        del y, p, q
        gc.collect()
        print(json.dumps(dict(calls)))
    """)
    # 100 executes (the library's, after each executable's first run) and
    # everything around them (NumReplicas/NumPartitions x2, NumOutputs, the
    # completion event's OnReady and Destroy, each result's Device, Memory,
    # Memory_Kind and Destroy) stay in C.
    assert out == {}, out


# dtype, shape: ranks 0 to 3, zero-size shapes, sub-byte and 16-bit types.
CASES = [("float32", ()), ("float32", (0,)), ("int8", (3, 0, 2)), ("bool", (5,)),
         ("uint8", (2, 3)), ("float16", (4,)), ("int32", (2, 2, 2)), ("int64", (7,)),
         ("float64", (1, 3)), ("complex64", (2,)), ("bfloat16", (3,)), ("int4", (6,)),
         ("uint32", ())]


def test_buffer_getters_in_c_match_the_arrays():
    out = run_counted(f"""
        import ml_dtypes
        res = []
        calls.clear()
        for dtype, shape in {CASES!r}:
            dt = np.dtype(getattr(ml_dtypes, dtype, None) or dtype)
            host = (np.arange(int(np.prod(shape)), dtype=np.int64) % 3).astype(dt).reshape(shape)
            x = jax.device_put(host, dev)
            y = jax.jit(lambda v: v)(x)
            z = jax.jit(lambda v: jnp.reshape(v, (-1,)))(x)
            back = np.asarray(y)
            res.append([dtype, list(y.shape), str(y.dtype), list(back.shape), str(back.dtype),
                        bool(np.array_equal(back, host)), int(y.on_device_size_in_bytes()),
                        list(z.shape),
                        y.devices() == {{dev}}, y.sharding.memory_kind])
        print(json.dumps({{"res": res, "calls": dict(sorted(calls.items()))}}))
    """, extra_env={"JAX_ENABLE_X64": "1"})
    import ml_dtypes
    import numpy as np
    for (dtype, shape), got in zip(CASES, out["res"]):
        dt = np.dtype(getattr(ml_dtypes, dtype, None) or dtype)
        size = int(np.prod(shape)) * dt.itemsize
        assert got == [dtype, list(shape), dtype, list(shape), dtype, True, size,
                       [int(np.prod(shape))], True, "device"], got
    # The getters never reached Python: libXlaGpuPjrt.so answered them.
    getters = {"Buffer_ElementType", "Buffer_Dimensions", "Buffer_UnpaddedDimensions",
               "Buffer_OnDeviceSizeInBytes", "Buffer_Device", "Buffer_Memory", "Memory_Kind",
               "Buffer_IsDeleted", "Buffer_IsOnCpu", "Buffer_ReadyEvent", "Event_IsReady",
               "Event_Error", "Event_Destroy"}
    assert not getters & set(out["calls"]), {k: out["calls"][k] for k in getters & set(out["calls"])}


def test_fast_paths_refuse_what_is_not_a_live_handle():
    # Through jax's own table: a block that looks like a buffer's but is not
    # a live handle, a destroyed buffer, an executable asked as a buffer and
    # a buffer asked as an executable all go to Python, which reports them.
    out = run_counted("""
        lib = ctypes.CDLL(__import__("xla_gpu.pjrt").pjrt.library_path())
        lib.GetPjrtApi.restype = ctypes.c_void_p
        words = (ctypes.c_uint64 * (A.API_STRUCT_SIZE // 8)).from_address(lib.GetPjrtApi())
        def call(slot, *fields):
            args = (ctypes.c_uint64 * 8)(8 * 8, 0, *fields)
            err = A.SLOT_FN(words[5 + A.SLOTS.index(slot)])(ctypes.addressof(args))
            if not err:
                return list(args[3:5])
            msg = (ctypes.c_uint64 * 5)(40, 0, err)
            A.VOID_SLOT_FN(words[5 + A.SLOTS.index("Error_Message")])(ctypes.addressof(msg))
            return ctypes.string_at(msg[3], msg[4]).decode()
        x = jax.device_put(np.arange(6, dtype=np.float32).reshape(2, 3), dev)
        f = jax.jit(lambda v: v * 2)
        y = f(x).block_until_ready()
        buf = next(o for o in list(P._objects.values()) if isinstance(o, P.Buffer))
        exe = next(o for o in list(P._objects.values()) if isinstance(o, P.Executable))
        fake = (ctypes.c_uint64 * 13)(0, A.HANDLE_KIND.BUFFER, buf.device.addr, 0,
                                      ctypes.addressof(buf.dims), 2, 24, 11)
        dead = P.Buffer(np.zeros((4,), np.float32), buf.device)
        dead_addr = dead.addr
        calls.clear()
        res = {
            "live": call("Buffer_Dimensions", buf.addr),
            "live_calls": sum(calls.values()),
            "fake": call("Buffer_Dimensions", ctypes.addressof(fake)),
            "null": call("Buffer_Device", 0),
            "exe_as_buffer": call("Buffer_Memory", exe.addr),
            "buffer_as_exe": call("Executable_NumOutputs", buf.addr),
            "exe_outputs": call("Executable_NumOutputs", exe.view.addr),
        }
        gone = P.Buffer(np.zeros((2,), np.float32), buf.device)
        res["deleted_before"] = call("Buffer_IsDeleted", gone.addr)[0] & 0xFF
        res["ready_live"] = call("Buffer_ReadyEvent", gone.addr)[0] == P._READY_EVENT.addr
        res["on_cpu"] = call("Buffer_IsOnCpu", gone.addr)[0] & 0xFF
        call("Buffer_Delete", gone.addr)
        res["deleted_after"] = call("Buffer_IsDeleted", gone.addr)[0] & 0xFF
        res["ready_deleted"] = call("Event_Error", call("Buffer_ReadyEvent", gone.addr)[0])
        call("Buffer_Destroy", dead_addr)
        res["destroyed_gone"] = dead_addr not in P._objects
        res["dead"] = call("Buffer_OnDeviceSizeInBytes", dead_addr)
        res["calls"] = dict(calls)
        print(json.dumps(res))
    """)
    dims = out["live"]
    assert dims[1] == 2 and out["live_calls"] == 0
    assert out["fake"] == "PJRT_Buffer_Dimensions: not a live xla_gpu Buffer handle"
    assert out["null"] == "PJRT_Buffer_Device: not a live xla_gpu Buffer handle"
    assert out["exe_as_buffer"] == "PJRT_Buffer_Memory: not a live xla_gpu Buffer handle"
    assert out["buffer_as_exe"] == ("PJRT_Executable_NumOutputs: not a live xla_gpu "
                                    "executable handle")
    assert out["exe_outputs"][0] == 1
    assert out["deleted_before"] == 0 and out["deleted_after"] == 1
    assert out["ready_live"] and out["on_cpu"] == 1
    assert out["ready_deleted"] == "xla_gpu: the buffer was deleted"
    assert out["destroyed_gone"]
    assert out["dead"] == "PJRT_Buffer_OnDeviceSizeInBytes: not a live xla_gpu Buffer handle"
    # Only the refusals, the delete and the deleted buffer's error event
    # reached Python (the destroy and the live buffers' getters did not).
    assert not {"Buffer_Destroy", "Buffer_IsDeleted", "Buffer_IsOnCpu"} & set(out["calls"])
    assert out["calls"]["Buffer_Dimensions"] == 1
    assert out["calls"]["Buffer_ReadyEvent"] == 1 and out["calls"]["Buffer_Delete"] == 1


def test_deleted_and_donated_buffers_keep_their_lifetime():
    out = run_counted("""
        x = jax.device_put(np.arange(4, dtype=np.float32), dev)
        x.delete()
        res = {"deleted": x.is_deleted()}
        try:
            jax.jit(lambda v: v + 1)(x)
            res["use_after_delete"] = "ran"
        except Exception as exc:
            res["use_after_delete"] = str(exc)
        a = jax.device_put(np.arange(4, dtype=np.float32), dev)
        f = jax.jit(lambda v: v * 3, donate_argnums=0)
        b = f(a)
        res["donated_deleted"] = a.is_deleted()
        res["result"] = np.asarray(b).tolist()
        c = f(b)
        res["chained"] = np.asarray(c).tolist()
        res["b_deleted"] = b.is_deleted()
        # A numpy view keeps a donated buffer's array alive.
        d = jax.device_put(np.arange(3, dtype=np.float32), dev)
        view = np.asarray(d)
        e = f(d)
        res["view_kept"] = [view.tolist(), np.asarray(e).tolist()]
        # Dropping results frees their handles (Buffer_Destroy in C).
        calls.clear()
        n0 = sum(isinstance(o, P.Buffer) for o in list(P._objects.values()))
        outs = [jax.jit(lambda v: v + 1)(c) for _ in range(20)]
        n1 = sum(isinstance(o, P.Buffer) for o in list(P._objects.values()))
        del outs
        gc.collect()
        n2 = sum(isinstance(o, P.Buffer) for o in list(P._objects.values()))
        res["handles"] = [n1 - n0, n2 - n0]
        res["calls"] = dict(calls)
        print(json.dumps(res))
    """)
    assert out["deleted"] is True
    assert "deleted" in out["use_after_delete"]
    assert out["donated_deleted"] is True and out["result"] == [0.0, 3.0, 6.0, 9.0]
    assert out["chained"] == [0.0, 9.0, 18.0, 27.0] and out["b_deleted"] is True
    assert out["view_kept"] == [[0.0, 1.0, 2.0], [0.0, 3.0, 6.0]]
    assert out["handles"] == [20, 0]
    assert "Buffer_Destroy" not in out["calls"] and out["calls"]["LoadedExecutable_Execute"] == 20


def test_the_shared_ready_event_outlives_its_destroys():
    # Without the library (the Python table alone), the slots treat the
    # shared ready event as the C fast paths do: ready, no error, and a
    # destroy leaves it alive for the next execute.
    from xla_gpu.pjrt import _abi as A, _plugin as P
    table = P.api_table()
    words = (ctypes.c_uint64 * (A.API_STRUCT_SIZE // 8)).from_address(table)

    def slot(name, *fields):
        args = (ctypes.c_uint64 * 6)(48, 0, *fields)
        err = A.SLOT_FN(words[5 + A.SLOTS.index(name)])(ctypes.addressof(args))
        return err, args

    ready = P._READY_EVENT.addr
    assert slot("Event_Destroy", ready)[0] is None
    assert P._objects.get(ready) is P._READY_EVENT
    err, args = slot("Event_IsReady", ready)
    assert err is None and args[3] & 0xFF == 1
    assert slot("Event_Error", ready)[0] is None
    assert slot("Event_Await", ready)[0] is None


def test_memory_user_data_lives_in_the_library():
    out = run_counted("""
        import xla_gpu.pjrt as plugin
        lib = ctypes.CDLL(plugin.library_path())
        x = jax.device_put(np.arange(4, dtype=np.float32), dev)
        f = jax.jit(lambda v: v + 1)
        y = f(f(x))
        vtable = (ctypes.c_uint64 * (A.MEMORY_VTABLE.size // 8)).from_address(
            ctypes.addressof(P._MEMORY_VTABLE))
        get_ptr = vtable[A.MEMORY_VTABLE.get_user_data // 8]
        set_ptr = vtable[A.MEMORY_VTABLE.set_user_data // 8]
        res = {"get_in_lib": get_ptr == ctypes.cast(lib.XlaGpuPjrtMemoryGetUserData,
                                                    ctypes.c_void_p).value,
               "set_in_lib": set_ptr == ctypes.cast(lib.XlaGpuPjrtMemorySetUserData,
                                                    ctypes.c_void_p).value,
               # jaxlib's own data went to the library, not to Python.
               "python_data": [len(d.memory.user_data) for d in P._client().devices]}
        get, put = A.MEM_GET_FN(get_ptr), A.MEM_SET_FN(set_ptr)
        deleted = []
        deleter = A.DELETER_FN(lambda p: deleted.append(p))
        mem = P._client().devices[0].memory.addr
        key = ctypes.create_string_buffer(1)
        k = ctypes.addressof(key)
        put(mem, k, 1001, ctypes.cast(deleter, ctypes.c_void_p).value)
        res["first"] = get(mem, k)
        put(mem, k, 1002, ctypes.cast(deleter, ctypes.c_void_p).value)
        res["second"] = get(mem, k)
        put(mem, k, 1002, ctypes.cast(deleter, ctypes.c_void_p).value)   # the same: kept
        res["other_key"] = get(mem, k + 1)
        res["deleted"] = list(deleted)
        res["y"] = np.asarray(f(y)).tolist()
        print(json.dumps(res))
    """)
    assert out["get_in_lib"] and out["set_in_lib"]
    assert out["python_data"] == [0]
    assert out["first"] == 1001 and out["second"] == 1002 and out["other_key"] is None
    assert out["deleted"] == [1001]
    assert out["y"] == [3.0, 4.0, 5.0, 6.0]


# Calls a table entry on a thread of its own, which Python never sees (as
# jaxlib's thread pools call destroys), and waits for it.
_FOREIGN_THREAD_C = r"""
#include <pthread.h>
#include <stddef.h>
typedef void *(*entry_fn)(void *);
struct job { entry_fn fn; void *args; };
static void *run(void *p) {
  struct job *j = (struct job *)p;
  j->fn(j->args);
  return NULL;
}
int call_on_foreign_thread(void *fn, void *args) {
  struct job j = {(entry_fn)fn, args};
  pthread_t t;
  if (pthread_create(&t, NULL, run, &j) != 0) return -1;
  return pthread_join(t, NULL);
}
"""


def test_a_destroy_on_a_foreign_thread_runs_on_the_main_thread(tmp_path):
    """A destroy jaxlib calls on one of its own threads is queued and run
    on the interpreter's main thread: taking the GIL on such a thread as
    the interpreter shuts down ended the process (std::terminate inside
    jaxlib's executable destructor, about one exit in 25 under load)."""
    import shutil
    import subprocess
    cc = next((shutil.which(c) for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
    if cc is None:
        pytest.skip("no C compiler")
    src, so = tmp_path / "foreign.c", tmp_path / "foreign.so"
    src.write_text(_FOREIGN_THREAD_C)
    subprocess.run([cc, "-shared", "-fPIC", "-pthread", str(src), "-o", str(so)], check=True)
    out = run_counted(f"""
        import xla_gpu.pjrt as plugin
        threads = []
        _destroy = P._err_destroy
        def _recording(e):
            threads.append(threading.current_thread() is threading.main_thread())
            return _destroy(e)
        P._err_destroy = _recording
        helper = ctypes.CDLL({str(so)!r})
        helper.call_on_foreign_thread.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        api = ctypes.CDLL(plugin.library_path()).GetPjrtApi
        api.restype = ctypes.c_void_p
        table = (ctypes.c_uint64 * 3).from_address(api() + 40)  # Error_Destroy: slot 0
        errors = [P.Error(3, "deferred") for _ in range(3)]
        args = []
        for e in errors:
            a = (ctypes.c_uint64 * 3)(24, 0, e.addr)  # struct_size, extension_start, error
            args.append(a)
            assert helper.call_on_foreign_thread(table[0], ctypes.addressof(a)) == 0
        for _ in range(1000):                        # the main thread's pending call
            if len(threads) == 3:
                break
        print(json.dumps({{"threads": threads,
                          "released": [P._objects.get(e.addr) is None for e in errors]}}))
    """)
    assert out["threads"] == [True, True, True], out
    assert out["released"] == [True, True, True], out
