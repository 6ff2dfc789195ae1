"""Thunks: the units of work a compiled whole program runs, in order.

A program is a sequence of thunks over buffer slices (see `buffers.py`):
one thunk launches a kernel, copies or sets memory, calls a GEMM, runs a
loop or a branch (holding their own sequences), calls a custom-call handler,
or replays a command buffer (a CUDA graph on cuda). Thunks are plain data:
they serialize to JSON (`to_dict` / `thunk_from_dict`) and run with numpy and
cuda-python only (never MLIR), on an `ExecutionContext` that maps the
program's allocations to memory for one execution.

    ctx = ExecutionContext("cpu", buffers, kernels)
    for thunk in thunks:
        thunk.execute(ctx)

Kinds: kernel, copy, memset, gemm, fft, while, conditional, custom_call,
sort, topk, convolution, command_buffer; the collectives' (all_reduce,
all_gather, reduce_scatter, all_to_all, collective_permute,
collective_broadcast, device_id) are in `collective_thunks`. Thunks that hold others expose them as
`.thunks` (flattened, in order); `while` keeps `.condition` and `.body`,
`conditional` keeps `.branches`.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterator, Sequence

import numpy as np

from ..errors import ArtifactError, DeadlineExceededError, XlaGpuError
from .buffers import ArrayRef, BufferSlice

__all__ = ["ArrayRef", "ExecutionContext", "Thunk", "KernelThunk", "CopyThunk",
           "MemsetThunk", "GemmThunk", "FftThunk", "WhileThunk", "ConditionalThunk",
           "CustomCallThunk", "SortThunk", "TopKThunk", "ConvolutionThunk",
           "CommandBufferThunk", "ThunkError", "thunk_from_dict", "walk",
           "sequence_text", "COMMAND_BUFFER_KINDS"]


class ThunkError(XlaGpuError, RuntimeError):
    """A thunk failed at run time (a custom-call handler's error, a
    predicate that cannot be read...); the message names the instruction."""


# -- the execution context -----------------------------------------------------


class ExecutionContext:
    """The memory of one execution and how to reach it.

    target "cpu": `buffers[i]` is a 1-D uint8 numpy array holding allocation
    i (None for an allocation nothing uses); kernels are host launchers.
    target "cuda": `buffers[i]` is the device address of allocation i;
    kernels are CudaKernels launched on `stream`.
    `kernels` maps a kernel id to an object with `launch(pointers, stream)`.
    `custom_calls(target_name)` returns the handler of a custom call."""

    def __init__(self, target: str, buffers: Sequence[Any], kernels: dict[str, Any],
                 stream: Any = None, custom_calls: Callable[[str], Any] | None = None,
                 gemm: Any = None, bases: Sequence[int] | None = None):
        self.target = target
        self.buffers = list(buffers)
        self.kernels = kernels
        self.stream = stream
        self.custom_calls = custom_calls
        self.gemm = gemm
        self.stats: Counter = Counter()
        # time.monotonic_ns() past which while loops stop the run
        # (DeadlineExceededError); None: no deadline.
        self.deadline_ns: int | None = None
        # A runtime.profile.RunProfiler recording every thunk, or None.
        self.profiler: Any = None
        # One device of a many-device run: its side of the run's rendezvous
        # (runtime.communicator.DeviceEndpoint), which the collective thunks
        # meet through; None on one device.
        self.collectives: Any = None
        # The native executor's control block while it runs this context
        # (host_executor), so that `cancel` reaches a loop running there.
        self.native_control: Any = None
        # cpu: what a thunk prepared from this run's buffers, which stay
        # put for the run (a gemm's operand views, built once for all the
        # iterations of a loop), keyed by the thunk's config's id.
        self.host_views: dict[int, Any] = {}
        if bases is not None:
            # The buffers' addresses, known to the caller.
            self._bases = list(bases)
        elif target == "cpu":
            self._bases = [0 if b is None else b.ctypes.data for b in self.buffers]
        else:
            self._bases = [0 if b is None else int(b) for b in self.buffers]

    def cancel(self) -> None:
        """Stops this execution at its next loop iteration (another
        thread may call it: a many-device run whose other devices failed or
        timed out): as if its deadline had passed."""
        self.deadline_ns = 1
        control = self.native_control
        if control is not None:
            control.deadline_ns = 1

    # addresses and host views
    def pointer(self, s: BufferSlice) -> int:
        return self._bases[s.allocation] + s.offset

    def bytes(self, s: BufferSlice) -> np.ndarray:
        """cpu: the slice's bytes (a view)."""
        return self.buffers[s.allocation][s.offset:s.offset + s.size]

    def array(self, ref: ArrayRef) -> np.ndarray:
        """cpu: a writable logical view of `ref` in storage dtype."""
        physical = np.ndarray(ref.physical_dims, ref.storage_dtype,
                              buffer=self.buffers[ref.slice.allocation],
                              offset=ref.slice.offset)
        return ref.logical_from_physical(physical)

    def read_scalar(self, ref: ArrayRef) -> Any:
        """The value of a one-element array (a loop predicate, a branch
        index): read back from the device on cuda."""
        if self.target == "cpu":
            return self.array(ref).reshape(()).item()
        from .cuda import _check, _driver
        cu = _driver()
        host = np.empty((), ref.storage_dtype)
        _check("cuMemcpyDtoHAsync", cu.cuMemcpyDtoHAsync(
            host.ctypes.data, self.pointer(ref.slice), host.nbytes, self.stream or 0))
        _check("cuStreamSynchronize", cu.cuStreamSynchronize(self.stream or 0))
        return host.item()

    # device work
    def copy(self, dst: BufferSlice, src: BufferSlice, size: int) -> None:
        if size == 0 or (dst.allocation == src.allocation and dst.offset == src.offset):
            return
        if self.target == "cpu":
            self.bytes(dst)[:size] = self.bytes(src)[:size]
            return
        from .cuda import _check, _driver
        _check("cuMemcpyDtoDAsync", _driver().cuMemcpyDtoDAsync(
            self.pointer(dst), self.pointer(src), size, self.stream or 0))

    def memset(self, dst: BufferSlice, pattern: int, width: int, count: int) -> None:
        if count == 0:
            return
        if self.target == "cpu":
            dtype = {1: np.uint8, 2: np.uint16, 4: np.uint32}[width]
            self.bytes(dst)[:count * width].view(dtype)[:] = pattern
            return
        from .cuda import _check, _driver
        cu = _driver()
        ptr, stream = self.pointer(dst), self.stream or 0
        if width == 1:
            _check("cuMemsetD8Async", cu.cuMemsetD8Async(ptr, pattern, count, stream))
        elif width == 2:
            _check("cuMemsetD16Async", cu.cuMemsetD16Async(ptr, pattern, count, stream))
        else:
            _check("cuMemsetD32Async", cu.cuMemsetD32Async(ptr, pattern, count, stream))

    def launch(self, kernel: str, pointers: Sequence[int]) -> None:
        self.kernels[kernel].launch(pointers, self.stream)
        self.stats["kernels"] += 1


