"""A program's kernels: its fusions compiled through the kernel compiler
(`xla_gpu.kernel_compiler`: one key recipe, one cache), several at a time
on a pool of host threads, plus the sort, top-k and convolution kernels the
thunk emitter adds; the kernels are linked into shared binaries: on cuda
those this compile built, into shared PTX modules and cubins; on cpu every
kernel's object (built now or cached), into shared libraries, the host code
of the kernels built now having been compiled several kernels to an LLVM
module (`backends.cpu.HostBatcher`).

A fusion's kernel is compiled from a copy of its computation that reads
and writes row-major physical buffers through bitcasts
(`kernel_computation`), so that the emitters keep seeing logical arrays.
"""

from __future__ import annotations

import functools
import os
import re
import threading
import time
from typing import Any

from .. import backends, compile_cache, kernel_compiler
from .. import _progress
from .._trace import carry, span
from ..errors import CompileError
from ..hlo import HloComputation, HloInstruction, HloModule, Shape
from ..hlo.fusions import fusion_text, inline_calls
from ..runtime.program import KernelImage
from .prepare import is_row_major, reachable_computations
from .shapes import leaves

__all__ = ["ProgramKernels", "kernel_computation", "kernel_fusions", "broadcast_constant",
           "all_outputs_empty", "PREFETCH_THREADS", "LINK_KERNELS"]


def _symbol(name: str) -> str:
    text = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return text if text and not text[0].isdigit() else f"k_{text}"


def kernel_computation(comp: HloComputation) -> HloComputation:
    """`comp` reading and writing row-major physical buffers: a parameter
    or output leaf with another layout goes through a bitcast (the
    emitters index bitcasts through the physical order). `comp` itself
    when every parameter and output is row-major already."""
    comp = inline_calls(comp)
    params = comp.parameters
    root = comp.root
    outputs = list(root.operands) if root.opcode == "tuple" else [root]
    if all(is_row_major(p.shape) for p in params) and \
            all(is_row_major(o.shape) for o in outputs):
        return comp
    mapping: dict[int, HloInstruction] = {}
    body: list[HloInstruction] = []
    for inst in comp.post_order():
        if inst.opcode == "parameter" and not is_row_major(inst.shape):
            physical = HloInstruction(inst.name + ".physical", "parameter",
                                      inst.shape.physical_shape(), [], {}, None,
                                      inst.parameter_number, inst.location)
            body.append(physical)
            logical = HloInstruction(inst.name, "bitcast", inst.shape, [physical], {},
                                     None, None, inst.location)
            body.append(logical)
            mapping[id(inst)] = logical
            continue
        new = inst.clone_with([mapping[id(o)] for o in inst.operands])
        body.append(new)
        mapping[id(inst)] = new

    def physical_output(value: HloInstruction) -> HloInstruction:
        if is_row_major(value.shape):
            return value
        out = HloInstruction(value.name + ".physical", "bitcast", value.shape.physical_shape(),
                             [value], {}, None, None, value.location)
        body.append(out)
        return out

    new_root = mapping[id(root)]
    if root.opcode == "tuple":
        leaves = [physical_output(o) for o in new_root.operands]
        if any(a is not b for a, b in zip(leaves, new_root.operands)):
            shape = Shape(tuple_shapes=tuple(leaf.shape for leaf in leaves))
            new_root = HloInstruction(root.name + ".physical", "tuple", shape, leaves, {},
                                      None, None, root.location)
            body.append(new_root)
    else:
        new_root = physical_output(new_root)
    new = HloComputation(comp.name, body, new_root, False, comp.location)
    new.link_instructions()
    return new


