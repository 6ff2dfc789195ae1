"""A compiled whole program at run time: kernels, the thunk sequence, the
buffer assignment's allocations and the optimized HLO. numpy and
cuda-python only (never MLIR): `load_program(dir)` runs what
`ProgramExecutable.save(dir)` wrote on a machine without the compiler.

    exe = xla_gpu.compile(text)                   # a whole module
    loss, w1, w2 = exe.run(x, y, w1, w2)          # the entry's output leaves
    exe.thunks, exe.thunk_sequence_text(), exe.memory_analysis()
    exe.save("artifacts/mlp")
    xla_gpu.runtime.load("artifacts/mlp", expected_digest=exe.artifact_digest).run(...)

One execution: the arguments are checked (count, shape, dtype), the memory
the program needs is compared with what the target has (host physical
memory on cpu, free device memory on cuda) before anything is allocated,
then every allocation gets memory (parameters: the caller's array where no
thunk writes it, else a copy, unless the caller donated it: `run(donated=)`;
constants: loaded once with the program;
outputs and the temp allocation: fresh), the thunks run in order, and the
output leaves are returned (numpy arrays, or DeviceArrays on cuda with
`device_outputs=True`).

A program directory holds `program.json` (allocations, parameters,
outputs, thunks, kernel table, texts' file names), one folder per kernel
under `kernels/` (as `Executable.save` writes a kernel; the code that
several kernels share, once under `binaries/`), `constants.npz`,
`optimized.hlo`, `buffer-assignment.txt`, and `digests.json`.
"""

from __future__ import annotations

import ctypes
import io
import json
import math
import os
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .._ctypes_arrays import array_of
from .._readable_json import readable_json
from .._trace import current as current_trace, trace_file
from ..errors import (ArgumentError, ArtifactError, CudaUnavailableError, ResourceError,
                      UnsupportedError)
from .buffers import Allocation, token_value
from .spec import HostBufferPool, KernelSpec, _address, aligned_zeros
from . import collective_thunks  # noqa: F401  (registers the collectives' thunk kinds)
from .thunks import (ArrayRef, ExecutionContext, KernelThunk, Thunk, sequence_text,
                     thunk_from_dict, walk)

__all__ = ["ProgramExecutable", "KernelImage", "MemoryAnalysis", "load_program",
           "PROGRAM_FORMAT", "host_memory_bytes"]

# 2: kernels linked into one binary store it once (binaries/<n>.cubin|ptx,
# "binaries" in program.json); 3: so do cpu kernels linked into one shared
# object (binaries/<n>.so). This runtime reads 1 to 3.
PROGRAM_FORMAT = 3
_READ_FORMATS = (1, 2, 3)
_ALIGNMENT = 64
# Devices of one run at most (each is a thread of this process).
MAX_DEVICES = 4096
# The trace lanes of a profiled many-device run: device d records on
# DEVICE_LANE_BASE + d ("device d").
DEVICE_LANE_BASE = 1 << 29


@dataclass
class MemoryAnalysis:
    """jax's `compiled.memory_analysis()` fields, in bytes, as buffer
    assignment finds them (`xla_gpu.service`; the compiler adds
    `generated_code_size_in_bytes`, the kernels' size).
    `peak_memory_in_bytes` is arguments + outputs + temp - alias;
    `constant_size_in_bytes` the constants the executable carries."""
    temp_size_in_bytes: int = 0
    argument_size_in_bytes: int = 0
    output_size_in_bytes: int = 0
    alias_size_in_bytes: int = 0
    generated_code_size_in_bytes: int = 0
    host_temp_size_in_bytes: int = 0
    host_argument_size_in_bytes: int = 0
    host_output_size_in_bytes: int = 0
    host_alias_size_in_bytes: int = 0
    host_generated_code_size_in_bytes: int = 0
    constant_size_in_bytes: int = 0
    peak_memory_in_bytes: int = 0

    def to_dict(self) -> dict[str, int]:
        return dict(self.__dict__)

    @staticmethod
    def from_dict(data: dict[str, Any]) -> "MemoryAnalysis":
        known = MemoryAnalysis.__dataclass_fields__
        return MemoryAnalysis(**{k: int(v) for k, v in data.items() if k in known})


@dataclass
class KernelImage:
    """One compiled kernel: its spec and code (cubin/PTX on cuda, a host
    shared object on cpu, which may hold other kernels of the program:
    it has the `<name>_host` entries of `spec.name`). `jit` is an
    in-process fallback launcher for a cpu kernel that could not be linked
    into a shared object (never saved: such a program cannot be saved)."""
    spec: KernelSpec
    ptx: str | None = None
    cubin: bytes | None = None
    host_library: bytes | None = None
    jit: Any = None

    @property
    def code_size(self) -> int:
        return sum(len(x) for x in (self.ptx or "", self.cubin or b"", self.host_library or b""))

    def shared_binary(self) -> tuple[int, int, int] | None:
        """Which PTX / cubin / host shared object this kernel holds (None
        without any): kernels linked into one binary hold the same objects
        (`link` gives each image its group's, `load_program` each kernel
        its file's), so their identities tell the binaries apart without
        hashing them."""
        if self.ptx is None and self.cubin is None and self.host_library is None:
            return None
        return id(self.ptx), id(self.cubin), id(self.host_library)


