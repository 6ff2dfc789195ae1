"""xla_gpu as a jax backend: a PJRT C API plugin with platform name "xla_gpu".

jax finds this module through the `jax_plugins` entry point (pyproject.toml)
and calls `initialize()` the first time it looks for backends. That builds
the PJRT C API table (`_plugin`, Python over `xla_gpu.compile`), stores
it in libXlaGpuPjrt.so (whose `GetPjrtApi` jax's loader calls) and
registers the library with jax. Then

    JAX_PLATFORMS=xla_gpu python -c "import jax; print(jax.devices())"

runs unchanged jax programs through xla_gpu. This is the top layer of the
package: nothing else in xla_gpu imports it, and importing it imports
neither jax nor the compiler (`initialize()` does, lazily).

Scope: the target XLA_GPU_PJRT_TARGET=cpu|cuda|auto names (auto: cuda where
a GPU and a cubin compiler are usable, else cpu; chosen when jax makes the
client). cpu: one device or XLA_GPU_NUM_DEVICES=N of them; cuda: one
device, GPU 0, buffers in device memory. Synchronous execution, jaxlib
0.10.x (PJRT C API 0.112, declared in pjrt/xla_gpu_pjrt_abi.h). Donation,
jax's persistent compilation cache and cpu's LAPACK lowerings are switched
on for "xla_gpu" by
`_enable_jax_features` (private jax tables, patched only on jax 0.10.x).
Python callbacks (pure_callback, io_callback, jax.debug.print) on the cpu
target, lowered by `_callbacks`. Not yet: several GPUs, Python callbacks on
the cuda target.
"""
from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

__all__ = ["initialize", "library_path", "PLATFORM", "set_in_place_donation"]

PLATFORM = "xla_gpu"
logger = logging.getLogger(__name__)

# Below jax's cpu backend (priority 0): installing xla_gpu must not move
# every jax user's default device. JAX_PLATFORMS=xla_gpu or
# jax.devices("xla_gpu") select it; XLA_GPU_JAX_PRIORITY overrides.
_DEFAULT_PRIORITY = -100
_SUPPORTED_JAXLIB = "0.10."

_registered = False


def library_path() -> str:
    """libXlaGpuPjrt.so, the library jax loads (exports GetPjrtApi)."""
    from .. import native_dir
    return str(Path(native_dir()) / "lib" / "libXlaGpuPjrt.so")


def _priority() -> int:
    value = os.environ.get("XLA_GPU_JAX_PRIORITY", "")
    try:
        return int(value) if value else _DEFAULT_PRIORITY
    except ValueError:
        logger.warning("xla_gpu: XLA_GPU_JAX_PRIORITY=%r is not an integer; using %d",
                       value, _DEFAULT_PRIORITY)
        return _DEFAULT_PRIORITY


def _register() -> None:
    global _registered
    if _registered:
        return
    import ctypes

    import jaxlib
    from jax._src import xla_bridge

    version = getattr(jaxlib, "__version__", "?")
    if not version.startswith(_SUPPORTED_JAXLIB):
        logger.warning("xla_gpu: the jax plugin speaks jaxlib %sx's PJRT C API (0.112); "
                       "jaxlib %s is installed, so platform 'xla_gpu' is not registered "
                       "(pip install 'xla_gpu[jax]')", _SUPPORTED_JAXLIB, version)
        return
    from . import _topology  # noqa: F401 - registers its slots (topologies, PJRT_Compile)
    from ._plugin import api_table

    table = api_table()
    path = library_path()
    if Path(path).is_file():
        lib = ctypes.CDLL(path)
        lib.XlaGpuPjrtWrapApi.argtypes = [ctypes.c_void_p] * 5
        lib.XlaGpuPjrtWrapApi.restype = ctypes.c_void_p
        lib.XlaGpuPjrtSetApi.argtypes = [ctypes.c_void_p]
        lib.XlaGpuPjrtSetApi.restype = None
        py = ctypes.pythonapi
        hooks = [ctypes.cast(f, ctypes.c_void_p).value for f in
                 (py.PyGILState_Ensure, py.PyGILState_Release, py.PyErr_Fetch, py.PyErr_Restore)]
        wrapped = lib.XlaGpuPjrtWrapApi(table, *hooks)
        if not wrapped:
            raise RuntimeError(f"{path}: XlaGpuPjrtWrapApi refused the PJRT table")
        _enable_fast_paths(lib)
        lib.XlaGpuPjrtSetApi(wrapped)
        xla_bridge.register_plugin(PLATFORM, priority=_priority(), library_path=path)
    else:
        # A source tree without the native build: hand jax the table directly
        # (without the library's trampolines, a Python exception jaxlib has
        # set when it calls a slot can be lost: see pjrt/xla_gpu_pjrt.c).
        capsule_new = ctypes.pythonapi.PyCapsule_New
        capsule_new.restype = ctypes.py_object
        capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        xla_bridge.register_plugin(PLATFORM, priority=_priority(),
                                   c_api=capsule_new(table, b"pjrt_c_api", None))
    _registered = True
    _enable_jax_features()


