"""The GPU a kernel's launch configuration is chosen for.

XLA chooses unroll factors and reduction vector sizes from a device
description (`se::DeviceDescription`: SM count, threads per SM, ...): a
loop fusion is unrolled only when its output has at least as many elements
as the GPU runs threads at once, and a multi-row reduction halves its
vectors until it has a block per SM. xla_gpu's emitters do the same with a
`DeviceDescription`; the default is the H200 (the GPU xla_gpu targets),
and XLA's own emitter tests describe an RTX A6000 (their harness's
`TestGpuDeviceInfo::RTXA6000DeviceInfo`), which `RTX_A6000` reproduces so
that those tests can be run as they are defined.

    from xla_gpu.analysis.device import H200, RTX_A6000
    xla_gpu.compile(text, target="cpu", device=RTX_A6000)

Without `device=`, cuda kernels are configured for the H200 and cpu-target
kernels for `HOST_EMULATION` (the H200's, with loop fusions not unrolled);
`device=H200` runs the cuda kernel's exact configuration on the host.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DeviceDescription", "H200", "RTX_A6000", "HOST_EMULATION", "DEFAULT_DEVICE",
           "default_device", "device_named"]


@dataclass(frozen=True)
class DeviceDescription:
    """What the launch configuration depends on."""
    name: str
    core_count: int                   # streaming multiprocessors
    threads_per_core_limit: int       # resident threads per SM
    threads_per_block_limit: int = 1024
    threads_per_warp: int = 32
    # Kernels run by the cpu target's grid emulation, not by a GPU: the
    # emitters may choose what suits a host's SIMD lanes where it differs.
    host_emulation: bool = False

    def __post_init__(self) -> None:
        for field in ("core_count", "threads_per_core_limit", "threads_per_block_limit",
                      "threads_per_warp"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"DeviceDescription.{field} must be a positive int, "
                                 f"got {value!r}")

    @property
    def max_resident_threads(self) -> int:
        """Threads the whole GPU runs at once (SMs x threads per SM)."""
        return self.core_count * self.threads_per_core_limit


H200 = DeviceDescription("NVIDIA H200", core_count=132, threads_per_core_limit=2048)
RTX_A6000 = DeviceDescription("NVIDIA RTX A6000", core_count=84, threads_per_core_limit=1536)
DEFAULT_DEVICE = H200
# The cpu target's: the H200 with no limit on resident threads (the host
# emulation runs any number of them as loop iterations). A loop fusion is
# then never unrolled, so consecutive threads touch consecutive elements
# and LLVM vectorizes the thread loop with plain vector loads and stores;
# an unrolled thread's elements are strided across threads (shuffles,
# register spills: gelu f32 took 0.96 ms instead of 0.55 on one core).
# Large column reductions take a thread per column (see
# emitters/reduction.py); everything else (reduction vector sizes, tiles)
# is the H200's.
HOST_EMULATION = DeviceDescription("NVIDIA H200 emulated on the host", core_count=132,
                                   threads_per_core_limit=2**30, host_emulation=True)

_KNOWN = {d.name: d for d in (H200, RTX_A6000, HOST_EMULATION)}


def default_device(target: str) -> DeviceDescription:
    """The description kernels are configured for when none is given:
    the H200 on cuda, its host emulation on the cpu target."""
    return HOST_EMULATION if target == "cpu" else DEFAULT_DEVICE


def device_named(name: str) -> DeviceDescription:
    """A known description by its name ("NVIDIA H200", "NVIDIA RTX A6000")."""
    if name not in _KNOWN:
        raise ValueError(f"unknown device {name!r}: one of {', '.join(_KNOWN)}")
    return _KNOWN[name]