def host_memory_bytes() -> int:
    """Physical memory of this machine (0 when unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


# -- kernel launchers ------------------------------------------------------------


class _JitLauncher:
    """A cpu-target kernel held by the JIT (no shared object)."""

    def __init__(self, host_kernel):
        self.host = host_kernel

    def launch(self, pointers: Sequence[int], stream=None) -> None:
        args = array_of(ctypes.c_void_p, pointers)
        slot = ctypes.c_void_p(ctypes.addressof(args))
        self.host._grid(array_of(ctypes.c_void_p, [ctypes.addressof(slot)]))


class _CudaLauncher:
    def __init__(self, image: KernelImage, module):
        from .cuda import CudaKernel
        self.kernel = CudaKernel(image.spec, module=module)

    def launch(self, pointers: Sequence[int], stream=None) -> None:
        self.kernel.launch(pointers, stream)


# -- the executable --------------------------------------------------------------


# Guards the first print of an executable's optimized HLO text.
_HLO_TEXT_LOCK = threading.Lock()


@dataclass
class ProgramExecutable:
    """A whole program. `run(*args)` returns the entry's output leaves in
    order (a tuple result gives its leaves, depth first). Token leaves
    have no bytes: any value may be passed for one, and a token output
    comes back as an empty byte array (buffers.token_value)."""
    name: str
    target: str
    arch: str
    allocations: list[Allocation]
    parameters: list[list[ArrayRef]]      # per entry parameter: its leaves
    parameter_shapes: list[str]           # as HLO prints them (messages)
    outputs: list[ArrayRef]               # the entry's output leaves
    thunks: list[Thunk]
    kernels: dict[str, KernelImage]
    constants: dict[int, np.ndarray]      # allocation -> its bytes (uint8)
    # The optimized module's text (`hlo_text`), or the module to print it
    # from when first asked for: few callers read it, and printing a
    # training step's module costs a compile tens of milliseconds.
    _hlo_text: str | None = field(default=None, repr=False)
    _hlo_module: Any = field(default=None, repr=False)
    original_text: str = ""               # what was compiled
    buffer_assignment: str = ""
    memory: MemoryAnalysis = field(default_factory=MemoryAnalysis)
    notes: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    version: str = ""
    command_buffers: bool = True
    # The compile that made it: {"kernels", "compiled", "cached"} (empty
    # for a loaded program).
    kernel_counts: dict[str, int] = field(default_factory=dict)
    # The devices the program runs on: one SPMD program, run by
    # `run_partitioned` on each (device d = replica * num_partitions +
    # partition) when there is more than one.
    num_replicas: int = 1
    num_partitions: int = 1
    _last_stats: dict[str, int] = field(default_factory=dict, repr=False)
    artifact_digest: str | None = None    # set by save() and load_program()
    _launchers: dict | None = field(default=None, repr=False)
    _device_constants: dict | None = field(default=None, repr=False)
    _device_pool: dict | None = field(default=None, repr=False)
    _host_program: Any = field(default=None, repr=False)
    _cpu_run_plan: "_CpuRunPlan | None" = field(default=None, repr=False)
    # Device -> the buffer pool of its temp and output allocations (runs on
    # many devices: each device has buffers of its own).
    _device_pools: dict = field(default_factory=dict, repr=False)
    # The C run path (xla_gpu.runtime._host_run.HostRun): None until the
    # first cpu run, False where the program cannot take it.
    _host_run: Any = field(default=None, repr=False)
    _stats_from_host_run: bool = field(default=False, repr=False)
    _written: set | None = field(default=None, repr=False)
    _lock: Any = field(default_factory=threading.RLock, repr=False)
    # Custom-call target -> handler(ctx, thunk), resolved when the program
    # is made (compiled or loaded): see _bind_custom_calls.
    _custom_call_handlers: dict | None = field(default=None, repr=False)
    # The parameters and outputs without their token leaves (buffers.
    # token_ref), what the run paths below see; set in __post_init__.
    _array_parameters: list = field(default_factory=list, init=False, repr=False)
    _array_outputs: list = field(default_factory=list, init=False, repr=False)
    _parameter_numbers: list = field(default_factory=list, init=False, repr=False)
    _has_tokens: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        self._split_tokens()
        self._bind_custom_calls()

    def _split_tokens(self) -> None:
        """Tokens hold no bytes (XLA gives them no buffer): a parameter all
        of whose leaves are tokens takes no array, a token leaf of a tuple
        parameter is dropped from it, and token outputs are put back into
        the results after the run (`_arrays_only`, `_with_tokens`)."""
        self._array_parameters, self._parameter_numbers = [], []
        for i, refs in enumerate(self.parameters):
            arrays = [r for r in refs if not r.is_token]
            if arrays or not refs:
                self._array_parameters.append(arrays)
                self._parameter_numbers.append(i)
        self._array_outputs = [r for r in self.outputs if not r.is_token]
        self._has_tokens = len(self._array_outputs) != len(self.outputs) or any(
            r.is_token for refs in self.parameters for r in refs)

    def _bind_custom_calls(self) -> None:
        """Binds every custom-call target to the handler registered for it
        now, as XLA binds a custom-call thunk's handler when it emits the
        thunk: unregistering the target or registering another handler
        under its name afterwards does not change what this program calls.
        A target with no handler now refuses to run (naming it)."""
        from . import custom_calls
        from .thunks import CustomCallThunk
        handlers: dict[str, Any] = {}
        for thunk in walk(self.thunks):
            if isinstance(thunk, CustomCallThunk) and thunk.target not in handlers:
                handlers[thunk.target] = custom_calls.lookup(thunk.target, self.target) or \
                    custom_calls.unbound(thunk.target, self.target)
        self._custom_call_handlers = handlers

    # -- views ---------------------------------------------------------------
    @property
    def hlo_text(self) -> str:
        """The optimized HLO module's text."""
        if self._hlo_text is None:
            with _HLO_TEXT_LOCK:   # (two threads asking print it once)
                if self._hlo_text is None:
                    from ..hlo.printer import module_to_text
                    module = self._hlo_module
                    self._hlo_text = "" if module is None else module_to_text(module)
                    self._hlo_module = None
                    if module is not None:
                        # Printed, the module is done with (nothing else
                        # holds it): unlinked, it is freed now, not left as
                        # cyclic garbage.
                        module.release()
        return self._hlo_text

    def as_text(self) -> str:
        """The optimized HLO module (jax's `compiled.as_text()`)."""
        return self.hlo_text

    def thunk_sequence_text(self) -> str:
        return sequence_text(self.thunks)

    def buffer_assignment_text(self) -> str:
        return self.buffer_assignment

    def memory_analysis(self) -> MemoryAnalysis:
        return self.memory

    @property
    def num_kernels(self) -> int:
        return len(self.kernels)

    @property
    def stats(self) -> dict[str, int]:
        """What the last run did: kernel launches, copies, memsets, gemms,
        loop iterations, ... (by ExecutionContext.stats' names)."""
        if self._stats_from_host_run:
            from .host_executor import STATS
            return {name: value for name, value in zip(STATS, self._host_run.counters())
                    if value}
        return self._last_stats

    @stats.setter
    def stats(self, value: dict[str, int]) -> None:
        self._stats_from_host_run = False
        self._last_stats = value

    def kernel_launches(self) -> int:
        """Kernel launches of one run (loops counted from the last run)."""
        return int(self.stats.get("kernels", 0))

    # -- running -------------------------------------------------------------
    def _launcher_table(self) -> dict:
        if self._launchers is None:
            table = {}
            # Kernels linked into one binary share it, loaded once (a cuda
            # module, a host shared object).
            loaded: dict[tuple[int, int, int], Any] = {}
            for kid, image in self.kernels.items():
                binary = image.shared_binary()
                what = f"kernel '{image.spec.name}'"
                if self.target == "cuda":
                    from .cuda import CudaModule
                    if binary not in loaded:
                        loaded[binary] = CudaModule(cubin=image.cubin, ptx=image.ptx, what=what)
                    table[kid] = _CudaLauncher(image, loaded[binary])
                elif image.host_library is not None:
                    # Each times one host thread against block ranges on
                    # several and keeps the faster (a short kernel loses by
                    # splitting).
                    from .host_kernel import HostKernel, load_library
                    if binary not in loaded:
                        loaded[binary] = load_library(image.host_library, what)
                    table[kid] = HostKernel.in_library(image.spec, loaded[binary])
                elif image.jit is not None:
                    table[kid] = _JitLauncher(image.jit)
                else:
                    raise ArtifactError(f"kernel {image.spec.name}: no host code for the cpu "
                                        "target (no kernel.so)")
            self._launchers = table
        return self._launchers

    def _check_arity(self, args: Sequence[Any]) -> None:
        if len(args) != len(self.parameters):
            shapes = ", ".join(self.parameter_shapes)
            raise ArgumentError(f"program '{self.name}' takes {len(self.parameters)} "
                                f"argument{'s' if len(self.parameters) != 1 else ''} "
                                f"({shapes}), got {len(args)}")

    def _arrays_only(self, args: Sequence[Any]) -> list[Any]:
        """`args` without what was passed for token leaves (any value: a
        token has no bytes to read)."""
        self._check_arity(args)
        out: list[Any] = []
        for i, (arg, refs) in enumerate(zip(args, self.parameters)):
            tokens = {k for k, r in enumerate(refs) if r.is_token}
            if not tokens:
                out.append(arg)
            elif len(tokens) < len(refs):
                flat = _flatten_leaves(arg)
                if len(flat) != len(refs):
                    raise ArgumentError(f"argument {i}: expected a tuple of {len(refs)} "
                                        f"leaves ({self.parameter_shapes[i]}), got "
                                        f"{len(flat)}")
                out.append([a for k, a in enumerate(flat) if k not in tokens])
        return out

    def _with_tokens(self, results: Sequence[Any]) -> tuple:
        """The results with a token value at each token output."""
        arrays = iter(results)
        return tuple(token_value() if ref.is_token else next(arrays) for ref in self.outputs)

    def _flatten_arguments(self, args: Sequence[Any]) -> list[Any]:
        if not self._has_tokens:
            self._check_arity(args)
        leaves = []
        for i, arg, refs in zip(self._parameter_numbers, args, self._array_parameters):
            if len(refs) == 1 and not isinstance(arg, (tuple, list)):
                leaves.append((f"argument {i}", arg, refs[0]))
                continue
            flat = _flatten_leaves(arg)
            if len(flat) != len(refs):
                raise ArgumentError(f"argument {i}: expected a tuple of {len(refs)} arrays "
                                    f"({self.parameter_shapes[i]}), got {len(flat)}")
            leaves += [(f"argument {i}[{k}]", a, r) for k, (a, r) in enumerate(zip(flat, refs))]
        return leaves

    @staticmethod
    def _check_leaf(label: str, arg: Any, ref: ArrayRef, device_ok: bool) -> Any:
        if device_ok and hasattr(arg, "__cuda_array_interface__") and \
                not isinstance(arg, np.ndarray):
            iface = arg.__cuda_array_interface__
            shape, dtype = tuple(iface["shape"]), np.dtype(iface["typestr"])
            value = arg
        else:
            value = np.asarray(arg)
            shape, dtype = value.shape, value.dtype
        if tuple(shape) != tuple(ref.dims):
            raise ArgumentError(f"{label}: expected shape {list(ref.dims)} ({ref.describe()}), "
                                f"got {list(shape)}")
        if dtype not in (ref.dtype, ref.storage_dtype) and not (
                dtype.kind == "V" and dtype.itemsize == ref.dtype.itemsize):
            raise ArgumentError(f"{label}: expected dtype {ref.element_type} ({ref.dtype}), "
                                f"got {dtype}")
        return value

    def _written_allocations(self) -> set[int]:
        """Allocations some thunk writes (computed once)."""
        if self._written is None:
            self._written = {s.allocation for t in walk(self.thunks)
                             for s, written in t.buffer_uses() if written}
        return self._written

    def required_bytes(self) -> int:
        """Memory one execution allocates (parameters that must be copied,
        outputs, temporaries; constants are loaded with the program)."""
        written = self._written_allocations()
        total = 0
        for a in self.allocations:
            if a.memory_space and self.target != "cpu":
                continue   # offloaded values: pinned host memory, not the device's
            if a.kind in ("temp", "output", "thread_local"):
                total += a.size
            elif a.kind == "parameter" and a.index in written:
                total += a.size
        total += sum(ref.nbytes for ref in self._array_outputs)   # results handed back
        return total

    def check_memory(self) -> None:
        need = self.required_bytes()
        if self.target == "cpu":
            have = host_memory_bytes()
            where = "host memory"
        else:
            from .cuda import _check, _driver, _ensure_context
            _ensure_context()
            have, _ = _check("cuMemGetInfo", _driver().cuMemGetInfo())
            have = int(have)
            where = "free device memory"
        if have and need > have:
            raise ResourceError(f"program '{self.name}' needs {need} bytes "
                                f"({need / 2**30:.2f} GiB) per execution but the "
                                f"{where} is {have} bytes ({have / 2**30:.2f} GiB)")

    def run(self, *args, stream=None, device_outputs: bool = False,
            timeout: float | None = None, profile: str | os.PathLike | None = None,
            donated: Sequence[int] | None = None, **unknown) -> tuple:
        """Runs the program. cpu: numpy in, numpy out. cuda: numpy or device
        arrays (`__cuda_array_interface__`) in; numpy out, or DeviceArrays
        with `device_outputs=True`; `stream` is a CUstream (default: the
        legacy default stream; command buffers capture on a private one).
        `timeout` (seconds): a run still going then is stopped between
        iterations of a while loop with DeadlineExceededError; Ctrl-C
        stops a run the same way (KeyboardInterrupt). The executable stays
        usable after either. `profile`: a file to write this run's trace
        to (Chrome trace-event JSON: every thunk, see
        `xla_gpu.runtime.profile`); runs inside `xla_gpu.trace(...)` or
        under XLA_GPU_PROFILE are recorded into that trace.

        An argument's array is never written, unless the caller gives it up:
        `donated` lists parameter numbers whose arguments the caller
        donates (as jax's `donate_argnums`; the PJRT plugin passes the
        donated buffers nothing else reads). On the cpu target, where the
        program writes such a parameter's allocation (an input/output
        alias that buffer assignment kept) and the argument is a writeable
        C-contiguous numpy array of the parameter's dtype, 64-byte aligned
        (what a pooled buffer gives the kernels), holding that parameter
        alone, the run writes the argument in place instead of copying it
        in, and the output read from that allocation is the argument's
        array itself (or a view of it) instead of a copy: XLA's aliased
        output is the donated buffer. The results are those of the copying
        run; the argument's contents afterwards are the output's. An
        argument whose memory another argument shares is copied. Other
        donated arguments, and every argument on the cuda target, are
        copied as without `donated`."""
        if unknown:  # an ArgumentError, worded as Python words the TypeError
            raise ArgumentError(f"run() got an unexpected keyword argument "
                                f"'{next(iter(unknown))}'")
        if self.num_devices > 1:
            raise ArgumentError(
                f"program '{self.name}' runs on {self.num_devices} devices "
                f"({self.num_replicas} replica(s) x {self.num_partitions} partition(s)): "
                "run it with run_partitioned(per_device_args), one argument list per "
                "device; global arrays go to a program compiled from annotated (unpartitioned) "
                "HLO, which xla_gpu's SPMD partitioner splits")
        gives = self._donated_leaves(donated) if donated is not None else None
        trace = current_trace()
        if profile is None and trace is None:
            return self._run_leaves(args, stream, device_outputs, timeout, None, gives)
        with trace_file(profile) as own:
            from .profile import RunProfiler
            profiler = RunProfiler(own if own is not None else trace, self.name, self.target)
            return self._run_leaves(args, stream, device_outputs, timeout, profiler, gives)

    def _donated_leaves(self, donated: Any) -> frozenset[int] | None:
        """`run(donated=...)`'s parameter numbers as the positions of their
        array leaves among all parameters' leaves (what `_run_cpu` counts);
        None when no leaf is given up."""
        if isinstance(donated, (str, bytes)) or not isinstance(donated, (Sequence, set,
                                                                          frozenset)):
            raise ArgumentError(f"run(donated=...): expected a sequence of parameter numbers, "
                                f"got {type(donated).__name__}")
        wanted = set()
        for p in donated:
            if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or \
                    not 0 <= p < len(self.parameters):
                raise ArgumentError(f"run(donated=...): {p!r} is not a parameter number of "
                                    f"program '{self.name}' (it takes "
                                    f"{len(self.parameters)})")
            wanted.add(int(p))
        leaves, k = set(), 0
        for number, refs in zip(self._parameter_numbers, self._array_parameters):
            if number in wanted:
                leaves.update(range(k, k + len(refs)))
            k += len(refs)
        return frozenset(leaves) or None

    def _run_leaves(self, args, stream, device_outputs, timeout, profiler,
                    donated=None) -> tuple:
        """`run` on the arguments, token parameters taken out and token
        outputs put back."""
        if self._has_tokens:
            return self._with_tokens(self._run_arrays(
                self._arrays_only(args), stream, device_outputs, timeout, profiler, donated))
        return self._run_arrays(args, stream, device_outputs, timeout, profiler, donated)

    def _run_arrays(self, args: Sequence[Any], stream, device_outputs: bool,
                    timeout: float | None, profiler=None,
                    donated: frozenset[int] | None = None) -> tuple:
        """`run` on the array parameters' arguments (tokens taken out);
        `donated`: the leaves the caller gives up (`_donated_leaves`)."""
        deadline = _deadline(timeout)
        if self.target == "cpu" and stream is None and not device_outputs and \
                profiler is None:
            fast = self._host_run
            if fast is None:
                fast = self._make_host_run()
            if fast:
                if donated is None:
                    results = fast(*args) if deadline is None else \
                        fast(*args, deadline_ns=deadline)
                else:
                    results = fast(*args, deadline_ns=deadline,
                                   donated=_donation_flags(args, donated))
                if results is not NotImplemented:
                    self._stats_from_host_run = True
                    return results
            values = self._cpu_plan().fast_arguments(args)
            if values is not None:
                return self._run_cpu(values, deadline, donated=donated)
        leaves = self._flatten_arguments(args)
        if self.target == "cpu" and (stream is not None or device_outputs):
            raise ArgumentError("stream= and device_outputs= are options of the cuda target")
        checked = [(label, self._check_leaf(label, a, ref, self.target == "cuda"), ref)
                   for label, a, ref in leaves]
        if self.target == "cpu":
            # The run plan checks the memory once (host memory does not change).
            return self._run_cpu([value for _, value, _ in checked], deadline, profiler,
                                 donated=donated)
        self.check_memory()
        return self._run_cuda(checked, stream, device_outputs, deadline, profiler)

    def _native_program(self):
        """The thunk sequence encoded for the native executor (built on the
        first run; None when the program runs from Python)."""
        if self._host_program is None:
            from .host_executor import host_program
            with self._lock:
                if self._host_program is None:
                    self._host_program = host_program(self.thunks, self._launcher_table()) \
                        or False
        return self._host_program or None

    def _custom_call_lookup(self) -> Callable[[str], Any]:
        return self._custom_call_handlers.get

    def _parameter_allocation(self) -> dict[int, list[tuple[ArrayRef, int]]]:
        by_alloc: dict[int, list] = {}
        flat = [ref for refs in self._array_parameters for ref in refs]
        for k, ref in enumerate(flat):
            by_alloc.setdefault(ref.slice.allocation, []).append((ref, k))
        return by_alloc

    def _make_host_run(self):
        """The program's C run path (built once), False where it has none:
        no C extension or native executor here, thunks that run from
        Python, tuple parameters, or outputs that need converting."""
        with self._lock:
            if self._host_run is None:
                native = self._native_program()
                self._host_run = False if native is None else \
                    self._cpu_plan().host_run(self, native) or False
            return self._host_run

    def _cpu_plan(self) -> "_CpuRunPlan":
        with self._lock:
            if self._cpu_run_plan is None:
                self._cpu_run_plan = _CpuRunPlan(self)
            return self._cpu_run_plan

    def _run_cpu(self, values: Sequence[Any], deadline_ns: int | None = None,
                 profiler=None, device=None, donated: frozenset[int] | None = None) -> tuple:
        """One execution on the host; `values` are the parameter leaves,
        checked. With the native executor and no Python thunk, only the
        allocations' addresses are needed, not numpy views of them. A
        profiled run goes through the thunks in Python, each one timed.
        `device`: one device of a many-device run (its own buffers, its
        side of the rendezvous; its counters go there, not to `stats`).
        `donated`: the leaves the caller gives up; those `_written_in_place`
        accepts are the memory of their allocation (see `run`)."""
        plan = self._cpu_plan()
        native = self._native_program() if profiler is None else None
        pool = plan.pool if device is None else device.pool
        fill = _debug_fill()
        bases = list(plan.bases)
        views = list(plan.buffers)
        results = list(plan.result_arrays)
        for index, size, typed, slot in plan.pooled:
            buffer, bases[index], result = pool.take(index, size, typed)
            views[index] = buffer
            if slot is not None:
                results[slot] = result
            if fill is not None:
                buffer.fill(fill)
        need_views = native is None or bool(native.callbacks)
        in_place: dict[int, np.ndarray] = {}   # allocation -> the donated array
        if donated and plan.donatable:
            in_place = _written_in_place(plan, values, donated)
        for index, size, users, zero_copy in plan.parameters:
            if zero_copy:
                ref, k = users[0]
                array = values[k]
                if array.dtype != ref.storage_dtype or not array.flags.c_contiguous:
                    array = np.ascontiguousarray(_to_storage(array, ref))
                    values[k] = array   # held until the run ends
                if array.size:
                    address = _address(array)
                    if address % 16 == 0:
                        bases[index] = address
                        if need_views or index in plan.viewed_allocations:
                            views[index] = array.reshape(-1).view(np.uint8)
                        continue
            array = in_place.get(index)
            if array is not None:
                bases[index] = _address(array)
                views[index] = array.reshape(-1).view(np.uint8)
                continue
            buffer = aligned_zeros((size,), np.uint8, _ALIGNMENT)
            views[index], bases[index] = buffer, buffer.ctypes.data
            for ref, k in users:
                _write_host(buffer, ref, values[k])
        start = time.perf_counter()
        if native is not None and not native.callbacks and device is None:
            self.stats = native.run_on(bases, deadline_ns)
        else:
            ctx = ExecutionContext("cpu", views, self._launcher_table(),
                                   custom_calls=self._custom_call_lookup(), bases=bases)
            ctx.deadline_ns = deadline_ns
            if device is not None:
                ctx.collectives = device.endpoint
                device.communicator.running(device.endpoint.device, ctx.cancel)
            try:
                if profiler is not None:
                    ctx.profiler = profiler
                    profiler.run(self.thunks, ctx)
                elif native is not None:
                    native.run(ctx)
                else:
                    for thunk in self.thunks:
                        thunk.execute(ctx)
            finally:
                if device is not None:
                    device.communicator.running(device.endpoint.device, None)
            if device is None:
                self.stats = dict(ctx.stats)
            else:
                device.stats = dict(ctx.stats)
        if device is None:
            self.timings["last_run"] = time.perf_counter() - start
        for slot, ref, copy in plan.viewed_outputs:
            array = in_place.get(ref.slice.allocation)
            if array is not None:
                # The aliased output is the donated array's memory: the
                # array itself where the output is exactly it.
                copy = False
                if ref.slice.offset == 0 and ref.is_row_major and array.dtype == ref.dtype \
                        and array.shape == tuple(ref.dims):
                    results[slot] = array
                    continue
            view = ref.logical_from_physical(np.ndarray(
                ref.physical_dims, ref.storage_dtype, buffer=views[ref.slice.allocation],
                offset=ref.slice.offset))
            if view.dtype != ref.dtype:
                view = np.array(view, copy=True).astype(ref.dtype, copy=False)
            elif copy:
                view = np.array(view, copy=True)
            results[slot] = view
        return tuple(results)

    # -- many devices -----------------------------------------------------------
    @property
    def num_devices(self) -> int:
        return self.num_replicas * self.num_partitions

    def run_partitioned(self, per_device_args: Sequence[Sequence[Any]], *,
                        timeout: float | None = None,
                        profile: str | os.PathLike | None = None,
                        communicator: str | None = None,
                        **unknown) -> list[tuple]:
        """Runs the program on each of its num_replicas x num_partitions
        devices at once (the cpu target's emulated devices: a thread and a
        set of buffers each). `per_device_args[d]` are device d's
        arguments (d = replica * num_partitions + partition), as `run`
        takes them; returns, per device, its output leaves (a tuple).

        The collectives meet in a rendezvous made for the run
        (`runtime.communicator`). `timeout` (seconds, default 60): how long
        a device waits at a collective for the others. Nothing hangs: when
        a device fails, every device waiting for it (or arriving later
        where it is awaited) fails with an error naming it and the
        collective; a wait past `timeout`, or Ctrl-C, stops every device.
        The run then raises the failing device's own error, or a
        CollectiveError (CollectiveTimeoutError) whose `device_errors`
        hold what each device raised. `profile`: a trace file, as `run`'s;
        each device records on a lane of its own ("device d").

        `communicator="mpi"` (under `mpiexec -n K`): this process runs the
        devices d with d % K == its rank, the collectives across ranks go
        through MPI (`runtime.mpi.run_ranks`); `per_device_args` may then
        hold this rank's devices' arguments only; returns theirs.

        On the cuda target: one device per GPU, collectives through NCCL.
        A one-device program runs as `run` does (a one-rank clique); more
        devices than GPUs are refused (NCCL allows one rank per GPU:
        NcclError), N devices on N GPUs are not run yet (UnsupportedError)."""
        if unknown:
            raise ArgumentError(f"run_partitioned() got an unexpected keyword argument "
                                f"'{next(iter(unknown))}'")
        if communicator is not None:
            if communicator != "mpi":
                raise ArgumentError(f"run_partitioned: communicator must be None (this "
                                    f"process's threads) or 'mpi', got {communicator!r}")
            if profile is not None:
                raise ArgumentError("run_partitioned: profile= is not taken with "
                                    "communicator='mpi'")
            from .mpi import run_ranks
            return run_ranks(self, per_device_args, timeout=timeout)
        from .communicator import DEFAULT_TIMEOUT, describe_devices
        if timeout is None:
            timeout = DEFAULT_TIMEOUT
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or \
                not math.isfinite(timeout) or timeout <= 0:
            raise ArgumentError(f"run_partitioned: timeout must be a positive number of "
                                f"seconds, got {timeout!r}")
        n = self.num_devices
        devices = describe_devices(self.num_replicas, self.num_partitions)
        if isinstance(per_device_args, (str, bytes, np.ndarray)) or \
                not isinstance(per_device_args, Sequence) or len(per_device_args) != n:
            got = len(per_device_args) if isinstance(per_device_args, Sequence) else \
                type(per_device_args).__name__
            raise ArgumentError(f"run_partitioned: program '{self.name}' runs on {devices}: "
                                f"it takes {n} argument lists (one per device), got {got}")
        if self.target == "cuda":
            return self._run_partitioned_cuda(per_device_args, profile)
        values = []
        for d, args in enumerate(per_device_args):
            if isinstance(args, (str, bytes, np.ndarray)) or not isinstance(args, Sequence):
                raise ArgumentError(f"run_partitioned: device {d}: expected a list of "
                                    f"arguments, got {type(args).__name__}")
            try:
                values.append(self._checked_leaves(args))
            except ArgumentError as e:
                raise ArgumentError(f"device {d}: {e}") from None
        self._check_memory_of(n)
        with trace_file(profile) as own:
            trace = own if own is not None else current_trace()
            return self._run_devices(values, float(timeout), trace)

    def _run_partitioned_cuda(self, per_device_args, profile) -> list[tuple]:
        """run_partitioned on the cuda target: one device per GPU (device d
        on GPU d), collectives through NCCL. One device runs as `run` does
        (a one-rank NCCL clique). More devices than GPUs would put several
        NCCL ranks on one GPU, which NCCL refuses (NcclError, before
        anything runs)."""
        n = self.num_devices
        args = per_device_args[0]
        if n == 1:
            if isinstance(args, (str, bytes, np.ndarray)) or not isinstance(args, Sequence):
                raise ArgumentError(f"run_partitioned: device 0: expected a list of "
                                    f"arguments, got {type(args).__name__}")
            return [self.run(*args, profile=profile)]
        from .cuda import device_count
        from .nccl import check_one_rank_per_gpu
        gpus = device_count()
        if gpus == 0:
            raise CudaUnavailableError(f"program '{self.name}' runs on {n} devices of the "
                                       "cuda target, one per GPU, but there is no GPU")
        check_one_rank_per_gpu([d % gpus for d in range(n)],
                               f"program '{self.name}' runs on {n} devices but this machine "
                               f"has {gpus} GPU(s): ")
        raise UnsupportedError(
            f"run_partitioned on the cuda target over {n} GPUs: the cuda runtime runs on GPU "
            "0 only (per-GPU contexts, device buffers and kernel modules are not "
            "implemented yet); NCCL cliques over several GPUs are (runtime.nccl)")

    def _checked_leaves(self, args: Sequence[Any]) -> list[Any]:
        """The array leaves of one device's arguments, checked."""
        if self._has_tokens:
            args = self._arrays_only(args)
        leaves = self._flatten_arguments(args)
        return [self._check_leaf(label, a, ref, False) for label, a, ref in leaves]

    def _check_memory_of(self, devices: int) -> None:
        """A run on `devices` devices needs that many executions' memory
        at once: refused before anything is allocated when the host's is
        smaller."""
        self._cpu_plan()   # one execution's check
        need, have = self.required_bytes() * devices, host_memory_bytes()
        if have and need > have:
            raise ResourceError(f"program '{self.name}' needs {need} bytes "
                                f"({need / 2**30:.2f} GiB) to run on {devices} devices but "
                                f"the host memory is {have} bytes ({have / 2**30:.2f} GiB)")

    def _pool_of_device(self, device: int) -> HostBufferPool:
        with self._lock:
            pool = self._device_pools.get(device)
            if pool is None:
                pool = self._device_pools[device] = HostBufferPool()
            return pool

    def _run_devices(self, values: list[list[Any]], timeout: float, trace) -> list[tuple]:
        from .communicator import Communicator, DeviceRun
        n = self.num_devices
        communicator = Communicator(self.num_replicas, self.num_partitions, timeout)
        runs = [DeviceRun(communicator, d, self._pool_of_device(d)) for d in range(n)]
        profilers = [None] * n
        if trace is not None:
            from .profile import RunProfiler
            profilers = [RunProfiler(trace, self.name, self.target, lane=DEVICE_LANE_BASE + d,
                                     lane_name=f"device {d}") for d in range(n)]
        # Built once, before the devices' threads race to build them.
        self._launcher_table()
        self._native_program()
        start = time.perf_counter()
        try:
            results = communicator.run_devices(
                lambda d: self._run_cpu(values[d], None, profilers[d], runs[d]),
                f"program '{self.name}' on {n} devices")
        finally:
            self.timings["last_run"] = time.perf_counter() - start
        self.stats = runs[0].stats
        if self._has_tokens:
            return [self._with_tokens(r) for r in results]
        return list(results)

    def _device_constant_table(self) -> dict[int, Any]:
        if self._device_constants is None:
            from .cuda import DeviceArray
            self._device_constants = {i: DeviceArray.from_host(data)
                                      for i, data in self.constants.items()}
        return self._device_constants

    def _device_buffer(self, index: int, size: int):
        """Device memory of allocation `index` kept between runs (temps,
        outputs and parameter copies): the addresses stay the same, so a
        recorded command buffer replays without being recorded again. The
        host allocation of offloaded values (memory space 5) is pinned host
        memory."""
        from .cuda import DeviceArray, PinnedHostBuffer
        if self._device_pool is None:
            self._device_pool = {}
        held = self._device_pool.get(index)
        if held is None or held.nbytes < size:
            if self.allocations[index].memory_space:
                held = PinnedHostBuffer(size)
            else:
                held = DeviceArray((max(size, 1),), np.uint8)
            self._device_pool[index] = held
        return held

    def _run_cuda(self, checked, stream, device_outputs: bool,
                  deadline_ns: int | None = None, profiler=None) -> tuple:
        from . import cuda
        from .cuda import DeviceArray, _check, _driver, _ensure_context
        _ensure_context()
        cu = _driver()
        handle = cuda.stream_handle(stream) if hasattr(cuda, "stream_handle") else \
            int(stream or 0)
        with self._lock:
            launchers = self._launcher_table()
            for launcher in launchers.values():   # load before any graph capture
                launcher.kernel._load()
            constants = self._device_constant_table()
            keep: list[Any] = []
            buffers: list[int | None] = [None] * len(self.allocations)
            for alloc in self.allocations:
                if alloc.kind == "constant":
                    held = constants.get(alloc.index)
                    buffers[alloc.index] = held.ptr if held is not None else None
                elif alloc.kind != "parameter":
                    buffers[alloc.index] = self._device_buffer(alloc.index, alloc.size).ptr
            written = self._written_allocations()
            for index, users in self._parameter_allocation().items():
                alloc = self.allocations[index]
                ref0, k0 = users[0]
                value = checked[k0][1]
                is_device = hasattr(value, "__cuda_array_interface__") and \
                    not isinstance(value, np.ndarray)
                if len(users) == 1 and index not in written and is_device and \
                        ref0.is_row_major:
                    buffers[index] = int(value.__cuda_array_interface__["data"][0])
                    continue
                memory = self._device_buffer(index, alloc.size)
                buffers[index] = memory.ptr
                for ref, k in users:
                    arg = checked[k][1]
                    if hasattr(arg, "__cuda_array_interface__") and \
                            not isinstance(arg, np.ndarray):
                        if ref.is_row_major:
                            if ref.nbytes:
                                _check("cuMemcpyDtoDAsync", cu.cuMemcpyDtoDAsync(
                                    memory.ptr + ref.slice.offset,
                                    int(arg.__cuda_array_interface__["data"][0]),
                                    ref.nbytes, handle))
                            continue
                        arg = _device_to_host(arg)   # relayout on the host
                    host = np.ascontiguousarray(ref.physical_from_logical(
                        _to_storage(arg, ref)))
                    keep.append(host)
                    if ref.nbytes:
                        _check("cuMemcpyHtoDAsync", cu.cuMemcpyHtoDAsync(
                            memory.ptr + ref.slice.offset, host.ctypes.data, ref.nbytes,
                            handle))
            from . import gemm as _gemm
            ctx = ExecutionContext("cuda", buffers, launchers, stream=handle,
                                   custom_calls=self._custom_call_lookup(), gemm=_gemm)
            ctx.deadline_ns = deadline_ns
            start = time.perf_counter()
            if profiler is not None:
                ctx.profiler = profiler
                profiler.run(self.thunks, ctx)
            else:
                for thunk in self.thunks:
                    thunk.execute(ctx)
            self.timings["last_issue"] = time.perf_counter() - start
            self.stats = dict(ctx.stats)
            results = []
            fresh = DeviceArray.group([(ref.physical_dims, ref.storage_dtype)
                                       for ref in self._array_outputs])
            for ref, out in zip(self._array_outputs, fresh):
                out.copy_from_device(ctx.pointer(ref.slice), handle)
                if device_outputs and ref.is_row_major:
                    results.append(out)
                    continue
                host = np.array(ref.logical_from_physical(out.to_host(handle)))
                if device_outputs:
                    results.append(DeviceArray.from_host(np.ascontiguousarray(host), handle))
                else:
                    results.append(host.astype(ref.dtype, copy=False))
            _check("cuStreamSynchronize", cu.cuStreamSynchronize(handle))
            if profiler is not None:
                profiler.finish_gpu(start)
            del keep
            return tuple(results)

    def time(self, *args, iterations: int = 10, warmup: int = 1) -> float:
        """Seconds per run (wall clock, arguments in host memory)."""
        for _ in range(warmup):
            self.run(*args)
        start = time.perf_counter()
        for _ in range(iterations):
            self.run(*args)
        return (time.perf_counter() - start) / iterations

    # -- saving --------------------------------------------------------------
    def manifest(self) -> dict[str, Any]:
        return {
            "format": PROGRAM_FORMAT, "kind": "program", "name": self.name,
            "target": self.target, "arch": self.arch, "version": self.version,
            "command_buffers": self.command_buffers,
            "allocations": [a.to_dict() for a in self.allocations],
            "parameters": [[r.to_dict() for r in refs] for refs in self.parameters],
            "parameter_shapes": list(self.parameter_shapes),
            "outputs": [r.to_dict() for r in self.outputs],
            "thunks": [t.to_dict() for t in self.thunks],
            "kernels": sorted(self.kernels),
            "constants": sorted(self.constants),
            "memory": self.memory.to_dict(),
            "notes": list(self.notes),
            "num_replicas": self.num_replicas, "num_partitions": self.num_partitions,
        }

    def _shared_binaries(self) -> dict[str, int]:
        """Kernel id -> binary number, for the kernels whose PTX / cubin
        another kernel has too (linked into one): saved once, under
        binaries/<number>."""
        by_code: dict[tuple[int, int], list[str]] = {}
        for kid, image in sorted(self.kernels.items()):
            binary = image.shared_binary()
            if binary is not None:
                by_code.setdefault(binary, []).append(kid)
        shared = [kids for kids in by_code.values() if len(kids) > 1]
        return {kid: number for number, kids in enumerate(shared) for kid in kids}

    def save(self, directory: str | os.PathLike) -> Path:
        """Writes the program directory `load_program` reads (never through
        a link planted in it) and returns its path; sets `artifact_digest`,
        which pins it: `load_program(dir, expected_digest=...)`."""
        from .artifact import write_artifact
        self.artifact_digest = write_artifact(directory, self.artifact_files())
        return Path(directory)

    def artifact_files(self) -> dict[str, bytes]:
        """The files of the program directory `save` writes (digests.json
        aside), by relative name."""
        binaries = self._shared_binaries()
        manifest = self.manifest()
        if binaries:
            manifest["binaries"] = binaries
        files: dict[str, bytes] = {
            "program.json": readable_json(manifest).encode(),
            "optimized.hlo": self.hlo_text.encode(),
            "buffer-assignment.txt": self.buffer_assignment.encode(),
            "thunk-sequence.txt": self.thunk_sequence_text().encode(),
        }
        if self.original_text:
            files["original.hlo"] = self.original_text.encode()
        stream = io.BytesIO()
        np.savez(stream, **{f"a{i}": data for i, data in self.constants.items()})
        files["constants.npz"] = stream.getvalue()
        for kid, image in self.kernels.items():
            base = f"kernels/{kid}/"
            files[base + "kernel.json"] = image.spec.to_json().encode()
            if kid in binaries:
                number = binaries[kid]
                if image.ptx is not None:
                    files[f"binaries/{number}.ptx"] = image.ptx.encode()
                if image.cubin is not None:
                    files[f"binaries/{number}.cubin"] = image.cubin
                if image.host_library is not None:
                    files[f"binaries/{number}.so"] = image.host_library
                continue
            if image.ptx is not None:
                files[base + "kernel.ptx"] = image.ptx.encode()
            if image.cubin is not None:
                files[base + "kernel.cubin"] = image.cubin
            if image.host_library is not None:
                files[base + "kernel.so"] = image.host_library
            elif self.target == "cpu":
                raise ArtifactError(f"kernel {image.spec.name} has no shared object (no "
                                    "linker when it was compiled): the program cannot be saved")
        return files