def _enable_fast_paths(lib) -> None:
    """Lets the library answer the per-execute getters itself (see
    pjrt/xla_gpu_pjrt.c); without it (a library of an older build, a
    Python without the functions) every slot goes to Python, as before."""
    import ctypes

    from . import _plugin
    from ._plugin import fast_path_handles, use_memory_user_data

    enable = getattr(lib, "XlaGpuPjrtEnableFastPaths", None)
    py = ctypes.pythonapi
    # Py_IsFinalizing is public from Python 3.13; 3.11 and 3.12 export it
    # with a leading underscore.
    finalizing = getattr(py, "Py_IsFinalizing", None) or getattr(py, "_Py_IsFinalizing", None)
    if enable is None or finalizing is None:
        return
    enable.argtypes = [ctypes.c_void_p] * 7
    enable.restype = ctypes.c_int
    hooks = [ctypes.cast(f, ctypes.c_void_p).value for f in
             (py.PyLong_FromVoidPtr, py.PyDict_GetItem, py.PyDict_DelItem, py.Py_DecRef,
              finalizing)]
    if enable(*fast_path_handles(), *hooks) != 0:
        logger.debug("xla_gpu: the PJRT library's fast paths are off")
        return
    # Destroys on jaxlib's own threads run on the main thread (see
    # pjrt/xla_gpu_pjrt.c: taking the GIL there can end the process at exit).
    defer = getattr(lib, "XlaGpuPjrtEnableDeferredDestroys", None)
    if defer is not None:
        defer.argtypes = [ctypes.c_void_p] * 2
        defer.restype = ctypes.c_int
        defer(ctypes.cast(py.PyGILState_GetThisThreadState, ctypes.c_void_p).value,
              ctypes.cast(py.Py_AddPendingCall, ctypes.c_void_p).value)
    add, remove = (getattr(lib, name, None) for name in ("XlaGpuPjrtAddLive",
                                                          "XlaGpuPjrtRemoveLive"))
    if add is not None and remove is not None:
        _plugin.use_live_set(ctypes.cast(add, ctypes.c_void_p).value,
                             ctypes.cast(remove, ctypes.c_void_p).value)
    get_data = getattr(lib, "XlaGpuPjrtMemoryGetUserData", None)
    set_data = getattr(lib, "XlaGpuPjrtMemorySetUserData", None)
    if get_data is not None and set_data is not None:
        use_memory_user_data(ctypes.cast(get_data, ctypes.c_void_p).value,
                             ctypes.cast(set_data, ctypes.c_void_p).value)
    _enable_library_execute(lib)


def _enable_library_execute(lib) -> None:
    """Lets the library run the cpu target's Execute itself, through the
    runtime's C run path (see pjrt/xla_gpu_pjrt.c); without it (an older
    build of either, XLA_GPU_PJRT_LIBRARY_EXECUTE=0) Execute runs in
    Python, as before."""
    import ctypes

    from . import _plugin

    enable = getattr(lib, "XlaGpuPjrtEnableExecute", None)
    hooks = _plugin.execute_hooks()
    if enable is None or hooks is None or \
            os.environ.get("XLA_GPU_PJRT_LIBRARY_EXECUTE", "1") == "0":
        return
    py = ctypes.pythonapi
    enable.argtypes = [ctypes.c_void_p] * 6
    enable.restype = ctypes.c_int
    functions = [ctypes.cast(f, ctypes.c_void_p).value for f in
                 (py.PyDict_SetItem, py.Py_IncRef, py.PyContextVar_Get)]
    if enable(*hooks, *functions, id(None)) != 0:
        return
    _plugin.LIBRARY_EXECUTE = True
    # Donated parameters: the library consumes them as the Python slot does,
    # dropping a Buffer object's array by PyObject_SetAttr (an older build
    # without the function leaves such executables to Python).
    donation = getattr(lib, "XlaGpuPjrtEnableDonation", None)
    if donation is not None:
        donation.argtypes = [ctypes.c_void_p] * 2
        donation.restype = ctypes.c_int
        name = _plugin._keep_alive(sys.intern("_array"))
        if donation(ctypes.cast(py.PyObject_SetAttr, ctypes.c_void_p).value, id(name)) == 0:
            _plugin.LIBRARY_DONATION = True
            _enable_in_place_donation(lib)