# -- thunks ---------------------------------------------------------------------

# Thunks a command buffer records: device work only (sequences of it too).
COMMAND_BUFFER_KINDS = frozenset({"kernel", "copy", "memset", "gemm", "convolution", "sort",
                                  "topk"})

_KINDS: dict[str, type] = {}


def _register(cls):
    _KINDS[cls.kind] = cls
    return cls


def _slices(data) -> list[BufferSlice]:
    return [BufferSlice.from_list(s) for s in data]


@dataclass
class Thunk:
    """One unit of work; `name` is the HLO instruction it comes from."""
    kind: ClassVar[str] = ""
    name: str

    @property
    def thunks(self) -> list["Thunk"]:
        """The thunks this one holds, in order (none for a leaf)."""
        return []

    def execute(self, ctx: ExecutionContext) -> None:
        raise NotImplementedError

    def prepare(self, ctx: ExecutionContext) -> None:
        """Host-side set-up that must not happen while a command buffer is
        being recorded (library handles, plans)."""
        for thunk in self.thunks:
            thunk.prepare(ctx)

    def buffer_uses(self) -> list[tuple[BufferSlice, bool]]:
        """(slice, written) for every slice this thunk touches (nested ones
        included)."""
        return [use for t in self.thunks for use in t.buffer_uses()]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, **self._fields()}

    def _fields(self) -> dict[str, Any]:
        return {}

    def describe(self) -> str:
        """One line for the thunk sequence dump."""
        return f"{self.kind} {self.name}"