def _deadline(timeout: Any) -> int | None:
    """`run(timeout=seconds)` as a time.monotonic_ns() deadline."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or \
            not math.isfinite(timeout) or timeout <= 0:
        raise ArgumentError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return time.monotonic_ns() + max(1, int(timeout * 1e9))


def _debug_fill() -> int | None:
    """XLA_GPU_DEBUG_FILL=<byte>: the byte temp and output buffers are
    filled with before a run (the tests set it, so that a kernel reading
    memory nothing wrote gives garbage rather than the zeros it would
    happen to find; device memory is not zeroed either)."""
    value = os.environ.get("XLA_GPU_DEBUG_FILL")
    if not value:
        return None
    try:
        byte = int(value, 0)
    except ValueError:
        raise ArgumentError(f"XLA_GPU_DEBUG_FILL must be a byte value, got {value!r}") from None
    if not 0 <= byte <= 255:
        raise ArgumentError(f"XLA_GPU_DEBUG_FILL must be a byte value, got {value!r}")
    return byte


class _CpuRunPlan:
    """What every cpu run of one program repeats, worked out once: the
    allocations that come from the buffer pool, the constants' buffers, how
    each parameter allocation is filled (the caller's array itself when one
    parameter fills it, nothing writes it, and it is row-major at offset 0),
    which outputs are returned as they are, and the memory check; it holds
    the buffer pool of the temp and output allocations."""

    def __init__(self, exe: "ProgramExecutable"):
        exe.check_memory()   # the same on every run: host memory does not change
        self.pool = HostBufferPool()
        written = exe._written_allocations()
        count = len(exe.allocations)
        self.buffers: list[np.ndarray | None] = [None] * count
        self.bases: list[int] = [0] * count
        for alloc in exe.allocations:
            constant = exe.constants.get(alloc.index) if alloc.kind == "constant" else None
            if constant is not None:
                self.buffers[alloc.index] = constant
                self.bases[alloc.index] = constant.ctypes.data
        self.parameters = []
        # Parameter allocations a donated argument may be (see `run`):
        # allocation -> the leaf that fills it alone, which the program
        # writes, and which one output at most reads (two would share the
        # argument's memory).
        self.donatable: dict[int, int] = {}
        self._donatable_dtypes: dict[int, np.dtype] = {}
        readers = Counter(ref.slice.allocation for ref in exe._array_outputs)
        for index, users in exe._parameter_allocation().items():
            ref0 = users[0][0]
            zero_copy = (len(users) == 1 and index not in written and ref0.is_row_major
                         and ref0.slice.offset == 0)
            size = exe.allocations[index].size
            self.parameters.append((index, size, users, zero_copy))
            if len(users) == 1 and index in written and ref0.is_row_major and \
                    ref0.slice.offset == 0 and ref0.nbytes == size and size and \
                    readers[index] <= 1:
                self.donatable[index] = users[0][1]
                self._donatable_dtypes[index] = ref0.storage_dtype
        # Arguments passed as plain arrays: (shape, storage dtype) per
        # parameter; None when a parameter is a tuple (the checked path).
        self.simple = None
        if all(len(refs) == 1 for refs in exe._array_parameters):
            self.simple = [(tuple(refs[0].dims), refs[0].storage_dtype)
                           for refs in exe._array_parameters]
        # An output that fills an output allocation alone, row-major from
        # its start in the dtype users get, is returned as it is: the
        # buffer pool hands out that allocation as a typed array, the
        # run's own (no view made, no copy). Other outputs are views of
        # their allocation, copied when the allocation is shared.
        sharing = Counter(ref.slice.allocation for ref in exe._array_outputs)
        typed: dict[int, tuple[int, tuple, np.dtype]] = {}
        self.viewed_outputs: list[tuple[int, ArrayRef, bool]] = []
        for slot, ref in enumerate(exe._array_outputs):
            alloc = exe.allocations[ref.slice.allocation]
            alone = alloc.kind == "output" and sharing[alloc.index] == 1
            if alone and ref.is_row_major and ref.slice.offset == 0 and \
                    ref.storage_dtype == ref.dtype and ref.nbytes <= alloc.size:
                typed[alloc.index] = (slot, ref.physical_dims, ref.dtype)
            else:
                self.viewed_outputs.append((slot, ref, not alone))
        # Allocations the outputs above are read from.
        self.viewed_allocations = {ref.slice.allocation for _, ref, _ in self.viewed_outputs}
        self.result_arrays: list[np.ndarray | None] = [None] * len(exe._array_outputs)
        self.pooled: list[tuple[int, int, Any, int | None]] = []
        for alloc in exe.allocations:
            if alloc.kind not in ("constant", "parameter"):
                slot, dims, dtype = typed.get(alloc.index, (None, None, None))
                self.pooled.append((alloc.index, alloc.size,
                                    None if slot is None else (dims, dtype), slot))

    def host_run(self, exe: "ProgramExecutable", native) -> Any:
        """This plan as a `_host_run.HostRun` over `native`'s command
        stream; None where the C path cannot run the program the way
        `_run_cpu` does (the extension is missing, Python thunks, tuple
        parameters, a parameter allocation filled from a transposed
        array, or an output in another dtype than its buffer)."""
        try:
            from ._host_run import HostRun
        except ImportError:
            return None
        if native.callbacks or self.simple is None:
            return None
        parameters = []
        copied: dict[int, int] = {}   # parameter allocation -> bytes copied into it
        for index, size, users, zero_copy in self.parameters:
            for ref, k in users:
                if not ref.is_row_major:
                    return None
                parameters.append((k, (index, zero_copy, ref.slice.offset, ref.nbytes,
                                       ref.storage_dtype, tuple(ref.dims),
                                       self.donatable.get(index) == k)))
                if not zero_copy:
                    copied[index] = copied.get(index, 0) + ref.nbytes
        if sorted(k for k, _ in parameters) != list(range(len(self.simple))):
            return None
        parameters = [entry for _, entry in sorted(parameters, key=lambda item: item[0])]
        pools = [(index, size, True, False, -1 if slot is None else slot,
                  None if typed is None else typed[1], () if typed is None else typed[0])
                 for index, size, typed, slot in self.pooled]
        # Copied parameters get pooled buffers too, zeroed when the
        # arguments do not cover them (the Python path's fresh zeros).
        pools += [(index, exe.allocations[index].size, False,
                   covered < exe.allocations[index].size, -1, None, ())
                  for index, covered in copied.items()]
        from .gemm import element_strides
        views = []
        for slot, ref, copy in self.viewed_outputs:
            if ref.storage_dtype != ref.dtype:
                return None
            views.append((slot, ref.slice.allocation, ref.slice.offset, copy, ref.dtype,
                          tuple(ref.dims),
                          tuple(s * ref.dtype.itemsize for s in element_strides(ref))))
        constants = [(i, array) for i, array in enumerate(self.buffers) if array is not None]
        addresses, keep = native.entry_points()
        from .thunks import ThunkError
        return HostRun(*addresses, (*keep, *(array for _, array in constants)), ThunkError,
                       len(self.bases), constants, parameters, pools, views,
                       len(exe._array_outputs))

    def donated_dtype(self, index: int) -> np.dtype:
        """The storage dtype of donatable allocation `index`'s parameter."""
        return self._donatable_dtypes[index]

    def fast_arguments(self, args: Sequence[Any]) -> list[np.ndarray] | None:
        """`args` as they are when every one is a numpy array of its
        parameter's shape and storage dtype; None otherwise (the caller
        then checks them one by one and reports what is wrong)."""
        simple = self.simple
        if simple is None or len(args) != len(simple):
            return None
        for arg, (shape, dtype) in zip(args, simple):
            if type(arg) is not np.ndarray or arg.shape != shape or arg.dtype != dtype:
                return None
        return list(args)