def _enable_in_place_donation(lib) -> None:
    """Lets the library's Execute hand the run which donated arguments
    nothing else reads, so that the runtime writes them in place (their
    arrays become the aliased outputs); without it (an older build of
    either) donated arguments are copied in and their outputs copied out."""
    import ctypes

    from . import _plugin
    try:
        from ..runtime import _host_run
    except ImportError:
        return
    enable = getattr(lib, "XlaGpuPjrtEnableInPlaceDonation", None)
    address = getattr(_host_run, "call_donated_address", None)
    if enable is None or address is None:
        return
    enable.argtypes = [ctypes.c_void_p]
    enable.restype = ctypes.c_int
    if enable(address()) == 0:
        _plugin.LIBRARY_IN_PLACE_DONATION = True
        _plugin.IN_PLACE_SWITCH = lambda on: enable(address() if on else None)


def set_in_place_donation(on: bool) -> bool:
    """Whether the cpu target writes a donated argument nothing else reads
    in place (its array becoming the aliased output; the default), or
    copies it in and the output out as before: on both Execute paths (the
    library's and the Python slot). For benchmarks and debugging; results
    are the same either way. Returns the previous setting."""
    from . import _plugin
    previous = _plugin.IN_PLACE_DONATION
    _plugin.IN_PLACE_DONATION = bool(on)
    if _plugin.IN_PLACE_SWITCH is not None:
        _plugin.IN_PLACE_SWITCH(bool(on))
    return previous


def _enable_jax_features() -> None:
    """jax 0.10 turns features on by platform name, in private tables
    that know only its own platforms: argument donation (otherwise jax
    warns and drops it), the persistent compilation cache and cpu's LAPACK
    lowerings. Add "xla_gpu" to them, only on the jax version whose
    internals we read."""
    import jax
    if not jax.__version__.startswith(_SUPPORTED_JAXLIB):
        return
    from jax._src import compilation_cache
    from jax._src.interpreters import mlir

    _use_cpu_lowerings(mlir)
    from ._callbacks import install as install_python_callbacks
    install_python_callbacks(PLATFORM)
    donation = getattr(mlir, "_platforms_with_donation", None)
    if isinstance(donation, list) and PLATFORM not in donation:
        donation.append(PLATFORM)
    original = getattr(compilation_cache, "is_cache_used", None)
    if callable(original) and not getattr(original, "_xla_gpu", False):
        def is_cache_used(backend):
            if getattr(backend, "platform", None) == PLATFORM:
                return compilation_cache._is_cache_enabled()
            return original(backend)
        is_cache_used._xla_gpu = True
        compilation_cache.is_cache_used = is_cache_used


# Linear algebra that jax lowers to LAPACK calls on cpu and to nothing
# (or to HLO ops XLA expands: triangular-solve, cholesky) elsewhere. On the
# cpu target xla_gpu runs jaxlib's LAPACK kernels through its FFI
# (xla_gpu.ffi.jaxlib_targets), so these take cpu's lowerings, as XLA:CPU
# does; eig, eigh, schur and the rest have no other lowering at all.
CPU_LINALG_PRIMITIVES = frozenset({
    "cholesky", "eig", "eigh", "geqp3", "geqrf", "hessenberg", "householder_product",
    "lu", "ormqr", "schur", "svd", "triangular_solve", "tridiagonal", "tridiagonal_solve"})
# jax.debug.callback / jax.debug.print / checkify.debug_check: lowered per
# platform, cpu's through the Python callbacks that xla_gpu.pjrt._callbacks
# lowers for "xla_gpu".
CPU_CALLBACK_PRIMITIVES = frozenset({"debug_callback", "debug_print", "check"})
# A device_put to another memory inside a jitted function: jax states it
# (annotate_device_placement) only for the platforms it knows to have
# memories, gpu's and tpu's, and drops it elsewhere. xla_gpu's devices
# have the GPU's memories (device, pinned_host) and offload as XLA:GPU
# does, so device_put takes gpu's lowering.
GPU_MEMORY_PRIMITIVES = frozenset({"device_put"})


def _use_cpu_lowerings(mlir) -> None:
    from jax._src import checkify  # noqa: F401 - registers its `check` lowerings
    table = getattr(mlir, "_platform_specific_lowerings", None)
    if not hasattr(table, "get"):
        return
    ours = table.get(PLATFORM, {})
    for source, wanted in (("cpu", CPU_LINALG_PRIMITIVES | CPU_CALLBACK_PRIMITIVES),
                           ("cuda", GPU_MEMORY_PRIMITIVES)):
        for primitive, entry in list(table.get(source, {}).items()):
            if primitive.name in wanted and primitive not in ours:
                mlir.register_lowering(primitive, entry.rule, platform=PLATFORM,
                                       inline=entry.inline)


def initialize() -> None:
    """jax's plugin hook. Never raises: a plugin that cannot register must
    not break the user's jax (the failure is logged as a warning)."""
    try:
        _register()
    except Exception as exc:  # noqa: BLE001
        logger.warning("xla_gpu: could not register the jax plugin: %s: %s",
                       type(exc).__name__, exc)