def thunk_from_dict(data: dict[str, Any]) -> Thunk:
    kind = data.get("kind")
    cls = _KINDS.get(kind)
    if cls is None:
        raise ArtifactError(f"unknown thunk kind {kind!r} (known: {', '.join(sorted(_KINDS))})")
    try:
        return cls._from_dict(data)
    except (KeyError, TypeError, ValueError) as e:
        raise ArtifactError(f"malformed {kind} thunk {data.get('name')!r}: {e}") from None


def _sequence_from(data) -> list[Thunk]:
    return [thunk_from_dict(d) for d in data]


def _run_sequence(thunks: Sequence[Thunk], ctx: ExecutionContext) -> None:
    profiler = ctx.profiler
    if profiler is None:
        for thunk in thunks:
            thunk.execute(ctx)
    else:
        for thunk in thunks:
            profiler.execute(thunk, ctx)


@_register
@dataclass
class KernelThunk(Thunk):
    """Launches compiled kernel `kernel` on the pointers of `args` (the
    fusion's parameters, then the outputs it does not write in place)."""
    kind: ClassVar[str] = "kernel"
    kernel: str = ""
    args: list[BufferSlice] = field(default_factory=list)
    written: list[int] = field(default_factory=list)   # positions in args
    threads: int = 0
    blocks: int = 0
    shared_bytes: int = 0

    def execute(self, ctx: ExecutionContext) -> None:
        ctx.launch(self.kernel, [ctx.pointer(a) for a in self.args])

    def buffer_uses(self):
        return [(a, i in self.written) for i, a in enumerate(self.args)]

    def _fields(self):
        return {"kernel": self.kernel, "args": [a.to_list() for a in self.args],
                "written": list(self.written), "threads": self.threads,
                "blocks": self.blocks, "shared_bytes": self.shared_bytes}

    @classmethod
    def _from_dict(cls, d):
        return cls(d["name"], str(d["kernel"]), _slices(d["args"]),
                   [int(i) for i in d["written"]], int(d["threads"]), int(d["blocks"]),
                   int(d["shared_bytes"]))

    def describe(self) -> str:
        args = ", ".join(f"{'out ' if i in self.written else ''}{a}"
                         for i, a in enumerate(self.args))
        return (f"kernel {self.name} [{self.blocks}x{self.threads} threads"
                f"{f', {self.shared_bytes} B shared' if self.shared_bytes else ''}]"
                f" ({args})")


@_register
@dataclass
class CopyThunk(Thunk):
    """`size` bytes from `source` to `destination` (device to device)."""
    kind: ClassVar[str] = "copy"
    source: BufferSlice = None
    destination: BufferSlice = None
    size: int = 0

    def execute(self, ctx: ExecutionContext) -> None:
        ctx.copy(self.destination, self.source, self.size)
        ctx.stats["copies"] += 1

    def buffer_uses(self):
        return [(self.source, False), (self.destination, True)]

    def _fields(self):
        return {"source": self.source.to_list(), "destination": self.destination.to_list(),
                "size": self.size}

    @classmethod
    def _from_dict(cls, d):
        return cls(d["name"], BufferSlice.from_list(d["source"]),
                   BufferSlice.from_list(d["destination"]), int(d["size"]))

    def describe(self) -> str:
        return f"copy {self.name} {self.source} -> {self.destination} ({self.size} B)"


@_register
@dataclass
class MemsetThunk(Thunk):
    """`count` elements of `width` bytes (1, 2 or 4) set to `pattern` (the
    element's bits): XLA's memset thunks for fusions that broadcast a
    constant."""
    kind: ClassVar[str] = "memset"
    destination: BufferSlice = None
    pattern: int = 0
    width: int = 4
    count: int = 0

    def execute(self, ctx: ExecutionContext) -> None:
        ctx.memset(self.destination, self.pattern, self.width, self.count)
        ctx.stats["memsets"] += 1

    def buffer_uses(self):
        return [(self.destination, True)]

    def _fields(self):
        return {"destination": self.destination.to_list(), "pattern": self.pattern,
                "width": self.width, "count": self.count}

    @classmethod
    def _from_dict(cls, d):
        return cls(d["name"], BufferSlice.from_list(d["destination"]), int(d["pattern"]),
                   int(d["width"]), int(d["count"]))

    def describe(self) -> str:
        return (f"memset {self.name} {self.destination} = 0x{self.pattern:0{2 * self.width}x}"
                f" x {self.count} ({self.width} B each)")