def _donation_flags(args: Sequence[Any], donated: frozenset[int]) -> bytes:
    """HostRun's `donated=`: a byte per argument, 1 where the caller gives
    it up and no other argument's memory overlaps it (that one is copied,
    as `_written_in_place` decides for the Python path)."""
    flags = bytearray(len(args))
    shared = _overlapping(args, donated)
    for k in donated:
        if k < len(args) and k not in shared:
            flags[k] = 1
    return bytes(flags)


def _byte_range(value: Any) -> tuple[int, int] | None:
    """The bytes a numpy array's elements span, [lo, hi); None for an
    empty array or anything else."""
    if not isinstance(value, np.ndarray) or not value.size:
        return None
    lo = hi = value.__array_interface__["data"][0]
    for dim, stride in zip(value.shape, value.strides):
        if stride < 0:
            lo += (dim - 1) * stride
        else:
            hi += (dim - 1) * stride
    return lo, hi + value.itemsize


def _overlapping(values: Sequence[Any], donated: frozenset[int]) -> set[int]:
    """The donated positions whose value is not a numpy array or whose
    bytes overlap another value's (by address range, one sort: a training
    step passes many arrays)."""
    ranges = []
    bad = set()
    for i, value in enumerate(values):
        span = _byte_range(value)
        if span is None:
            if i in donated:
                bad.add(i)
            continue
        ranges.append((span[0], span[1], i))
    ranges.sort()
    reach, holder = -1, -1   # the furthest end so far and whose it is
    for lo, hi, i in ranges:
        if lo < reach:       # overlaps an earlier range: both are shared
            bad.update((i, holder))
        if hi > reach:
            reach, holder = hi, i
    return bad & set(donated)


