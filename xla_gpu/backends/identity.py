"""What identifies a compiler without running it: digests of files by
their metadata (path, size, mtime, ctime, inode, never their contents) and
of the host CPU, which the backends' `compiler_identity` and the compile
cache's package identity are made of (`xla_gpu.compile_cache`).

Nothing here imports the compiler or calls into a library: a cache hit
costs a millisecond of it rather than the MLIR import. An edit or a
reinstall changes the metadata (an edit moves mtime and ctime; ctime moves
even when mtime is set back).
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys

__all__ = ["stat_into", "files_under", "dist_records", "package_locations",
           "package_location", "cuda_tool_files", "cuda_identity", "host_identity"]


def stat_into(h, path: str) -> None:
    """Adds what identifies the content of the file at `path` (a link is
    followed: a library's versioned name) without reading it."""
    try:
        info = os.stat(path)
    except OSError:
        h.update(f"{path}\0<missing>\n".encode())
        return
    h.update(f"{path}\0{info.st_size}:{info.st_mtime_ns}:{info.st_ctime_ns}:"
             f"{info.st_ino}:{info.st_dev}\n".encode())


def files_under(root: str, skip: tuple[str, ...] = ()) -> list[str]:
    """The files under `root` (not following links to directories), but
    for directories named in `skip` and bytecode caches; sorted."""
    found: list[str] = []
    pending = [root]
    while pending:
        directory = pending.pop()
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        if entry.name not in skip and entry.name != "__pycache__":
                            pending.append(entry.path)
                    elif not entry.name.endswith(".pyc"):
                        found.append(entry.path)
        except OSError:
            found.append(directory + "/<unreadable>")
    return sorted(found)


def dist_records(site: str, dists: tuple[str, ...]) -> list[str]:
    """The RECORD files of installed distributions `dists` (normalized
    names) in the directory `site`: a reinstall or an upgrade rewrites
    them."""
    try:
        names = os.listdir(site)
    except OSError:
        return []
    found = []
    for name in names:
        if name.endswith(".dist-info") and \
                name.split("-", 1)[0].lower().replace(".", "_") in dists:
            found.append(os.path.join(site, name, "RECORD"))
    return sorted(found)


def package_locations(name: str) -> list[str]:
    """The directories of the top-level package `name` (a namespace
    package, `nvidia`, may have several), found without importing it."""
    module = sys.modules.get(name)
    locations = list(getattr(module, "__path__", None) or [])
    if not locations:
        from importlib.util import find_spec
        try:
            spec = find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.submodule_search_locations:
            locations = list(spec.submodule_search_locations)
    return locations


def package_location(name: str) -> str | None:
    locations = package_locations(name)
    return locations[0] if locations else None


def _listdir(directory: str) -> list[str]:
    try:
        return os.listdir(directory)
    except OSError:
        return []


def cuda_tool_files() -> list[str]:
    """Every ptxas, libdevice and nvJitLink library where codegen (and
    cuda-python's loader, for nvJitLink) looks for them: the `nvidia`
    wheels (one level down: nvidia/cu13/bin/ptxas), CUDA_HOME / CUDA_PATH,
    /usr/local/cuda*, conda, the library path. All candidates count, not
    only the one in use: a change to any of them misses the cache (at worst
    a recompilation too many). Directory listings, not globs: this runs
    before every cache lookup."""
    roots: list[str] = []
    for nvidia in package_locations("nvidia"):
        roots += [nvidia] + [os.path.join(nvidia, name) for name in sorted(_listdir(nvidia))]
    for env in ("CUDA_HOME", "CUDA_PATH", "CONDA_PREFIX"):
        if os.environ.get(env):
            roots.append(os.environ[env])
    roots += [os.path.join("/usr/local", name) for name in sorted(_listdir("/usr/local"))
              if name.startswith("cuda")]
    library_dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    library_dirs += ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64"]
    found = []
    for root in roots:
        found.append(os.path.join(root, "bin", "ptxas"))
        libdevice = os.path.join(root, "nvvm", "libdevice")
        found += [os.path.join(libdevice, name) for name in _listdir(libdevice)
                  if name.startswith("libdevice")]
        library_dirs += [os.path.join(root, "lib"), os.path.join(root, "lib64")]
        targets = os.path.join(root, "targets")
        library_dirs += [os.path.join(targets, name, "lib") for name in _listdir(targets)]
    for directory in library_dirs:
        found += [os.path.join(directory, name) for name in _listdir(directory)
                  if name.startswith("libnvJitLink.so")]
    from shutil import which
    ptxas = which("ptxas")
    if ptxas:
        found.append(ptxas)
    # A path that does not exist counts too (as missing): ptxas installed
    # where there was none changes the identity.
    return sorted(set(found))


@functools.lru_cache(maxsize=None)
def cuda_identity() -> str:
    """What turns PTX into a cubin (nvJitLink or ptxas, whichever codegen
    picks: every candidate, and the choice) and libdevice, by file
    metadata; cuda-python's install record (its nvJitLink bindings). An
    embedded libdevice comes with the MLIR bindings (in the package
    identity)."""
    h = hashlib.sha256()
    for env in ("XLA_GPU_CUBIN_COMPILER", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH"):
        h.update(f"{env}={os.environ.get(env, '')}\n".encode())
    for path in cuda_tool_files():
        stat_into(h, path)
    cuda = package_location("cuda")
    if cuda is not None:
        for path in dist_records(os.path.dirname(cuda),
                                 ("cuda_bindings", "cuda_python", "cuda_pathfinder")):
            stat_into(h, path)
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def host_identity() -> str:
    """The host CPU a cpu-target kernel is compiled for: its model and
    features (the first processor's, as LLVM's host CPU detection sees
    them)."""
    h = hashlib.sha256(os.uname().machine.encode())
    try:
        # Only the first processor's lines: on a large machine the whole of
        # /proc/cpuinfo takes milliseconds to produce.
        with open("/proc/cpuinfo", "rb") as f:
            head = f.read(32768)
        for line in head.split(b"\n\n", 1)[0].splitlines():
            if line.startswith((b"flags", b"Features", b"model name", b"vendor_id",
                                b"CPU implementer", b"CPU part")):
                h.update(line + b"\n")
    except OSError:
        import platform
        h.update(platform.processor().encode())
    return h.hexdigest()
