"""`xla_gpu.compile`: HLO text -> emitted MLIR -> pipeline -> PTX/cubin (cuda)
or a host kernel (cpu) -> an Executable, through a compile cache.

    import xla_gpu
    exe = xla_gpu.compile(open("examples/gelu.hlo").read())   # target="auto"
    (y,) = exe.run(x)
    exe.save("artifacts/gelu")      # runs with xla_gpu.runtime.load() elsewhere
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import numpy as np

from . import _malloc_tuning, compile_cache, hlo, kernel_compiler
from ._trace import complete, span, trace_file
from ._input import check_hlo_text, decode_hlo_text, read_input
from .compile_cache import cache_dir
from .errors import ArgumentError, CompileError, ResourceError, XlaGpuError
# Executable (what compile() returns for a fusion) and check_run_options
# live with the kernel compiler; they are this module's API too.
from .kernel_compiler import Executable, check_run_options  # noqa: F401
from .runtime import cuda_available
from .runtime.program import MAX_DEVICES, ProgramExecutable

__all__ = ["compile", "Executable", "CompileError", "cache_dir", "clear_memory_cache"]

TARGETS = ("auto", "cuda", "cpu")
# compile(fallback_unfused=None) asks the environment: "1" opts out of HLO
# pass failures as errors (each op of such a program its own fusion).
UNFUSED_FALLBACK_ENV = "XLA_GPU_UNFUSED_FALLBACK"
# The note of a whole program that compile() loaded from the disk cache.
FROM_DISK_CACHE = "loaded from the compile cache"


# -- the compile cache ---------------------------------------------------------


def clear_memory_cache() -> None:
    """Forgets every kernel this process compiled, for single fusions,
    programs, sorts, top-k and convolutions alike (the disk cache stays;
    see `kernel_compiler`)."""
    kernel_compiler.clear_memory_cache()


def compile(hlo_text: str | os.PathLike, *, target: str = "auto", arch: str = "sm_90",
            fusion: str | None = None, cache: bool = True,
            dump_dir: str | os.PathLike | None = None,
            dump_regex: str = ".*", command_buffers: bool = True,
            optimize: bool | None = None, memory_limit: int | None = None,
            fallback_unfused: bool | None = None, device=None,
            profile: str | os.PathLike | None = None,
            num_partitions: int | None = None, num_replicas: int | None = None,
            **unknown) -> Executable | ProgramExecutable:
    """Compiles one fusion of `hlo_text` (HLO text, or a path to it), or,
    when `fusion` is None and the ENTRY is a whole program (more than one
    fusion, or ops outside fusions), the whole ENTRY into a
    `runtime.program.ProgramExecutable` (see `xla_gpu.program`;
    `command_buffers`, `optimize`, `memory_limit` and `fallback_unfused`
    are its options). A whole program's HLO pass that fails is an error
    naming the pass; `fallback_unfused=True` (default: the environment's
    XLA_GPU_UNFUSED_FALLBACK=1) compiles such a module with each op as its
    own fusion instead (slower; the program's notes say why).
    profile: a file to write the compile's trace to (Chrome trace-event
    JSON: HLO passes, scheduling, buffer assignment and every kernel's
    stages on the thread that ran them); a compile inside
    `xla_gpu.trace(...)` or under XLA_GPU_PROFILE records into that trace.

    target: "cuda" (PTX/cubin for `arch`, launched through cuda-python),
    "cpu" (the same kernel run by grid emulation on the host), or "auto"
    (cuda when a GPU is usable). fusion: which fusion of the ENTRY to
    compile (default: the only one). dump_dir: write the IR after each pass
    matching dump_regex, and the PTX (bypasses the cache). device: the GPU
    whose description a fusion's launch configuration follows
    (`xla_gpu.analysis.device.DeviceDescription`; default the H200; XLA's
    own emitter tests describe `RTX_A6000`); single fusions only.

    Raises only xla_gpu's errors: ArgumentError (bad options), HloParseError
    (malformed text), HloError / UnsupportedError (a module it cannot
    compile; names the instruction), CompileError (the pipeline failed),
    ResourceError (limits), ArtifactError; all derive from XlaGpuError.

    num_partitions, num_replicas: the devices an SPMD program (XLA's
    partitioned output: collectives, replica-id / partition-id) runs on,
    default the module header's `num_partitions=` / `replica_count=` (1
    without); a count the header states must agree. A program on more
    than one device is one ProgramExecutable for all of them, run with
    `run_partitioned` (one argument list per device). A module still in
    global shapes with sharding annotations (jax's text before XLA's
    partitioner: `sharding=` attributes, Shardy's or GSPMD's annotation
    custom calls) compiled with num_partitions > 1 goes through xla_gpu's
    SPMD partitioner (`xla_gpu.hlo.passes.spmd`) first: the result, a
    `program.spmd.PartitionedProgram`, runs on global arrays with `run`
    (jax.jit's semantics) and on per-device ones with `run_partitioned`."""
    if unknown:
        raise ArgumentError(f"compile() got an unexpected keyword argument "
                            f"'{next(iter(unknown))}'")
    if not isinstance(target, str) or target not in TARGETS:
        raise ArgumentError(f"target must be one of {', '.join(TARGETS)}, got {target!r}")
    if not (isinstance(arch, str) and re.fullmatch(r"sm_\d+[af]?", arch)):
        raise ArgumentError(f"arch must look like sm_90 (or sm_90a), got {arch!r}")
    if not isinstance(hlo_text, (str, os.PathLike)):
        raise ArgumentError(f"compile() takes HLO text or a path, got "
                            f"{type(hlo_text).__name__}")
    from .analysis.device import DeviceDescription
    if device is not None and not isinstance(device, DeviceDescription):
        raise ArgumentError(f"device must be an xla_gpu.analysis.device.DeviceDescription, "
                            f"got {type(device).__name__}")
    memory_limit = _check_options(fusion, cache, dump_dir, dump_regex, command_buffers,
                                  optimize, memory_limit)
    for name, value in (("num_partitions", num_partitions), ("num_replicas", num_replicas)):
        if value is not None and (isinstance(value, (bool, np.bool_)) or
                                  not isinstance(value, (int, np.integer)) or value < 1):
            raise ArgumentError(f"{name} must be a positive integer, got {value!r}")
    devices = {k: int(v) for k, v in (("num_partitions", num_partitions),
                                      ("num_replicas", num_replicas)) if v is not None}
    if fallback_unfused is None:
        fallback_unfused = os.environ.get(UNFUSED_FALLBACK_ENV, "").strip().lower() in \
            ("1", "true", "yes")
    elif not isinstance(fallback_unfused, (bool, np.bool_)):
        raise ArgumentError(f"fallback_unfused must be True or False, got "
                            f"{fallback_unfused!r}")
    source = "<hlo>"
    text = hlo_text
    if isinstance(hlo_text, os.PathLike) or (
            isinstance(hlo_text, str) and "\n" not in hlo_text and
            hlo_text.endswith(".hlo") and os.path.exists(hlo_text)):
        # Bounded: a regular file of at most XLA_GPU_MAX_INPUT_BYTES.
        data, source = read_input(hlo_text)
        text = decode_hlo_text(data, source)
    check_hlo_text(text, source)   # the cache keys hash its UTF-8
    try:
        with trace_file(profile):
            begun, name = time.perf_counter(), source
            try:
                exe = _compile(text, source, target, arch, fusion, cache, dump_dir,
                               dump_regex, dict(command_buffers=command_buffers,
                                                optimize=optimize, memory_limit=memory_limit,
                                                fallback_unfused=bool(fallback_unfused),
                                                **devices),
                               device)
                name = getattr(exe, "name", None) or source
                return exe
            finally:
                complete(f"compile {name}", "compile", begun, target=target)
    except XlaGpuError:
        raise
    except RecursionError:
        raise CompileError(f"{source}: the module nests too deeply for the compiler "
                           "(a chain of operations or regions deeper than it can "
                           "walk)") from None
    except MemoryError:
        raise ResourceError(f"{source}: out of host memory while compiling") from None
    except Exception as e:  # a compiler bug: still one of our errors
        raise CompileError(f"{source}: internal compiler error: {type(e).__name__}: {e}") \
            from e


def _device_counts(module, source: str, replicas: int | None,
                   partitions: int | None) -> tuple[int, int]:
    """(num_replicas, num_partitions) of a compile: the arguments, else the
    module header's; a count both give must agree, and the product must
    not pass MAX_DEVICES. The header is given the counts (its verifier and
    passes read them there)."""
    out = []
    for key, given in (("replica_count", replicas), ("num_partitions", partitions)):
        name = "num_replicas" if key == "replica_count" else key
        try:
            header = module.replica_count if key == "replica_count" else module.num_partitions
        except hlo.HloError as e:
            raise ArgumentError(f"{source}: {e}") from None
        stated = module.attrs.get(key) is not None
        if given is not None and stated and given != header:
            raise ArgumentError(f"{source}: {name}={given} but the module header says "
                                f"{key}={header}")
        value = header if given is None else given
        if given is not None and not stated and given != 1:
            module.attrs[key] = str(given)
        out.append(value)
    if out[0] * out[1] > MAX_DEVICES:
        raise ArgumentError(f"{source}: {out[0]} replicas x {out[1]} partitions is "
                            f"{out[0] * out[1]} devices, more than the {MAX_DEVICES} "
                            "supported")
    return out[0], out[1]


def _check_options(fusion, cache, dump_dir, dump_regex, command_buffers, optimize,
                   memory_limit) -> int | None:
    """compile()'s options, checked before anything is compiled; returns
    memory_limit as an int."""
    if fusion is not None and not isinstance(fusion, str):
        raise ArgumentError(f"fusion must be a fusion's name (str), got "
                            f"{type(fusion).__name__}")
    for name, value in (("cache", cache), ("command_buffers", command_buffers),
                        ("optimize", optimize)):
        if not isinstance(value, (bool, np.bool_)) and not (name == "optimize" and
                                                            value is None):
            raise ArgumentError(f"{name} must be True or False, got {value!r}")
    if dump_dir is not None and not isinstance(dump_dir, (str, os.PathLike)):
        raise ArgumentError(f"dump_dir must be a directory's path, got "
                            f"{type(dump_dir).__name__}")
    if dump_dir is not None:
        # Made here: one that cannot be is a bad argument, not a failure in
        # the middle of the pipeline.
        try:
            Path(dump_dir).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ArgumentError(f"dump_dir: cannot create '{dump_dir}': "
                                f"{e.strerror}") from None
    if not isinstance(dump_regex, str):
        raise ArgumentError(f"dump_regex must be a regular expression (str), got "
                            f"{type(dump_regex).__name__}")
    try:
        re.compile(dump_regex)
    except re.error as e:
        raise ArgumentError(f"dump_regex: invalid regular expression {dump_regex!r}: "
                            f"{e}") from None
    if memory_limit is None:
        return None
    if isinstance(memory_limit, (bool, np.bool_)) or not isinstance(
            memory_limit, (int, np.integer)) or memory_limit < 0:
        raise ArgumentError(f"memory_limit must be a non-negative number of bytes "
                            f"(int), got {memory_limit!r}")
    return int(memory_limit)


def _compile(text: str, source: str, target: str, arch: str, fusion: str | None,
             cache: bool, dump_dir, dump_regex: str, program_options=None,
             device=None) -> Executable:
    if target == "auto":
        target = "cuda" if cuda_available() else "cpu"
    use_cache = cache and dump_dir is None
    identity = compile_cache.compiler_identity(target) if use_cache else ""
    # A device other than the default is part of the keys (the launch
    # configuration depends on it).
    device_key = () if device is None else (repr(device),)
    from ._paths import autotune_enabled, gemm_fusion_enabled
    tuning = autotune_enabled()
    # XLA_GPU_GEMM_FUSION and XLA_GPU_AUTOTUNE change what a program
    # compiles to: part of the key.
    options = repr(sorted((program_options or {}).items()) +
                   [("gemm_fusion", gemm_fusion_enabled())] +
                   ([("autotune", True)] if tuning else []))
    # The text as given (with its options): a repeated compile skips parsing.
    raw_key = compile_cache.make_key("raw", text, target, arch, fusion or "", identity,
                                     options, *device_key)
    disk = compile_cache.DiskCache() if use_cache else None
    if use_cache:
        hit = kernel_compiler.memory.get(raw_key)
        if hit is not None:
            return hit
        # A whole program compiled before (any process), kept whole on disk:
        # its kernels share binaries that per-kernel entries cannot hold. Not
        # kept in memory: a program holds state (FFI instances, its buffer
        # pool) that must go with the caller's last reference.
        program = disk.get_program(raw_key, target) if fusion is None else None
        if program is not None:
            program.notes.append(FROM_DISK_CACHE)
            return program
        # The same text compiled before (any process): skip parsing too.
        known = disk.lookup_text(raw_key)
        exe = kernel_compiler.cached_kernel(known, target, disk) if known else None
        if exe is not None:
            kernel_compiler.memory.put(raw_key, exe)
            return exe
    start = time.perf_counter()
    # Compiling frees and allocates the same megabytes again and again: keep
    # them in the heap (see _malloc_tuning).
    _malloc_tuning.tune_for_compilation()
    # The cyclic collector is paused while parsing too, as for the compile
    # after it: a training step's text makes tens of thousands of linked
    # objects, and the full collections their allocation triggers walk all
    # of them again (a sixth of the parse on a 32-layer GPT step).
    from .hlo.passes.optimize import cyclic_gc_paused
    with span("parse HLO", "compile"), cyclic_gc_paused():
        module = hlo.parse_module(text, source=source)
    program_options = dict(program_options or {})
    if fusion is None and (program_options.get("num_partitions") or 1) > 1:
        from .hlo.passes.spmd import needs_partitioning
        if needs_partitioning(module):   # jax's annotated text: ours partitions it
            return _compile_spmd(module, source, target, arch, cache, dump_dir,
                                 dump_regex, program_options)
    replicas, partitions = _device_counts(module, source,
                                          program_options.pop("num_replicas", None),
                                          program_options.pop("num_partitions", None))
    with span("load the compiler", "compile"):   # once a process: MLIR and the rest
        from .program import compile_program, is_whole_program
    if fusion is None and (is_whole_program(module) or replicas * partitions > 1):
        if device is not None:
            raise ArgumentError("device= applies to single fusions; whole programs are "
                                "configured for the default device")
        tune = None
        if tuning:   # off (the default): nothing imported, nothing run
            from .program.autotune import autotuner
            tune = autotuner(target, arch, cache=cache, dump_dir=dump_dir)
        program = compile_program(module, text=text, target=target, arch=arch,
                                  cache=cache, dump_dir=dump_dir, dump_regex=dump_regex,
                                  num_replicas=replicas, num_partitions=partitions,
                                  autotune=tune, **program_options)
        if program._hlo_module is not None and program._hlo_module is not module:
            # The parsed input, done with (the program keeps its own module,
            # which may share computations with it): unlinked, it is freed
            # now rather than left as cyclic garbage by every compile.
            module.release(keep=program._hlo_module)
        if use_cache:
            with span("store in the compile cache", "compile"):
                disk.put_program(raw_key, program)
        return program
    from .analysis.fusion import select_fusion
    spec_fusion = select_fusion(module, fusion)
    # The kernel's own key (names do not matter: a renamed fusion, or the
    # same fusion in a program, reuses the kernel and its name).
    key = kernel_compiler.kernel_key(spec_fusion.computation, target, arch, device=device,
                                     identity=identity)
    exe = kernel_compiler.compile_kernel(spec_fusion, target, arch, device=device,
                                         cache=use_cache, key=key, text=text,
                                         dump_dir=dump_dir, dump_regex=dump_regex, disk=disk,
                                         start=start)
    if use_cache:
        disk.remember_text(raw_key, key)
        kernel_compiler.memory.put(raw_key, exe)
    return exe


def _compile_spmd(module, source: str, target: str, arch: str, cache: bool, dump_dir,
                  dump_regex: str, program_options: dict):
    """An annotated module (global shapes, shardings) partitioned by
    xla_gpu's SPMD partitioner, its per-device text compiled as any SPMD
    program, wrapped to take and give global arrays."""
    from .hlo.passes.spmd import needs_partitioning, partition_module
    from .hlo.printer import module_to_text
    from .program.spmd import PartitionedProgram
    partitions = program_options.pop("num_partitions")
    if (program_options.pop("num_replicas", None) or 1) != 1 or module.replica_count != 1:
        raise ArgumentError(f"{source}: the SPMD partitioner takes num_partitions only "
                            "(one replica)")
    with span("SPMD partitioner", "compile"):
        result = partition_module(module, partitions)
        if needs_partitioning(result.module):
            raise CompileError(f"{source}: the SPMD partitioner left sharding "
                               "annotations in the per-device module")
        text = module_to_text(result.module)
    program = _compile(text, source, target, arch, None, cache, dump_dir, dump_regex,
                       dict(program_options, num_partitions=partitions))
    return PartitionedProgram(program, result, text)