def _written_in_place(plan: "_CpuRunPlan", values: Sequence[Any],
                      donated: frozenset[int]) -> dict[int, np.ndarray]:
    """The donated leaves a run writes in place, by allocation: the
    plan's donatable allocations whose argument is a writeable, C-contiguous
    numpy array of the storage dtype, aligned as a pooled buffer, that no
    other argument overlaps (the C path, ffi/host_run.c, decides the same)."""
    out = {}
    for index, k in plan.donatable.items():
        if k not in donated:
            continue
        array = values[k]
        if type(array) is not np.ndarray or not array.flags.c_contiguous or \
                not array.flags.writeable or array.dtype != plan.donated_dtype(index) or \
                _address(array) % _ALIGNMENT:
            continue
        out[index] = array
    if out:
        shared = _overlapping(values, frozenset(plan.donatable[i] for i in out))
        out = {i: a for i, a in out.items() if plan.donatable[i] not in shared}
    return out


def _flatten_leaves(arg: Any) -> list[Any]:
    """The leaves of a (nested) tuple or list argument, depth first."""
    flat: list[Any] = []
    stack = [arg]
    while stack:
        item = stack.pop()
        if isinstance(item, (tuple, list)):
            stack.extend(reversed(item))
        else:
            flat.append(item)
    return flat