@_register
@dataclass
class GemmThunk(Thunk):
    """out = alpha * dot(lhs, rhs) [+ beta * c] [+ bias] [activation], with
    dot_general dimension numbers (see `gemm.GemmConfig`)."""
    kind: ClassVar[str] = "gemm"
    config: Any = None          # gemm.GemmConfig

    def execute(self, ctx: ExecutionContext) -> None:
        from . import gemm
        gemm.run_gemm(ctx, self.config)
        ctx.stats["gemms"] += 1

    def prepare(self, ctx: ExecutionContext) -> None:
        if ctx.target == "cuda":
            from . import gemm
            gemm.prepare(self.config)

    def buffer_uses(self):
        c = self.config
        uses = [(c.lhs.slice, False), (c.rhs.slice, False), (c.out.slice, True)]
        if c.c is not None:
            uses.append((c.c.slice, False))
        if c.bias is not None:
            uses.append((c.bias.slice, False))
        if c.workspace is not None:
            uses.append((c.workspace, True))
        return uses

    def _fields(self):
        return {"config": self.config.to_dict()}

    @classmethod
    def _from_dict(cls, d):
        from .gemm import GemmConfig
        return cls(d["name"], GemmConfig.from_dict(d["config"]))

    def describe(self) -> str:
        return f"gemm {self.name} {self.config.describe()}"


@_register
@dataclass
class FftThunk(Thunk):
    """An HLO fft (FFT / IFFT / RFFT / IRFFT over the 1-3 minor dimensions,
    see `fft.FftConfig`): numpy.fft on the cpu target, cuFFT on cuda (inverse
    transforms scaled by 1/N, as XLA's FftThunk). Not recorded into command
    buffers (XLA has no fft command either)."""
    kind: ClassVar[str] = "fft"
    config: Any = None          # fft.FftConfig

    def execute(self, ctx: ExecutionContext) -> None:
        from ..errors import CudaError
        from . import fft
        try:
            fft.run_fft(ctx, self.config)
        except CudaError as e:   # name the instruction (a missing cuFFT, a plan refused)
            raise type(e)(f"fft '{self.name}': {e}") from e
        ctx.stats["ffts"] += 1

    def prepare(self, ctx: ExecutionContext) -> None:
        if ctx.target == "cuda":
            from . import fft
            fft.prepare(self.config, int(ctx.stream or 0))

    def buffer_uses(self):
        return [(self.config.input.slice, False), (self.config.output.slice, True)]

    def _fields(self):
        return {"config": self.config.to_dict()}

    @classmethod
    def _from_dict(cls, d):
        from .fft import FftConfig
        return cls(d["name"], FftConfig.from_dict(d["config"]))

    def describe(self) -> str:
        return f"fft {self.name} {self.config.describe()}"


@_register
@dataclass
class WhileThunk(Thunk):
    """Runs `condition`, reads the predicate back, runs `body` while it is
    true. With `trip_count` known at compile time (the loop's
    known_trip_count), runs `body` that many times and neither the
    condition nor the read, as XLA's WhileThunk does: on a GPU each read is
    a copy to the host and a wait for the stream."""
    kind: ClassVar[str] = "while"
    condition: list[Thunk] = field(default_factory=list)
    predicate: ArrayRef = None
    body: list[Thunk] = field(default_factory=list)
    trip_count: int | None = None

    @property
    def thunks(self) -> list[Thunk]:
        return [*self.condition, *self.body]

    def buffer_uses(self):
        return super().buffer_uses() + [(self.predicate.slice, False)]

    def execute(self, ctx: ExecutionContext) -> None:
        iterations = 0
        profiler = ctx.profiler
        known = self.trip_count
        while True:
            started = time.perf_counter() if profiler is not None else 0.0
            if known is None:
                _run_sequence(self.condition, ctx)
                if not bool(ctx.read_scalar(self.predicate)):
                    break
            elif iterations >= known:
                break
            _run_sequence(self.body, ctx)
            if profiler is not None:
                profiler.iteration(self, iterations, started)
            iterations += 1
            if ctx.deadline_ns is not None and time.monotonic_ns() >= ctx.deadline_ns:
                ctx.stats["while_iterations"] += iterations
                raise DeadlineExceededError(
                    f"while loop '{self.name}' was stopped after {iterations} iterations: "
                    "the run passed its deadline (timeout=); the executable stays usable")
        ctx.stats["while_iterations"] += iterations

    def _fields(self):
        return {"condition": [t.to_dict() for t in self.condition],
                "predicate": self.predicate.to_dict(),
                "body": [t.to_dict() for t in self.body], "trip_count": self.trip_count}

    @classmethod
    def _from_dict(cls, d):
        trip_count = None if d.get("trip_count") is None else int(d["trip_count"])
        if trip_count is not None and trip_count < 0:
            raise ValueError(f"while loop '{d['name']}' with a trip count of {trip_count}")
        return cls(d["name"], _sequence_from(d["condition"]), ArrayRef.from_dict(d["predicate"]),
                   _sequence_from(d["body"]), trip_count)

    def describe(self) -> str:
        trip = f", trip count {self.trip_count}" if self.trip_count is not None else ""
        return f"while {self.name} (predicate {self.predicate.slice}{trip})"


