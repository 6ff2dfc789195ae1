"""Reading a saved kernel directory safely. numpy only.

An artifact directory (what `Executable.save` writes) holds a fixed set of
files and `digests.json`, the SHA-256 of each. Reading one:

  * only the known file names are read (a name in digests.json cannot point
    outside the directory), each must be a regular file (no symlinks, no
    devices) no larger than `MAX_FILE_BYTES`, checked before reading;
  * every file listed must match its digest, so a truncated or edited file
    is refused before anything is loaded from it;
  * `expected_digest` (the `artifact_digest` that `save` returned) pins the
    whole directory: digests.json itself must hash to it, so whoever can
    write to the directory cannot swap files and digests together;
  * `validate_spec` checks kernel.json against the fusion it was compiled
    from (fusion.hlo): parameter and output shapes and types, in-place
    aliases and launch dimensions, so an edited manifest cannot make a
    kernel write past the buffers it is given.

What is NOT protected: an artifact is code. Loading a directory runs its
kernel (a host shared object on the cpu target, a cubin on cuda) in the
calling process, exactly like loading a shared library — load only
directories you (or someone you trust) wrote, and pin them with
`expected_digest` when they pass through untrusted storage.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
from pathlib import Path
from typing import Any

from .._readable_json import readable_json
from ..errors import ArgumentError, ArtifactError
from .spec import KernelSpec

__all__ = ["ARTIFACT_FILES", "MAX_FILE_BYTES", "read_artifact", "write_artifact",
           "digest_of", "validate_spec", "check_load_arguments"]

ARTIFACT_FILES = ("kernel.json", "fusion.hlo", "emitted.mlir", "kernel.ptx",
                  "kernel.cubin", "kernel.host.mlir", "kernel.o", "kernel.so")
MAX_FILE_BYTES = 1 << 30
_MAX_MANIFEST_BYTES = 1 << 16
# CUDA's limits on a launch (x dimension of the grid; threads per block).
MAX_BLOCKS = (1 << 31) - 1
MAX_THREADS_PER_BLOCK = 1024
MAX_SHARED_BYTES = 227 * 1024


def digest_of(manifest: bytes) -> str:
    """The digest that pins an artifact: SHA-256 of its digests.json."""
    return hashlib.sha256(manifest).hexdigest()


def _read_regular(path: Path, limit: int) -> bytes:
    try:
        info = path.lstat()
    except FileNotFoundError:
        raise ArtifactError(f"{path}: missing") from None
    except OSError as e:
        raise ArtifactError(f"{path}: {e.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise ArtifactError(f"{path}: not a regular file (symlinks and devices are refused)")
    if info.st_size > limit:
        raise ArtifactError(f"{path}: {info.st_size} bytes, more than the {limit} allowed")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise ArtifactError(f"{path}: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ArtifactError(f"{path}: grew past {limit} bytes while read")
    return data


def check_load_arguments(directory: Any, expected_digest: Any, trusted: Any) -> None:
    """`directory` is a path, and the load is pinned (`expected_digest`: the `artifact_digest` that save
    returned) or explicitly trusted; anything else is refused: an artifact
    is code, and without the pin whoever can write the directory chooses
    what runs."""
    if not isinstance(directory, (str, os.PathLike)):
        raise ArgumentError(f"an artifact directory must be a path, got {directory!r}")
    if expected_digest is not None and (
            not isinstance(expected_digest, str) or
            not re.fullmatch(r"[0-9a-f]{64}", expected_digest)):
        raise ArgumentError(f"expected_digest must be the 64-hex-digit artifact_digest that "
                            f"save() returned, got {expected_digest!r}")
    if not isinstance(trusted, bool):
        raise ArgumentError(f"trusted must be True or False, got {trusted!r}")
    if expected_digest is None and not trusted:
        raise ArtifactError(
            f"{directory}: refusing an unpinned artifact: pass expected_digest= (the "
            "artifact_digest that save() returned) or, for a directory only you can "
            "write, trusted=True (loading an artifact runs its code: SECURITY.md)")


def read_artifact(directory: str | Path, expected_digest: str | None = None, *,
                  allowed=None, required: str = "kernel.json", trusted: bool = False
                  ) -> tuple[dict[str, bytes], str]:
    """The verified files of an artifact directory and its digest; raises
    ArtifactError naming the file when anything is off. `allowed(name)`
    says which relative names may appear (default: ARTIFACT_FILES); a
    name may never leave the directory. Unpinned reads (no
    `expected_digest`) need `trusted=True`."""
    if allowed is None:
        allowed = ARTIFACT_FILES.__contains__
    check_load_arguments(directory, expected_digest, trusted)
    directory = Path(directory)
    if not directory.is_dir():
        raise ArtifactError(f"{directory}: not a directory")
    if not (directory / "digests.json").exists() and not (directory / "digests.json").is_symlink():
        kind = "kernel" if required == "kernel.json" else "program"
        raise ArtifactError(f"{directory}: no {required} and no digests.json (not a saved "
                            f"{kind})")
    manifest = _read_regular(directory / "digests.json", _MAX_MANIFEST_BYTES)
    digest = digest_of(manifest)
    if expected_digest is not None and not hmac.compare_digest(digest, expected_digest):
        raise ArtifactError(f"{directory}: digests.json does not match the expected "
                            "artifact digest (the directory was changed)")
    try:
        digests = json.loads(manifest)
    except (ValueError, UnicodeDecodeError) as e:
        raise ArtifactError(f"{directory / 'digests.json'}: unreadable ({e})") from None
    if not isinstance(digests, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v)
            for k, v in digests.items()):
        raise ArtifactError(f"{directory / 'digests.json'}: not a map of file names "
                            "to SHA-256 digests")
    unknown = sorted(name for name in digests
                     if not _inside(name) or not allowed(name))
    if unknown:
        raise ArtifactError(f"{directory / 'digests.json'}: unknown file(s) "
                            f"{', '.join(map(repr, unknown))}")
    if required not in digests:
        raise ArtifactError(f"{directory}: no {required} (not a saved "
                            f"{'kernel' if required == 'kernel.json' else 'program'})")
    files: dict[str, bytes] = {}
    for name, want in digests.items():
        path = directory / name
        for parent in list(path.relative_to(directory).parents)[:-1]:
            if (directory / parent).is_symlink():
                raise ArtifactError(f"{directory / parent}: a symlink (refused)")
        data = _read_regular(path, MAX_FILE_BYTES)
        if not hmac.compare_digest(hashlib.sha256(data).hexdigest(), want):
            raise ArtifactError(f"{directory / name}: does not match its digest "
                                "(truncated, corrupt or edited)")
        files[name] = data
    return files, digest


def write_artifact(directory: str | os.PathLike, files: dict[str, bytes]) -> str:
    """Writes `files` (relative names, '/'-separated) and their
    digests.json into `directory` (created, parents included) and returns
    the artifact digest. Links are never followed: the directory and every
    subdirectory are opened with O_NOFOLLOW, and each file is written to a
    fresh temporary name and renamed over its final name (a planted
    symlink is replaced, never written through). digests.json comes last,
    so an interrupted save leaves a directory that does not load."""
    if not isinstance(directory, (str, os.PathLike)):
        raise ArgumentError(f"save() takes a directory path, got {directory!r}")
    directory = Path(directory)
    manifest = readable_json({name: hashlib.sha256(data).hexdigest()
                              for name, data in files.items()}).encode()
    try:
        if directory.is_symlink():
            raise ArtifactError(f"{directory}: a symlink (refused: save writes only into "
                                "a real directory)")
        if directory.exists() and not directory.is_dir():
            raise ArtifactError(f"{directory}: exists and is not a directory")
        directory.mkdir(parents=True, exist_ok=True)
        root = os.open(directory, _DIRECTORY_FLAGS)
    except ArtifactError:
        raise
    except OSError as e:
        raise ArtifactError(f"{directory}: cannot save there ({e.strerror or e})") from None
    try:
        for name, data in [*files.items(), ("digests.json", manifest)]:
            if not _inside(name):
                raise ArtifactError(f"{directory}: {name!r} is not a plain relative name")
            _write_file(root, directory, name, data)
    finally:
        os.close(root)
    return digest_of(manifest)


_DIRECTORY_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)


def _write_file(root: int, directory: Path, name: str, data: bytes) -> None:
    """`data` as `name` under the directory open as `root` (see
    write_artifact): subdirectories made and opened without following
    links, the bytes written under a temporary name, then renamed."""
    *parents, leaf = name.split("/")
    opened: list[int] = []
    tmp = None
    parent = root
    try:
        for part in parents:
            try:
                os.mkdir(part, 0o755, dir_fd=parent)
            except FileExistsError:
                pass
            parent = os.open(part, _DIRECTORY_FLAGS, dir_fd=parent)
            opened.append(parent)
        tmp = f".{leaf}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL |
                     getattr(os, "O_NOFOLLOW", 0), 0o644, dir_fd=parent)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, leaf, src_dir_fd=parent, dst_dir_fd=parent)
        tmp = None
    except OSError as e:
        what = "a symlink or not a directory (refused)" if e.errno in (
            errno.ELOOP, errno.ENOTDIR) else (e.strerror or str(e))
        raise ArtifactError(f"{directory / name}: cannot write: {what}") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp, dir_fd=parent)
            except OSError:
                pass
        for fd in reversed(opened):
            os.close(fd)


def _inside(name: str) -> bool:
    """A relative name of plain components (no '..', no absolute path)."""
    parts = name.split("/")
    return bool(name) and not name.startswith("/") and all(
        p not in ("", ".", "..") and "\\" not in p for p in parts)


def parse_spec(files: dict[str, bytes], where: str) -> KernelSpec:
    try:
        return KernelSpec.from_json(files["kernel.json"].decode())
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, AttributeError) as e:
        raise ArtifactError(f"{where}/kernel.json: unreadable ({type(e).__name__}: {e})") \
            from None


def validate_spec(spec: KernelSpec, fusion_hlo: str | None, where: str) -> None:
    """Checks the manifest against the kernel's ABI: launch limits, names,
    aliases, and (given the fusion's HLO) every parameter and output."""
    def bad(message: str) -> ArtifactError:
        return ArtifactError(f"{where}/kernel.json: {message}")

    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.$]*", spec.name or ""):
        raise bad(f"kernel name {spec.name!r} is not a symbol name")
    if spec.target not in ("cuda", "cpu"):
        raise bad(f"unknown target {spec.target!r}")
    # No blocks: a fusion whose outputs are all empty launches nothing.
    empty = bool(spec.outputs) and all(0 in a.shape for a in spec.outputs)
    for field, value, least, limit in (
            ("threads", spec.threads, 1, MAX_THREADS_PER_BLOCK),
            ("blocks", spec.blocks, 0 if empty else 1, MAX_BLOCKS),
            ("shared_bytes", spec.shared_bytes, 0, MAX_SHARED_BYTES)):
        if not isinstance(value, int) or isinstance(value, bool) or \
                value < least or value > limit:
            raise bad(f"{field}={value!r} is outside [{least}, {limit}]")
    for k, j in spec.aliases.items():
        if not (0 <= k < len(spec.outputs) and 0 <= j < len(spec.parameters)):
            raise bad(f"alias output {k} -> parameter {j} names no such argument")
        out, param = spec.outputs[k], spec.parameters[j]
        if (out.dtype, out.size) != (param.dtype, param.size):
            raise bad(f"output {k} ({spec.outputs[k].describe()}) is written in place "
                      f"into parameter {j} ({spec.parameters[j].describe()}) of "
                      "another element type or size")
    for arg in (*spec.parameters, *spec.outputs):
        if any(not isinstance(d, int) or d < 0 for d in arg.shape):
            raise bad(f"bad shape {list(arg.shape)}")
        try:
            arg.storage_dtype
        except KeyError:
            raise bad(f"unknown element type {arg.dtype!r}") from None
    if fusion_hlo is None:
        return
    from ..hlo import HloError, parse_module
    from ..hlo.fusions import fusion_computation
    try:
        module = parse_module(fusion_hlo, source=f"{where}/fusion.hlo")
        _, comp = fusion_computation(module, spec.fusion or None)
    except HloError as e:
        raise ArtifactError(f"{where}/fusion.hlo: {e}") from None
    params = [(tuple(p.shape.dims), p.shape.element_type) for p in comp.parameters]
    root = comp.root
    roots = list(root.operands) if root.opcode == "tuple" else [root]
    outputs = [(tuple(s.dims), s.element_type) for r in roots for s in r.shape.leaves()]
    have_params = [(tuple(a.shape), a.dtype) for a in spec.parameters]
    have_outputs = [(tuple(a.shape), a.dtype) for a in spec.outputs]
    if have_params != params:
        raise bad(f"parameters {have_params} differ from the fusion's {params}")
    if have_outputs != outputs:
        raise bad(f"outputs {have_outputs} differ from the fusion's {outputs}")