def _to_storage(value: np.ndarray, ref: ArrayRef) -> np.ndarray:
    value = np.asarray(value)
    if value.dtype == ref.storage_dtype:
        return value
    if value.dtype == ref.dtype:
        # Sub-byte integers: ml_dtypes keeps an int4 / int2 in the low bits
        # of its byte (-2 is 0x0e), the kernels sign-extend it to a whole
        # byte (0xfe): convert the values, never reinterpret the bytes.
        return value.astype(ref.storage_dtype)
    if value.dtype.kind == "V":
        return value.view(ref.storage_dtype)
    return value.astype(ref.storage_dtype)


def _write_host(buffer: np.ndarray, ref: ArrayRef, value: Any) -> None:
    dest = np.ndarray(ref.physical_dims, ref.storage_dtype,
                      buffer=buffer[ref.slice.offset:ref.slice.offset + ref.nbytes])
    dest[...] = ref.physical_from_logical(_to_storage(value, ref))


def _device_to_host(arg) -> np.ndarray:
    from .cuda import _check, _driver
    iface = arg.__cuda_array_interface__
    out = np.empty(tuple(iface["shape"]), np.dtype(iface["typestr"]))
    if out.nbytes:
        cu = _driver()
        _check("cuMemcpyDtoH", cu.cuMemcpyDtoH(out.ctypes.data, int(iface["data"][0]),
                                               out.nbytes))
    return out