@_register
@dataclass
class ConditionalThunk(Thunk):
    """Reads the selector back (pred: true runs branch 0, false branch 1;
    s32: the branch index, out of range runs the last branch, as XLA) and
    runs that branch's thunks."""
    kind: ClassVar[str] = "conditional"
    selector: ArrayRef = None
    branches: list[list[Thunk]] = field(default_factory=list)

    @property
    def thunks(self) -> list[Thunk]:
        return [t for branch in self.branches for t in branch]

    def buffer_uses(self):
        return super().buffer_uses() + [(self.selector.slice, False)]

    def execute(self, ctx: ExecutionContext) -> None:
        value = ctx.read_scalar(self.selector)
        if self.selector.element_type == "pred":
            index = 0 if bool(value) else 1
        else:
            index = int(value)
            if not 0 <= index < len(self.branches):
                index = len(self.branches) - 1
        _run_sequence(self.branches[index], ctx)

    def _fields(self):
        return {"selector": self.selector.to_dict(),
                "branches": [[t.to_dict() for t in b] for b in self.branches]}

    @classmethod
    def _from_dict(cls, d):
        return cls(d["name"], ArrayRef.from_dict(d["selector"]),
                   [_sequence_from(b) for b in d["branches"]])

    def describe(self) -> str:
        return (f"conditional {self.name} ({self.selector.element_type} selector "
                f"{self.selector.slice}, {len(self.branches)} branches)")


@_register
@dataclass
class CustomCallThunk(Thunk):
    """Calls the handler registered for `target` with the operands and
    results (flattened tuple leaves); `backend_config` is the instruction's
    attribute text, decoded by the handler registry."""
    kind: ClassVar[str] = "custom_call"
    target: str = ""
    operands: list[ArrayRef] = field(default_factory=list)
    results: list[ArrayRef] = field(default_factory=list)
    backend_config: str = ""
    api_version: str = ""
    operand_arity: list[int] = field(default_factory=list)   # 0: array, n: tuple of n

    def buffer_uses(self):
        return [(o.slice, False) for o in self.operands] + \
            [(r.slice, True) for r in self.results]

    def execute(self, ctx: ExecutionContext) -> None:
        if ctx.custom_calls is None:
            raise ThunkError(f"custom call '{self.name}': no handler registry")
        handler = ctx.custom_calls(self.target)
        if handler is None:
            raise ThunkError(f"custom call '{self.name}': no handler registered for target "
                             f"'{self.target}' on platform '{ctx.target}'")
        try:
            handler(ctx, self)
        except XlaGpuError:
            raise
        except Exception as e:
            raise ThunkError(f"custom call '{self.name}' (target '{self.target}') failed: "
                             f"{type(e).__name__}: {e}") from e
        ctx.stats["custom_calls"] += 1

    def _fields(self):
        return {"target": self.target, "operands": [o.to_dict() for o in self.operands],
                "results": [r.to_dict() for r in self.results],
                "backend_config": self.backend_config, "api_version": self.api_version,
                "operand_arity": list(self.operand_arity)}

    @classmethod
    def _from_dict(cls, d):
        return cls(d["name"], str(d["target"]), [ArrayRef.from_dict(o) for o in d["operands"]],
                   [ArrayRef.from_dict(r) for r in d["results"]], str(d["backend_config"]),
                   str(d.get("api_version", "")), [int(a) for a in d.get("operand_arity", [])])

    def describe(self) -> str:
        return (f"custom_call {self.name} target=\"{self.target}\" "
                f"({', '.join(o.describe() for o in self.operands)}) -> "
                f"({', '.join(r.describe() for r in self.results)})")


