"""The compiler (and jax 0.10) for the GPU machine, carried in pieces.

The GPU machine's image has Python 3.12, cuda-python, numpy and jax 0.11.2,
but no MLIR: there it can run saved programs, not compile them. A device
call carries at most 64 MiB with the tree, and what the compiler needs is
larger (the MLIR bindings for Python 3.12, LLVM's shared library, this
package's native part; jax and jaxlib 0.10.2 for the PJRT plugin, which
speaks their C API), so it goes in chunks, one call each, into /tmp of a
machine kept warm between the calls, then is installed there:

    # here: the wheels for Python 3.12 and a tar.xz of the native parts,
    # split into .gpu_bundle/1, 2, ... (each under 48 MiB)
    python bench/gpu_bundle.py make [--with-jax]
    # there, one call per chunk, each right after the last (the machine
    # goes back 30 s after a call):  carry .gpu_bundle/K
    python3 bench/gpu_bundle.py receive .gpu_bundle/K
    # there, in the last call: join, check, install into /tmp/xla_gpu_site
    # and link the native parts into the tree; then the compiler imports
    python3 bench/gpu_bundle.py install && export PYTHONPATH=/tmp/xla_gpu_site

`install` checks every joined file against the sha256 `make` recorded and
extracts the tar with tarfile's "data" filter (no links out of the target,
no device files). jax and jaxlib 0.10.2 go to a folder of their own
(/tmp/xla_gpu_site_jax): on PYTHONPATH they hide the image's jax 0.11.2,
which XLA:GPU's side of the benchmarks needs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BUNDLE = ROOT / ".gpu_bundle"
RECEIVED = Path("/tmp/xla_gpu_bundle")
SITE = Path("/tmp/xla_gpu_site")
# The native parts and libLLVM.so, apart from SITE: an `xla_gpu` folder on
# PYTHONPATH would be imported as a namespace package instead of the tree's.
NATIVE_SITE = Path("/tmp/xla_gpu_native")
JAX_SITE = Path("/tmp/xla_gpu_site_jax")
CHUNK = 48 << 20
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64"]
# The package's native parts, which the tree on the GPU machine lacks (they
# are built here, not committed).
NATIVE = ["xla_gpu/_native", "xla_gpu/runtime/_host_run.abi3.so",
          "xla_gpu/dialects/_xla_gpu_ops_gen.py"]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download(names: list[str], into: Path) -> list[Path]:
    before = set(into.iterdir())
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps",
               "--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
               *[a for p in PLATFORMS for a in ("--platform", p)], "-d", str(into), *names]
    subprocess.run(command, check=True)
    return sorted(set(into.iterdir()) - before)


def _installed_version(distribution: str) -> str:
    from importlib.metadata import version
    return version(distribution)


def make(out: Path, with_jax: bool) -> int:
    import xla_gpu
    package = Path(xla_gpu.__file__).resolve().parent
    installed = package.parent
    llvm = installed / "llvm" / "lib" / "libLLVM.so"
    if not llvm.exists():
        print(f"error: no {llvm}: install the project's compiler first", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp)
        files = _download([f"xtc-mlir-python-bindings=="
                           f"{_installed_version('xtc-mlir-python-bindings')}"], stage)
        if with_jax:
            files += _download(["jax==0.10.2", "jaxlib==0.10.2"], stage)
        native = stage / "native.tar.xz"
        with tarfile.open(native, "w:xz", preset=3) as tar:
            tar.add(llvm, arcname="llvm/lib/libLLVM.so")
            for relative in NATIVE:
                source = (package.parent / relative).resolve()
                if not source.exists():
                    print(f"error: no {source}", file=sys.stderr)
                    return 2
                tar.add(source, arcname=relative)
        files.append(native)
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        manifest = {"files": [], "chunks": 0}
        chunk, used = 1, 0
        (out / "1").mkdir()
        for path in files:
            manifest["files"].append({"name": path.name, "size": path.stat().st_size,
                                      "sha256": _sha256(path)})
            with open(path, "rb") as f:
                part = 0
                while True:
                    room = CHUNK - used
                    data = f.read(room)
                    if not data:
                        break
                    (out / str(chunk) / f"{path.name}.part{part:02d}").write_bytes(data)
                    part += 1
                    used += len(data)
                    if used >= CHUNK:
                        chunk, used = chunk + 1, 0
                        (out / str(chunk)).mkdir()
        if not any((out / str(chunk)).iterdir()):
            (out / str(chunk)).rmdir()
            chunk -= 1
        manifest["chunks"] = chunk
        for k in range(1, chunk + 1):   # each call carries one chunk folder alone
            (out / str(k) / "manifest.json").write_text(json.dumps(manifest, indent=1))
    total = sum(f["size"] for f in manifest["files"])
    print(f"{len(manifest['files'])} files, {total / 2**20:.1f} MiB, in {chunk} chunks under "
          f"{out}: one device call per chunk (carry {out.name}/K), each within 30 s of the "
          f"last; then `python3 bench/gpu_bundle.py install`")
    return 0


def receive(chunk: Path) -> int:
    """Keeps a carried chunk in /tmp for `install` (a later call)."""
    if not chunk.is_dir():
        print(f"error: no chunk folder {chunk}", file=sys.stderr)
        return 2
    RECEIVED.mkdir(parents=True, exist_ok=True)
    for part in sorted(chunk.iterdir()):
        shutil.copyfile(part, RECEIVED / part.name)
    manifest = chunk / "manifest.json"
    if manifest.exists():
        shutil.copyfile(manifest, RECEIVED / "manifest.json")
    print(f"received {chunk}: {len(list(RECEIVED.glob('*.part*')))} parts held in {RECEIVED}")
    return 0


def install(bundle: Path | None) -> int:
    """Joins the parts (those received, or a whole bundle folder here),
    checks them, installs the wheels and the native parts."""
    sources = [RECEIVED] if bundle is None else sorted(p for p in bundle.iterdir() if p.is_dir())
    manifest_path = (RECEIVED if bundle is None else bundle / "1") / "manifest.json"
    if not manifest_path.exists():
        print(f"error: no {manifest_path}: nothing received", file=sys.stderr)
        return 2
    manifest = json.loads(manifest_path.read_text())
    parts = sorted(p for folder in sources for p in folder.glob("*.part*"))
    joined_dir = Path(tempfile.mkdtemp(prefix="xla_gpu_bundle_"))
    joined = []
    for entry in manifest["files"]:
        mine = sorted(p for p in parts if p.name.rsplit(".part", 1)[0] == entry["name"])
        target = joined_dir / entry["name"]
        with open(target, "wb") as out:
            for part in mine:
                out.write(part.read_bytes())
        if target.stat().st_size != entry["size"] or _sha256(target) != entry["sha256"]:
            print(f"error: {entry['name']}: {len(mine)} parts joined to "
                  f"{target.stat().st_size} bytes, not the {entry['size']} made (a chunk "
                  "missing? each call must come within 30 s of the last)", file=sys.stderr)
            return 1
        joined.append(target)
    NATIVE_SITE.mkdir(parents=True, exist_ok=True)
    for archive in (p for p in joined if p.name.endswith(".tar.xz")):
        with tarfile.open(archive, "r:xz") as tar:
            tar.extractall(NATIVE_SITE, filter="data")
    # libXlaGpu.so finds MLIR and LLVM through its RUNPATH,
    # $ORIGIN/../../../{mlir/_mlir_libs,llvm/lib}: beside xla_gpu/.
    mlir = NATIVE_SITE / "mlir"
    if not mlir.is_symlink() and not mlir.exists():
        mlir.symlink_to(SITE / "mlir")
    SITE.mkdir(parents=True, exist_ok=True)
    wheels = [p for p in joined if p.suffix == ".whl"]
    for folder, group in ((SITE, [w for w in wheels if not w.name.startswith("jax")]),
                          (JAX_SITE, [w for w in wheels if w.name.startswith("jax")])):
        if group:
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index",
                            "--no-deps", "--no-compile", "--upgrade", "--target", str(folder),
                            *map(str, group)], check=True)
    # The native parts into this tree (which lacks them), as links.
    for relative in NATIVE:
        link = ROOT / relative
        if link.is_symlink() or link.exists():
            continue
        link.symlink_to(NATIVE_SITE / relative)
    shutil.rmtree(joined_dir, ignore_errors=True)
    print(f"installed {len(wheels)} wheels and the native parts: PYTHONPATH={SITE}"
          + (f" (jax 0.10.2 for the plugin: {JAX_SITE} first)" if JAX_SITE.exists() else ""))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make", help="here: the chunks to carry")
    m.add_argument("--out", type=Path, default=BUNDLE)
    m.add_argument("--with-jax", action="store_true", help="also jax and jaxlib 0.10.2")
    r = sub.add_parser("receive", help="there: keep one carried chunk")
    r.add_argument("chunk", type=Path)
    i = sub.add_parser("install", help="there: join, check and install what was received")
    i.add_argument("--bundle", type=Path, default=None,
                   help="a whole bundle folder instead of the received parts (a check here)")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "make":
            return make(args.out, args.with_jax)
        if args.cmd == "receive":
            return receive(args.chunk)
        return install(args.bundle)
    except (OSError, subprocess.CalledProcessError, tarfile.TarError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