# -- loading ---------------------------------------------------------------------


_PROGRAM_FILES = frozenset({"program.json", "optimized.hlo", "original.hlo",
                            "buffer-assignment.txt", "thunk-sequence.txt",
                            "constants.npz"})
_KERNEL_FILES = frozenset({"kernel.json", "kernel.ptx", "kernel.cubin", "kernel.so"})


def _program_file(name: str) -> bool:
    parts = name.split("/")
    return name in _PROGRAM_FILES or (
        len(parts) == 3 and parts[0] == "kernels" and parts[2] in _KERNEL_FILES) or (
        re.fullmatch(r"binaries/\d{1,6}\.(ptx|cubin|so)", name) is not None)


def load_program(directory: str | os.PathLike, *, expected_digest: str | None = None,
                 trusted: bool = False) -> ProgramExecutable:
    """Reads a program directory (`program.json`), verified before anything
    runs: only the program's own file names, regular files within size
    limits, every file against digests.json (pinned by `expected_digest`:
    the `artifact_digest` that save set), every kernel's manifest against
    CUDA's launch limits, every buffer slice a thunk touches and every
    output and parameter view inside its allocation, every constant the
    size of its allocation. Raises ArtifactError otherwise. Loading a
    program runs its kernels' code in this process, so a load that is not
    pinned must say `trusted=True` (SECURITY.md). Its custom
    calls are bound here, to the handlers registered (`xla_gpu.ffi`) when
    it is loaded, and keep them; a target with no handler then fails when
    the program runs."""
    from .artifact import read_artifact, validate_spec
    data, digest = read_artifact(directory, expected_digest, allowed=_program_file,
                                 required="program.json", trusted=trusted)
    directory = Path(directory)
    try:
        m = json.loads(data["program.json"])
        if m.get("format") not in _READ_FORMATS or m.get("kind") != "program":
            raise ArtifactError(f"{directory}: program format {m.get('format')!r}, "
                                f"this runtime reads {PROGRAM_FORMAT}")
        kernels = {}
        binaries = m.get("binaries", {})
        if not isinstance(binaries, dict) or not all(
                isinstance(n, int) and not isinstance(n, bool) for n in binaries.values()):
            raise ArtifactError(f"{directory}: program.json: 'binaries' is not a map of "
                                "kernel ids to binary numbers")
        ptx_texts: dict[str, str] = {}   # one str per shared binary
        for kid in m["kernels"]:
            base = f"kernels/{kid}/"
            spec = KernelSpec.from_json(data[base + "kernel.json"].decode())
            if kid in binaries:
                stem = f"binaries/{binaries[kid]}"
                if not any(stem + suffix in data for suffix in (".ptx", ".cubin", ".so")):
                    raise ArtifactError(f"{directory}: kernel {kid} names {stem}, which "
                                        "holds no .ptx, .cubin or .so")
                if stem + ".ptx" in data and stem not in ptx_texts:
                    ptx_texts[stem] = data[stem + ".ptx"].decode()
                # The kernels of one binary share its bytes (read once):
                # the runtime loads it once.
                kernels[kid] = KernelImage(spec, ptx=ptx_texts.get(stem),
                                           cubin=data.get(stem + ".cubin"),
                                           host_library=data.get(stem + ".so"))
                continue
            kernels[kid] = KernelImage(
                spec, ptx=data[base + "kernel.ptx"].decode() if base + "kernel.ptx" in data
                else None, cubin=data.get(base + "kernel.cubin"),
                host_library=data.get(base + "kernel.so"))
        with np.load(io.BytesIO(data["constants.npz"])) as npz:
            constants = {int(i): np.ascontiguousarray(npz[f"a{i}"]) for i in m["constants"]}
        program = ProgramExecutable(
            name=m["name"], target=m["target"], arch=m["arch"],
            allocations=[Allocation.from_dict(a) for a in m["allocations"]],
            parameters=[[ArrayRef.from_dict(r) for r in refs] for refs in m["parameters"]],
            parameter_shapes=list(m["parameter_shapes"]),
            outputs=[ArrayRef.from_dict(r) for r in m["outputs"]],
            thunks=[thunk_from_dict(t) for t in m["thunks"]],
            kernels=kernels, constants=constants,
            _hlo_text=data.get("optimized.hlo", b"").decode(),
            original_text=data.get("original.hlo", b"").decode(),
            buffer_assignment=data.get("buffer-assignment.txt", b"").decode(),
            memory=MemoryAnalysis.from_dict(m.get("memory", {})),
            notes=list(m.get("notes", [])), version=str(m.get("version", "")),
            command_buffers=bool(m.get("command_buffers", True)),
            num_replicas=_device_count(m, "num_replicas", directory),
            num_partitions=_device_count(m, "num_partitions", directory))
    except ArtifactError:
        raise
    except RecursionError:
        raise ArtifactError(f"{directory}: malformed program (program.json nests too "
                            "deeply)") from None
    except Exception as e:   # noqa: BLE001  (any failure to parse the files is theirs)
        raise ArtifactError(f"{directory}: malformed program ({type(e).__name__}: {e})") from None
    for kid, image in program.kernels.items():
        validate_spec(image.spec, None, f"{directory}/kernels/{kid}")
    _check_slices(program, str(directory))
    _check_constants(program, str(directory))
    program.artifact_digest = digest
    return program


