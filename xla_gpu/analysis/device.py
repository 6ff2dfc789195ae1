"""The GPU a kernel's launch configuration is chosen for: the analysis'
name for `xla_gpu.runtime.device`, the one device description (launch
limits included) that the emitters and the runtime both read.

    from xla_gpu.analysis.device import H200, RTX_A6000
    xla_gpu.compile(text, target="cpu", device=RTX_A6000)

Without `device=`, kernels are configured for their target's default
(`xla_gpu.backends.get(target).default_device`: the H200 on cuda, its host
emulation on the cpu target).
"""

from __future__ import annotations

from ..runtime.device import (DEFAULT_DEVICE, H200, HOST_EMULATION, RTX_A6000,
                              DeviceDescription, device_named)

__all__ = ["DeviceDescription", "H200", "RTX_A6000", "HOST_EMULATION", "DEFAULT_DEVICE",
           "device_named"]
