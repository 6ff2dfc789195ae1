"""jax's own cpu custom-call targets, available without registering them.

`jnp.linalg` and `jax.scipy.linalg` on cpu lower to typed-FFI custom calls
into jaxlib's LAPACK kernels (`lapack_spotrf_ffi`, `lapack_sgetrf_ffi`,
`lapack_dgesdd_ffi`, ...; `cpu_csr_sparse_dense_ffi` for sparse products).
jaxlib ships those handlers; when a program names one of them on the cpu
platform and nothing is registered under that name, `provide` registers
jaxlib's handler (after initializing jaxlib's lapack module, which binds
its kernels to SciPy's LAPACK), so that the program runs as jax would run
it. Explicit registrations win: a name already registered is left alone.

Nothing is imported until such a lookup misses: importing xla_gpu imports
neither jax nor jaxlib, and only names that look like jaxlib's
(`lapack_*`, `*_ffi`) make jaxlib be imported, once. Where jaxlib is not
installed the custom call fails as any unregistered one does, and
`missing_hint` adds that installing jax provides the target. cuda targets
(cuSOLVER, cuSPARSE) are not provided.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["provide", "missing_hint", "jaxlib_cpu_targets"]

_lock = threading.RLock()
# name -> (handler capsule, api_version); None until jaxlib was asked.
_targets: dict[str, tuple[Any, int]] | None = None
_why_not = ""            # why jaxlib provides nothing (not importable, ...)
_providing = threading.local()


def _looks_like_jaxlib(name: str) -> bool:
    return isinstance(name, str) and (name.startswith("lapack_") or name.endswith("_ffi"))


def _load() -> dict[str, tuple[Any, int]]:
    """jaxlib's cpu targets, read once (an empty dict without jaxlib)."""
    global _targets, _why_not
    with _lock:
        if _targets is not None:
            return _targets
        found: dict[str, tuple[Any, int]] = {}
        try:
            from jaxlib import lapack   # jaxlib only: does not import jax
        except Exception as e:   # not installed, or a broken install
            _why_not = f"jaxlib is not importable ({type(e).__name__}: {e})"
            _targets = found
            return found
        try:
            # Binds jaxlib's kernels to the LAPACK SciPy ships (what jax
            # does before it lowers a LAPACK call).
            lapack._lapack.initialize()
            for name, capsule, api_version in lapack.registrations().get("cpu", []):
                found[name] = (capsule, int(api_version))
        except Exception as e:
            _why_not = f"jaxlib's LAPACK could not be initialized ({type(e).__name__}: {e})"
        try:
            from jaxlib import cpu_sparse
            for name, capsule, api_version in cpu_sparse.registrations().get("cpu", []):
                found.setdefault(name, (capsule, int(api_version)))
        except Exception:   # older jaxlib: no cpu sparse kernels
            pass
        _targets = found
        return found


def jaxlib_cpu_targets() -> tuple[str, ...]:
    """The cpu targets the installed jaxlib provides (imports jaxlib; empty
    without it)."""
    return tuple(sorted(_load()))


def provide(name: str, platform: str) -> bool:
    """Registers jaxlib's handler for `name` on cpu when jaxlib has one and
    nothing is registered under that name; True when it did."""
    from .base import FfiRegistrationError, canonical_platform
    from .targets import register_ffi_target
    try:
        if canonical_platform(platform) != "cpu":
            return False
    except FfiRegistrationError:
        return False
    if not _looks_like_jaxlib(name) or getattr(_providing, "active", False):
        return False
    entry = _load().get(name)
    if entry is None:
        return False
    capsule, api_version = entry
    _providing.active = True   # the registration looks the name up itself
    try:
        register_ffi_target(name, capsule, platform="cpu", api_version=api_version)
    except FfiRegistrationError:
        return False   # another handler holds the name: it stays
    finally:
        _providing.active = False
    return True


def missing_hint(name: str, platform: str = "cpu") -> str:
    """A sentence for the error of a custom call without handler: that
    installing jax provides `name`, when it looks like one of jaxlib's cpu
    targets and jaxlib is not there to provide it; "" otherwise."""
    if str(platform).lower() not in ("cpu", "host") or not _looks_like_jaxlib(name):
        return ""
    if not _load() or _why_not:
        return (f"; if '{name}' is one of jax's own cpu targets (its LAPACK calls "
                "lapack_*_ffi and the like), installing jax (pip install jax) provides "
                f"it: xla_gpu registers jaxlib's handlers itself, but {_why_not}")
    return ""   # jaxlib is there and has no such target
