"""The one description of a GPU: what the emitters choose a launch
configuration for, and what a launch may ask of it.

XLA chooses unroll factors and reduction vector sizes from a device
description (`se::DeviceDescription`: SM count, threads per SM, ...): a
loop fusion is unrolled only when its output has at least as many elements
as the GPU runs threads at once, and a multi-row reduction halves its
vectors until it has a block per SM. The same description carries the
launch limits (threads per block, grid extents, shared memory per block
with and without opting in, registers), which `check_launch` holds a
kernel to: codegen after ptxas, the runtime before a launch. The analysis
(`xla_gpu.analysis.device` re-exports these names) and the runtime read
the same objects.

    from xla_gpu.runtime.device import H200, RTX_A6000
    xla_gpu.compile(text, target="cpu", device=RTX_A6000)

The default is the H200 (the GPU xla_gpu targets); XLA's own emitter tests
describe an RTX A6000 (their harness's `TestGpuDeviceInfo::
RTXA6000DeviceInfo`), which `RTX_A6000` reproduces so that those tests can
be run as they are defined. cpu-target kernels are configured for
`HOST_EMULATION` (the H200's, with loop fusions not unrolled); `device=H200`
runs the cuda kernel's exact configuration on the host. Which description
a target starts from is its backend's (`xla_gpu.backends.get(target).
default_device`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

from ..errors import ArgumentError, ResourceError

__all__ = ["DeviceDescription", "H200", "RTX_A6000", "HOST_EMULATION", "DEFAULT_DEVICE",
           "device_named", "for_arch", "check_launch", "registers_per_block"]


@dataclass(frozen=True)
class DeviceDescription:
    """What the launch configuration depends on, and what one launch may
    ask of the GPU."""
    name: str
    core_count: int                   # streaming multiprocessors
    threads_per_core_limit: int       # resident threads per SM
    threads_per_block_limit: int = 1024
    threads_per_warp: int = 32
    # Blocks per grid: x up to 2^31-1, y and z up to 65535.
    block_dim_limit_x: int = (1 << 31) - 1
    block_dim_limit_yz: int = 65535
    # Shared memory of one block: dynamic shared memory above the default
    # needs cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES); static plus
    # dynamic is at most the opt-in limit.
    shared_memory_per_block: int = 48 * 1024
    shared_memory_per_block_optin: int = 227 * 1024
    registers_per_block_limit: int = 65536
    registers_per_core_limit: int = 65536
    # Kernels run by the cpu target's grid emulation, not by a GPU: the
    # emitters may choose what suits a host's SIMD lanes where it differs.
    host_emulation: bool = False
    # Major * 10 + minor (90 for sm_90): which instructions the emitters may
    # choose (mma.sync's m16n8k16 and bf16 forms need 80 or more).
    compute_capability: int = 90

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            if field.type != "int":
                continue
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ArgumentError(f"DeviceDescription.{field.name} must be a positive int, "
                                    f"got {value!r}")
        if self.shared_memory_per_block_optin < self.shared_memory_per_block:
            raise ArgumentError(
                f"DeviceDescription '{self.name}': the opt-in shared memory per block "
                f"({self.shared_memory_per_block_optin}) is below the default "
                f"({self.shared_memory_per_block})")

    @property
    def max_resident_threads(self) -> int:
        """Threads the whole GPU runs at once (SMs x threads per SM)."""
        return self.core_count * self.threads_per_core_limit


H200 = DeviceDescription("NVIDIA H200", core_count=132, threads_per_core_limit=2048)
# sm_86: 99 KiB of shared memory per block with opt-in.
RTX_A6000 = DeviceDescription("NVIDIA RTX A6000", core_count=84, threads_per_core_limit=1536,
                              shared_memory_per_block_optin=99 * 1024,
                              compute_capability=86)
DEFAULT_DEVICE = H200
# The cpu target's: the H200 with no limit on resident threads (the host
# emulation runs any number of them as loop iterations). A loop fusion is
# then never unrolled, so consecutive threads touch consecutive elements
# and LLVM vectorizes the thread loop with plain vector loads and stores;
# an unrolled thread's elements are strided across threads (shuffles,
# register spills: gelu f32 took 0.96 ms instead of 0.55 on one core).
# Reductions of a few thousand elements or more take host layouts (a thread
# per column, or per short row: see emitters/reduction.py); everything else
# (reduction vector sizes, tiles, launch limits) is the H200's.
HOST_EMULATION = DeviceDescription("NVIDIA H200 emulated on the host", core_count=132,
                                   threads_per_core_limit=2**30, host_emulation=True)

_KNOWN = {d.name: d for d in (H200, RTX_A6000, HOST_EMULATION)}


def device_named(name: str) -> DeviceDescription:
    """A known description by its name ("NVIDIA H200", "NVIDIA RTX A6000")."""
    if name not in _KNOWN:
        raise ArgumentError(f"unknown device {name!r}: one of {', '.join(_KNOWN)}")
    return _KNOWN[name]


# Opt-in shared memory per block by compute capability (CUDA programming
# guide, "Technical Specifications per Compute Capability").
_SHARED_OPTIN = {70: 96 * 1024, 72: 48 * 1024, 75: 64 * 1024, 80: 163 * 1024,
                 86: 99 * 1024, 87: 163 * 1024, 89: 99 * 1024, 90: 227 * 1024,
                 100: 227 * 1024, 103: 227 * 1024, 110: 227 * 1024, 120: 99 * 1024,
                 121: 99 * 1024}


def for_arch(arch: str) -> DeviceDescription:
    """The description of a GPU of `arch` ("sm_XX") as far as code
    generation knows it: the H200's, with the arch's compute capability
    and opt-in shared memory per block (what differs between the archs
    ptxas compiles for, as far as the emitters and launch checks care).
    The H200 itself for sm_90 and for an unknown arch."""
    digits = "".join(c for c in arch[3:] if c.isdigit()) if arch.startswith("sm_") else ""
    capability = int(digits) if digits else None
    optin = _SHARED_OPTIN.get(capability) if capability is not None else None
    if optin is None or capability == H200.compute_capability:
        return H200
    return dataclasses.replace(H200, name=f"NVIDIA H200 with {arch}'s launch limits",
                               shared_memory_per_block_optin=optin,
                               compute_capability=capability)


def registers_per_block(registers_per_thread: int, threads: int) -> int:
    """Registers a block of `threads` occupies: allocated per warp in units
    of 256 (8 per thread)."""
    per_warp = -(-registers_per_thread * 32 // 256) * 256
    return per_warp * -(-threads // 32)


def check_launch(name: str, threads: int, blocks: int | Sequence[int], shared_bytes: int = 0,
                 *, static_shared_bytes: int = 0, registers_per_thread: int = 0,
                 max_threads: int | None = None,
                 limits: DeviceDescription = H200) -> None:
    """ResourceError when a launch of kernel `name` breaks a limit of the
    device `limits` describes (the H200 by default): threads per block,
    grid dimensions (x <= 2^31-1, y/z <= 65535), shared memory (static +
    dynamic, at most the opt-in limit), registers x threads, or the loaded
    function's own MAX_THREADS_PER_BLOCK (`max_threads`)."""
    grid = (blocks, 1, 1) if isinstance(blocks, int) else tuple(blocks) + (1,) * (3 - len(blocks))
    where = f"kernel '{name}'"
    if not 1 <= threads <= limits.threads_per_block_limit:
        raise ResourceError(f"{where}: {threads} threads per block; CUDA allows 1 to "
                            f"{limits.threads_per_block_limit}")
    if not 1 <= grid[0] <= limits.block_dim_limit_x:
        raise ResourceError(f"{where}: a grid of {grid[0]} blocks in x; CUDA allows 1 to "
                            f"{limits.block_dim_limit_x} (the loop emitter spreads larger "
                            "grids over y)")
    for axis, extent in zip("yz", grid[1:]):
        if not 1 <= extent <= limits.block_dim_limit_yz:
            raise ResourceError(f"{where}: a grid of {extent} blocks in {axis}; CUDA allows "
                                f"1 to {limits.block_dim_limit_yz}")
    total_shared = static_shared_bytes + shared_bytes
    if shared_bytes < 0 or total_shared > limits.shared_memory_per_block_optin:
        raise ResourceError(f"{where}: {static_shared_bytes} bytes of static and "
                            f"{shared_bytes} of dynamic shared memory; a block can have at "
                            f"most {limits.shared_memory_per_block_optin}")
    if max_threads is not None and threads > max_threads:
        raise ResourceError(f"{where}: the launch has {threads} threads per block; the "
                            f"loaded kernel allows at most {max_threads}"
                            + (f" (it uses {registers_per_thread} registers per thread)"
                               if registers_per_thread else ""))
    if registers_per_thread:
        used = registers_per_block(registers_per_thread, threads)
        if used > limits.registers_per_block_limit:
            raise ResourceError(f"{where}: {registers_per_thread} registers per thread x "
                                f"{threads} threads need {used} registers; a block has "
                                f"{limits.registers_per_block_limit}")