class ProgramKernels:
    """Compiles a program's fusion computations to kernels (the same keys
    as `xla_gpu.compile(..., fusion=NAME)`) and holds their images, by
    kernel key."""

    def __init__(self, target: str, arch: str, cache: bool, module: HloModule):
        self.target, self.arch, self.cache, self.module = target, arch, cache, module
        self.backend = backends.get(target)
        self.identity = compile_cache.compiler_identity(target) if cache else ""
        self.disk = compile_cache.DiskCache() if cache else None
        self.images: dict[str, KernelImage] = {}
        self.compiled = 0
        self.cached = 0
        # Seconds per stage summed over the kernels this compile built
        # (`STAGES`; on several threads: the sum may exceed the wall time).
        self.stages: dict[str, float] = {}
        self._since = time.perf_counter()
        # Kernels go into shared binaries (`link`); until then the images
        # of those built by this compile have no code.
        self.link_kernels = self.backend.links_kernels and LINK_KERNELS
        # (image, executable, key, what the backend links of it).
        self._unlinked: list[tuple[KernelImage, Any, str, Any]] = []
        # Per fusion instruction: (kernel computation, key).
        self._kernels_of: dict[int, tuple[HloComputation, str]] = {}
        # Per fusion instruction: its kernel computation alone (what orders
        # the builds, known before the key).
        self._kernel_comps: dict[int, HloComputation] = {}
        # Key -> a Future of `_build` or a cached kernel (prefetch).
        self._pending: dict[str, Any] = {}
        # (id of a sort, top-k or convolution, its kernel fusion's name) ->
        # a Future of that kernel's build (`prefetch_op_kernels`).
        self._op_pending: dict[tuple[int, str], Any] = {}
        self._pool = None
        # Pool tasks that compile batched code once no build is left.
        self._drains: list = []
        # The terminal's progress line, if the caller shows one.
        self.progress = _progress.current()
        # What the compile threads share to compile kernels' code together
        # (cpu: host-code batches), made when the first kernel is built: a
        # compile that finds every kernel in a cache needs none.
        self._batcher: Any = None
        self._batcher_made = False
        self._batcher_lock = threading.Lock()
        # Kernels the compile threads were given to build (`prefetch`,
        # `prefetch_op_kernels`): what bounds a host-code batch's members.
        self._builds = 0
        # Kernels built whose stage times are counted once their batch is
        # compiled (their "llvm" time is a share of the batch's).
        self._uncounted: list = []

    def _kernel_of(self, inst: HloInstruction, comp: HloComputation):
        """(the kernel's computation, its cache key), worked out once per
        fusion instruction."""
        known = self._kernels_of.get(id(inst))
        if known is None:
            kernel_comp = self._kernel_computation_of(inst, comp)
            key = kernel_compiler.kernel_key(kernel_comp, self.target, self.arch,
                                             identity=self.identity,
                                             config=_gemm_tiling(inst))
            known = self._kernels_of[id(inst)] = (kernel_comp, key)
        return known

    def _kernel_computation_of(self, inst: HloInstruction, comp: HloComputation):
        known = self._kernel_comps.get(id(inst))
        if known is None:
            known = self._kernel_comps[id(inst)] = kernel_computation(comp)
        return known

    def _cached(self, key: str):
        return kernel_compiler.cached_kernel(key, self.target, self.disk) \
            if self.cache else None

    def _host_batcher(self):
        if not self.link_kernels:
            return None
        with self._batcher_lock:
            if not self._batcher_made:
                self._batcher = self.backend.host_batcher()
                self._batcher_made = True
                self._bound_batches()
            return self._batcher

    def _count_builds(self, builds: int) -> None:
        with self._batcher_lock:
            self._builds += builds
            self._bound_batches()

    def _bound_batches(self) -> None:
        """A batch holds at most its share of the kernels being built (one
        batch per compile thread, at least), and no fewer than
        HOST_BATCH_MIN_SHARE: a dozen kernels (a long sort's) compile side
        by side, while two or three small ones share one LLVM run, whose
        fixed cost is most of their time. (Called with the batcher's lock
        held.)"""
        if self._batcher is not None and self._builds:
            workers = min(os.cpu_count() or 1, PREFETCH_THREADS)
            self.backend.bound_batches(self._batcher,
                                       max(HOST_BATCH_MIN_SHARE, -(-self._builds // workers)))

    def _build(self, inst: HloInstruction, kernel_comp: HloComputation, key: str):
        """The kernel of fusion `inst`, compiled (and cached, unless it is
        still to link). Runs on the prefetch threads: touches nothing of
        this object but its read-only settings."""
        from ..analysis.fusion import analyze
        # A GEMM fusion's kernel: the tiling of its instruction.
        fusion = analyze(kernel_comp, _symbol(inst.name), self.module,
                         gemm_tiling=_gemm_tiling(inst))
        return kernel_compiler.compile_kernel(
            fusion, self.target, self.arch, cache=self.cache, key=key,
            text=fusion_text(kernel_comp), lower_only=self.link_kernels, disk=self.disk,
            # Without a cache nothing reads the kernel's emitted IR: only
            # its code joins the program.
            keep_emitted=self.cache, host_batch=self._host_batcher())

    def prefetch(self, fusions: list[tuple[HloInstruction, HloComputation]]) -> None:
        """Starts compiling the kernels of `fusions` that no cache holds on
        a pool of host threads (emission holds the GIL, but MLIR's passes,
        LLVM's NVPTX backend and nvJitLink or ptxas mostly do not), one per
        distinct kernel; `compile` then takes each result in the order the
        thunks need them, and raises a failure where the serial compile
        would have."""
        workers = min(os.cpu_count() or 1, PREFETCH_THREADS)
        if workers < 2:
            if self.progress is not None:
                self.progress.kernels(len({self._kernel_of(i, c)[1] for i, c in fusions}))
            return
        # The builds start as their keys are known, the slowest first (no
        # long one should start last and run alone while the other threads
        # idle): the weights are cheap, the keys (fingerprints of every
        # fusion, repeated layers included) are not, and the threads work
        # while this one fingerprints the rest.
        weighted = []
        for inst, comp in fusions:
            kernel_comp = self._kernel_computation_of(inst, comp)
            weighted.append((_build_weight(inst, kernel_comp), inst, comp))
        weighted.sort(key=lambda item: item[0], reverse=True)
        build = carry(self._build)
        futures = []
        for _, inst, comp in weighted:
            kernel_comp, key = self._kernel_of(inst, comp)
            if key in self.images or key in self._pending:
                continue
            exe = self._cached(key)
            if exe is not None:
                self._pending[key] = exe
                continue
            if self._pool is None:
                self._pool = _compile_pool(workers)
            self._pending[key] = future = self._pool.submit(build, inst, kernel_comp, key)
            futures.append(future)
        self._count_builds(len(futures))
        if futures and self.link_kernels:
            # Behind the builds in the pool's queue: a thread that finds no
            # build left compiles the kernels' batched code gathered so far.
            self._drains += [self._pool.submit(carry(self._drain_batches))
                             for _ in range(workers)]
        progress = self.progress
        if progress is not None and futures:
            progress.kernels(len(futures))
            for future in futures:     # (called at once for those already done)
                future.add_done_callback(lambda _: progress.kernel_done())

    def _build_op_kernel(self, fusion):
        """A kernel of a sort, top-k or convolution (`xla_gpu.op_kernels`),
        as the program builds its fusions' (cached unless still to link,
        its host code batched with theirs)."""
        return kernel_compiler.compile_kernel(
            fusion, self.target, self.arch, cache=self.cache, lower_only=self.link_kernels,
            disk=self.disk, keep_emitted=self.cache, host_batch=self._host_batcher())

    def prefetch_op_kernels(self, insts: list[HloInstruction]) -> None:
        """Starts building the kernels of the sorts, top-ks and convolutions
        `insts` on the compile threads, each kernel a task of its own (a
        long sort has a dozen), as `prefetch` does the fusions'. One whose
        fusions cannot be made is left to `op_build`'s caller, which
        raises where the serial compile would."""
        from .. import op_kernels
        workers = min(os.cpu_count() or 1, PREFETCH_THREADS)
        if workers < 2:
            return
        build = carry(self._build_op_kernel)
        for inst in insts:
            try:
                fusions = op_kernels.op_kernel_fusions(inst)
            except Exception:  # noqa: BLE001 - raised again by the emitter's compile
                continue
            for fusion in fusions:
                if self._pool is None:
                    self._pool = _compile_pool(workers)
                self._op_pending[(id(inst), fusion.name)] = self._pool.submit(build, fusion)
            self._count_builds(len(fusions))

    def op_build(self, inst: HloInstruction) -> "op_kernels.Build":
        """The `build` of `op_kernels.compile_sort` (and the others) for
        `inst`: the kernel `prefetch_op_kernels` started, else built now."""
        def build(fusion):
            future = self._op_pending.pop((id(inst), fusion.name), None)
            if future is not None:
                return future.result()
            return self._build_op_kernel(fusion)
        return build

    def _drain_batches(self) -> None:
        batcher = self._host_batcher()
        if batcher is not None:
            self.backend.drain_batches(batcher)

    def close(self) -> None:
        """Cancels what was prefetched and not used (a compile that failed
        part way) and lets the threads go."""
        from concurrent.futures import Future, wait
        running = [item for item in [*self._pending.values(), *self._op_pending.values(),
                                     *self._drains]
                   if isinstance(item, Future) and not item.cancel()]
        # The pool outlives this compile; what still runs for it finishes
        # before the compile returns (its errors are not wanted).
        wait(running)
        self._pool = None
        self._pending.clear()
        self._op_pending.clear()
        self._drains.clear()
        if self._batcher is not None:
            self.backend.discard_batches(self._batcher)

    def compile(self, inst: HloInstruction, comp: HloComputation) -> tuple[str, KernelImage]:
        """(kernel id, image) of fusion `inst` calling `comp`."""
        from concurrent.futures import Future
        kernel_comp, key = self._kernel_of(inst, comp)
        known = self.images.get(key)
        if known is not None:
            return key, known
        found = self._pending.pop(key, None)
        if found is None:
            found = self._cached(key)
        if isinstance(found, Future):                 # compiled by prefetch
            exe = found.result()
            self.compiled += 1
            self._count(exe)
        elif found is not None:                       # from a cache
            exe = found
            self.cached += 1
        else:
            exe = self._build(inst, kernel_comp, key)
            self.compiled += 1
            self._count(exe)
            if self.progress is not None:
                self.progress.kernel_done()
        return key, self._add_image(key, exe)

    def _count(self, exe) -> None:
        # Built by this compile: not a kernel an earlier one left in memory.
        if exe.built_at is not None and exe.built_at >= self._since:
            if exe.host_pending is not None:
                self._uncounted.append(exe)        # counted by `link`
                return
            for stage in STAGES:
                if stage in exe.timings:
                    self.stages[stage] = self.stages.get(stage, 0.0) + exe.timings[stage]

    def _add_image(self, key: str, exe) -> KernelImage:
        """The program's image of kernel `exe` under `key`; one to link
        (the backend's `link_item`) gets its code from `link`."""
        image = KernelImage(exe.spec, ptx=exe.ptx, cubin=exe.cubin,
                            host_library=exe.host_library)
        item = self.backend.link_item(exe) if self.link_kernels else None
        if item is not None:
            self._unlinked.append((image, exe, key, item))
        elif self.backend.emulates_grid and exe.host_code() is None:
            image.jit = getattr(exe._load(), "host", None)
        else:
            image.host_library = exe.host_library
        self.images[key] = image
        return image

    def link(self) -> None:
        """Links the program's kernels into binaries that their images
        share: on cuda the kernels built by this compile, into PTX modules
        and cubins, one per compile thread, compiled side by side, each
        holding about the same amount of code; on cpu every kernel's
        object into shared libraries, as few as their size allows
        (`backends.cpu.link_groups`). More groups only where kernel names
        clash. On cpu the host code of the kernels built now was compiled
        in batches (`backends.cpu.HostBatcher`): the batches still open are
        compiled first, side by side, and a batch's object, which every
        kernel of the batch (built now or cached) has, is linked once.
        Linked cuda kernels stay in this process' memory cache;
        they are not written to the disk cache, where each entry would
        carry a whole group's binary (cpu kernels were cached as their
        objects once their batch was compiled: `kernel_compiler.store`)."""
        backend = self.backend
        workers = min(os.cpu_count() or 1, PREFETCH_THREADS)
        for drain in self._drains:
            drain.result()
        if self._batcher is not None:
            # The batches still open, compiled side by side; then every
            # kernel built now has its object, and is cached with it.
            pool = _compile_pool(workers)
            backend.finish_batches(self._batcher,
                                   lambda fn, batches: pool.map(carry(fn), batches))
            unlinked = []
            for image, exe, key, item in self._unlinked:
                pending = exe.host_pending
                if pending is not None:
                    if pending.error is not None:
                        raise CompileError(f"fusion '{exe.spec.fusion}': {pending.error}")
                    exe.host_pending = None
                    item = backend.link_item(exe)
                    if self.cache:
                        kernel_compiler.store(key, exe, self.disk)
                unlinked.append((image, exe, key, item))
            self._unlinked = unlinked
            for exe in self._uncounted:
                self._count(exe)
            self._uncounted.clear()
        if not self._unlinked:
            return
        # Kernels whose code is one object (compiled together) share one
        # item, linked once; two kernels may share a name (then they go to
        # different groups).
        owners: dict[int, list] = {}
        items: dict[Any, Any] = {}
        for image, exe, key, item in self._unlinked:
            item = items.setdefault(backend.link_key(item), item)
            owners.setdefault(id(item), []).append((image, exe, key))
        groups = backend.link_groups(list(items.values()), workers)
        link = carry(functools.partial(_link_group, backend=backend, arch=self.arch))
        binaries = _compile_pool(workers).map(link, groups) if len(groups) > 1 else \
            map(link, groups)
        for group, binary in zip(groups, binaries):
            for image, exe, key in (owner for kernel in group for owner in owners[id(kernel)]):
                if binary.host_library is not None:
                    # cpu: the images share the library; the kernel cached
                    # keeps its object.
                    image.host_library = binary.host_library
                    continue
                image.ptx = exe.ptx = binary.ptx
                image.cubin = exe.cubin = binary.cubin
                exe.lowered = None
                if self.cache:
                    kernel_compiler.store(key, exe)
        self._unlinked.clear()

    def register(self, exe) -> str:
        """Adds a kernel compiled elsewhere (the sort, top-k and convolution
        kernels, `xla_gpu.op_kernels`) under its cache key; returns its
        kernel id. One still to link (`exe.lowered`) is linked with the
        program's others."""
        key = exe.key
        if key not in self.images:
            self._add_image(key, exe)
            self.compiled += 1
            self._count(exe)
        return key


def _build_weight(inst: HloInstruction, kernel_comp: HloComputation) -> tuple[int, int]:
    """How long building the kernel of fusion `inst` is expected to take,
    as a sort key: GEMM fusions (their unrolled tiles), then the fusions
    whose emitters read their input in their own order (reductions,
    transposes, scatters: kInput), then loop fusions; within each, by
    the body's size. (Host code of a cpu compile measured: 0.1-1.5 s for
    a GEMM or kInput kernel, a few hundredths for most loop kernels.)"""
    if _gemm_tiling(inst) is not None:
        rank = 2
    else:
        rank = 1 if str(inst.attrs.get("kind", "kLoop")) == "kInput" else 0
    return rank, len(kernel_comp)


def _gemm_tiling(inst: HloInstruction):
    """The tiling of a GEMM fusion (its triton_gemm_config or the heuristic
    table's; part of its kernel's key); None for other fusions."""
    from ..analysis.gemm import triton_gemm_tiling
    return triton_gemm_tiling(inst)


def _link_group(group, backend, arch: str):
    """One binary (cuda: a PTX module and cubin) for `group` (lowered
    kernels), in this thread's MLIR context; a failure names the group's
    kernels."""
    try:
        # Its own category: a "kernel" span is one kernel's compile.
        with span(f"link {len(group)} kernels", "link"):
            return backend.link(group, kernel_compiler.thread_context(), arch=arch)
    except CompileError as e:
        names = ", ".join(kernel.name for kernel in group)
        raise type(e)(f"linking kernels {names}: {e}") from None


# The kernel stages a program's timings sum (kernel_compiler and the
# backends time them): emission, the MLIR pipeline, and the target's code
# (cpu: LLVM and the shared object; cuda: PTX and the cubin).
STAGES = ("emit", "pipeline", "llvm", "ptx", "cubin")
# Host threads that compile a program's kernels side by side.
PREFETCH_THREADS = 8
# The fewest kernels a host-code batch is bounded to (`_bound_batches`).
HOST_BATCH_MIN_SHARE = 4
# A program's kernels share binaries (cuda: PTX modules and cubins; cpu:
# shared libraries) (False: one binary per kernel, as a single fusion's
# compile makes).
LINK_KERNELS = True
_pool_lock = threading.Lock()
_pool: Any = None


def _compile_pool(workers: int):
    """The process' kernel-compile threads, made on first use and kept:
    each thread keeps its MLIR context and parsed pass managers between
    compiles (making them again costs ~10-25 ms a thread, as much as
    compiling a small kernel), and no compile pays for starting threads."""
    global _pool
    with _pool_lock:
        if _pool is None:
            from concurrent.futures import ThreadPoolExecutor
            _pool = ThreadPoolExecutor(workers, thread_name_prefix="xla_gpu_compile")
        return _pool


def _forget_pool_after_fork() -> None:
    # A forked child has none of the parent's threads: it makes its own pool.
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_after_fork)


def _thunk_computations(entry: HloComputation) -> list[HloComputation]:
    """The program's computations that become thunks (not fusion bodies),
    in the order the thunks are emitted."""
    comps = reachable_computations(entry)
    bodies = {id(inst.attrs["calls"]) for comp in comps for inst in comp.instructions
              if inst.opcode == "fusion" and isinstance(inst.attrs.get("calls"), HloComputation)}
    return [comp for comp in reversed(comps) if id(comp) not in bodies]


def kernel_fusions(entry: HloComputation) -> list[tuple[HloInstruction, HloComputation]]:
    """The fusions of the program that may become kernels, in the order
    the thunks are emitted (fusions inside fusion bodies and those that
    are a broadcast constant, a memset, left out)."""
    found = []
    for comp in _thunk_computations(entry):
        for inst in comp.instructions:
            body = inst.attrs.get("calls") if inst.opcode == "fusion" else None
            if isinstance(body, HloComputation) and broadcast_constant(body) is None \
                    and not all_outputs_empty(inst):
                found.append((inst, body))
    return found


# The ops whose kernels `xla_gpu.op_kernels` compiles (the thunk emitter's
# sort, topk and convolution instructions).
OP_KERNEL_OPCODES = frozenset({"sort", "topk", "convolution"})


def op_kernel_instructions(entry: HloComputation) -> list[HloInstruction]:
    """The program's sorts, top-ks and convolutions (outside fusion
    bodies), in the order the thunks are emitted."""
    return [inst for comp in _thunk_computations(entry)
            for inst in comp.instructions if inst.opcode in OP_KERNEL_OPCODES]


def all_outputs_empty(inst: HloInstruction) -> bool:
    """Whether every array `inst` produces has no elements (a fusion that
    becomes no kernel)."""
    found = leaves(inst.shape)
    return bool(found) and all(shape.num_elements == 0 for _, shape in found)


def broadcast_constant(body: HloComputation) -> HloInstruction | None:
    """The constant a fusion body only broadcasts (through bitcasts and
    reshapes), None when it computes more: the candidates for a memset."""
    value = body.root
    if value is None or value.shape.is_tuple:
        return None
    while value.opcode in ("broadcast", "bitcast", "reshape") and value.operands:
        value = value.operands[0]
    return value if value.opcode == "constant" else None