def _device_count(manifest: dict[str, Any], key: str, directory: Path) -> int:
    """program.json's num_replicas / num_partitions (1 when absent)."""
    value = manifest.get(key, 1)
    if isinstance(value, bool) or not isinstance(value, int) or \
            not 1 <= value <= MAX_DEVICES:
        raise ArtifactError(f"{directory}: program.json: {key}={value!r} is not a device "
                            f"count in [1, {MAX_DEVICES}]")
    return value


def _check_slices(program: ProgramExecutable, where: str) -> None:
    """Every slice a thunk touches lies inside its allocation, and every
    kernel launch passes as many buffers as its kernel takes, each as large
    as the kernel's argument."""
    sizes = [a.size for a in program.allocations]

    def check(s, what: str) -> None:
        if not 0 <= s.allocation < len(sizes) or s.offset + s.size > sizes[s.allocation]:
            raise ArtifactError(f"{where}: {what} uses {s}, outside the program's "
                                "allocations")

    for thunk in walk(program.thunks):
        for s, _ in thunk.buffer_uses():
            check(s, f"thunk '{thunk.name}'")
        if isinstance(thunk, KernelThunk):
            image = program.kernels.get(thunk.kernel)
            if image is None:
                raise ArtifactError(f"{where}: thunk '{thunk.name}' launches unknown kernel "
                                    f"{thunk.kernel!r}")
            spec = image.spec
            args = spec.kernel_args
            if len(args) != len(thunk.args):
                raise ArtifactError(f"{where}: thunk '{thunk.name}' passes {len(thunk.args)} "
                                    f"buffers to {spec.name}, which takes {len(args)}")
            for (kind, i), s in zip(args, thunk.args):
                need = (spec.parameters[i] if kind == "param" else spec.outputs[i]).nbytes
                if s.size < need:
                    raise ArtifactError(f"{where}: thunk '{thunk.name}' passes {s.size} bytes "
                                        f"as {kind} {i} of {spec.name}, which needs {need}")
    def check_view(ref, what: str) -> None:
        check(ref.slice, what)
        # The array read or written through the slice fits in it (an
        # output's dims decide the view the run returns).
        if ref.nbytes > ref.slice.size:
            raise ArtifactError(f"{where}: {what} of {ref.nbytes} bytes "
                                f"({list(ref.dims)} {ref.element_type}) does not fit its "
                                f"slice {ref.slice}")

    for k, refs in enumerate(program.parameters):
        for ref in refs:
            if not ref.is_token:   # no bytes, no allocation
                check_view(ref, f"parameter {k}")
    for k, ref in enumerate(program.outputs):
        if not ref.is_token:
            check_view(ref, f"output {k}")


def _check_constants(program: ProgramExecutable, where: str) -> None:
    """Each constant fills its allocation exactly: kernels read the whole
    allocation."""
    for index, array in program.constants.items():
        if not 0 <= index < len(program.allocations) or \
                program.allocations[index].kind != "constant":
            raise ArtifactError(f"{where}: constants.npz holds a{index}, which is not a "
                                "constant allocation")
        size = program.allocations[index].size
        if array.nbytes != size:
            raise ArtifactError(f"{where}: constant a{index} has {array.nbytes} bytes, its "
                                f"allocation {size}")