@dataclass
class _SequenceThunk(Thunk):
    """A thunk that is a fixed sequence of others (kernels, copies, gemms):
    an op XLA lowers to several launches."""
    sequence: list[Thunk] = field(default_factory=list)
    note: str = ""

    @property
    def thunks(self) -> list[Thunk]:
        return list(self.sequence)

    def execute(self, ctx: ExecutionContext) -> None:
        _run_sequence(self.sequence, ctx)

    def _fields(self):
        return {"thunks": [t.to_dict() for t in self.sequence], "note": self.note}

    @classmethod
    def _from_dict(cls, d):
        return cls(d["name"], _sequence_from(d["thunks"]), str(d.get("note", "")))

    def describe(self) -> str:
        return f"{self.kind} {self.name}{f' ({self.note})' if self.note else ''}"


@_register
@dataclass
class SortThunk(_SequenceThunk):
    """A sort: kernel launches of the sort emitter (bitonic stages)."""
    kind: ClassVar[str] = "sort"


@_register
@dataclass
class TopKThunk(_SequenceThunk):
    """top-k: a sort of (values, iota) by the comparator, then the first k
    of each row copied out (XLA's TopK decomposition)."""
    kind: ClassVar[str] = "topk"


@_register
@dataclass
class ConvolutionThunk(_SequenceThunk):
    """A convolution: an im2col kernel gathering the input windows, a gemm
    with the filter, and a kernel for the layout or epilogue."""
    kind: ClassVar[str] = "convolution"


@_register
@dataclass
class CommandBufferThunk(_SequenceThunk):
    """A run of kernel/copy/memset/gemm thunks recorded once and replayed
    (XLA's CommandBufferThunk). cuda: captured into a CUDA graph on first
    execution and relaunched as one graph; recorded again when the buffer
    addresses it uses change. cpu: its thunks run in order."""
    kind: ClassVar[str] = "command_buffer"
    _graphs: dict = field(default_factory=dict, repr=False, compare=False)

    def execute(self, ctx: ExecutionContext) -> None:
        if ctx.target != "cuda":
            _run_sequence(self.sequence, ctx)
            ctx.stats["command_buffers"] += 1
            return
        from . import cuda_graph
        cuda_graph.execute(self, ctx)
        ctx.stats["command_buffers"] += 1

    def allocations(self) -> list[int]:
        return sorted({s.allocation for s, _ in self.buffer_uses()})

    def describe(self) -> str:
        return f"command_buffer {self.name} ({len(self.sequence)} commands)"


# -- helpers --------------------------------------------------------------------


def walk(thunks: Sequence[Thunk]) -> Iterator[Thunk]:
    """Every thunk, nested ones included, depth first (iterative)."""
    stack = list(reversed(thunks))
    while stack:
        thunk = stack.pop()
        yield thunk
        stack.extend(reversed(thunk.thunks))


def sequence_text(thunks: Sequence[Thunk]) -> str:
    """The thunk sequence as indented text (thunk-sequence.txt)."""
    lines: list[str] = []
    stack: list[tuple[Thunk | str, int]] = [(t, 0) for t in reversed(thunks)]
    index = 0
    while stack:
        item, depth = stack.pop()
        pad = "  " * depth
        if isinstance(item, str):
            lines.append(pad + item)
            continue
        lines.append(f"{pad}{index:03d} {item.describe()}")
        index += 1
        children: list[tuple[Thunk | str, int]] = []
        if isinstance(item, WhileThunk):
            children.append(("condition:", depth + 1))
            children += [(t, depth + 2) for t in item.condition]
            children.append(("body:", depth + 1))
            children += [(t, depth + 2) for t in item.body]
        elif isinstance(item, ConditionalThunk):
            for b, branch in enumerate(item.branches):
                children.append((f"branch {b}:", depth + 1))
                children += [(t, depth + 2) for t in branch]
        else:
            children += [(t, depth + 1) for t in item.thunks]
        stack.extend(reversed(children))
    return "\n".join(lines) + ("\n" if lines else "")
