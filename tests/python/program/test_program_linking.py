"""A cuda program's kernels are linked into shared binaries: each compile
thread's share of the kernels becomes one PTX module and one cubin (the PTX
compiler's set-up is paid per module, not per kernel). Checked here without
a GPU: which kernels share what, that their helpers were renamed apart,
that nothing of a kernel is lost against compiling each alone, saving and
loading (each shared binary stored once), and the errors of linking."""

from __future__ import annotations

import json
import hashlib
import sys
from pathlib import Path

import pytest

import xla_gpu
from xla_gpu.backends.cuda import codegen
from xla_gpu.program import kernels as program_kernels
from xla_gpu.backends import cuda
from xla_gpu.errors import ArtifactError
from xla_gpu.runtime.program import load_program

sys.path.insert(0, str(Path(__file__).parents[1]))
from program_data import load_program as load_data  # noqa: E402


def _binaries(exe):
    """Kernel names per distinct PTX text object."""
    groups: dict[int, list[str]] = {}
    for image in exe.kernels.values():
        if image.ptx is not None:
            groups.setdefault(id(image.ptx), []).append(image.spec.name)
    return groups


def _entries(ptx: str) -> set[str]:
    return set(codegen.ptx_block_size(ptx))


@pytest.fixture(scope="module")
def reductions_text():
    return (load_data("reductions").folder / "before_optimizations.hlo").read_text()


@pytest.fixture(scope="module")
def linked(reductions_text):
    return xla_gpu.compile(reductions_text, target="cuda", cache=False)


def test_kernels_share_binaries_and_keep_their_entries(linked, reductions_text, monkeypatch):
    groups = _binaries(linked)
    kernels = sum(len(names) for names in groups.values())
    assert kernels >= 6
    assert len(groups) < kernels                 # kernels did share
    for image in linked.kernels.values():
        # Each kernel's own entry, with its block size, is in its binary.
        entries = codegen.ptx_block_size(image.ptx)
        assert entries[image.spec.name] == image.spec.threads
        if image.cubin is not None:
            assert image.spec.name.encode() in image.cubin
    # Helpers are renamed after their kernel, so that kernels' helpers of
    # the same name (the reducers' regions) live side by side.
    ptx = "\n".join({id(i.ptx): i.ptx for i in linked.kernels.values()}.values())
    helpers = [line for line in ptx.splitlines() if ".func" in line and "(" in line]
    assert helpers
    names = {image.spec.name for image in linked.kernels.values()}
    for line in helpers:
        assert any(f"{name}__" in line for name in names), line

    # Compiled one binary per kernel, the same kernels come out.
    monkeypatch.setattr(program_kernels, "LINK_KERNELS", False)
    separate = xla_gpu.compile(reductions_text, target="cuda", cache=False)
    assert all(len(names) == 1 for names in _binaries(separate).values())
    assert {i.spec.name: i.spec.threads for i in separate.kernels.values()} == \
        {i.spec.name: i.spec.threads for i in linked.kernels.values()}
    for image in separate.kernels.values():
        assert _entries(image.ptx) == {image.spec.name}
    # A shared binary counts once in the generated code size.
    assert linked.memory_analysis().generated_code_size_in_bytes < sum(
        image.code_size for image in linked.kernels.values())


@pytest.mark.parametrize("name", ["conv_grouped_grad", "sort_topk"])
def test_sort_topk_and_convolution_kernels_are_linked_too(name):
    """Kernels of the sort, top-k and convolution emitters join the
    program's binaries like fusions' do."""
    text = (load_data(name).folder / "before_optimizations.hlo").read_text()
    exe = xla_gpu.compile(text, target="cuda", cache=False)
    emitters = {image.spec.emitter for image in exe.kernels.values()}
    assert emitters & {"sort", "topk", "convolution"}
    groups = _binaries(exe)
    assert len(groups) < len(exe.kernels)
    for image in exe.kernels.values():
        assert image.spec.name in _entries(image.ptx)


def test_saved_program_stores_each_shared_binary_once(linked, tmp_path):
    path = linked.save(tmp_path / "prog")
    manifest = json.loads((path / "program.json").read_text())
    shared = manifest["binaries"]
    assert set(shared) == {kid for kid, image in linked.kernels.items()
                           if len(_binaries(linked)[id(image.ptx)]) > 1}
    stored = sorted(p.name for p in (path / "binaries").iterdir())
    assert len([n for n in stored if n.endswith(".ptx")]) == len(set(shared.values()))
    for kid in shared:
        assert not (path / "kernels" / kid / "kernel.ptx").exists()
    loaded = load_program(path, trusted=True)
    assert loaded.thunk_sequence_text() == linked.thunk_sequence_text()
    assert sorted(map(sorted, _binaries(loaded).values())) == \
        sorted(map(sorted, _binaries(linked).values()))
    for kid, image in loaded.kernels.items():
        assert image.ptx == linked.kernels[kid].ptx
        assert image.cubin == linked.kernels[kid].cubin
    assert loaded.memory_analysis().generated_code_size_in_bytes == \
        linked.memory_analysis().generated_code_size_in_bytes


def _rewrite(path: Path, name: str, data: bytes) -> None:
    """Replaces a file of a saved program and its digest (what a program
    written by another tool could hold)."""
    (path / name).write_bytes(data)
    digests = json.loads((path / "digests.json").read_text())
    digests[name] = hashlib.sha256(data).hexdigest()
    (path / "digests.json").write_text(json.dumps(digests))


def test_program_naming_a_missing_binary_is_refused(linked, tmp_path):
    path = linked.save(tmp_path / "prog")
    manifest = json.loads((path / "program.json").read_text())
    kid = next(iter(manifest["binaries"]))
    manifest["binaries"][kid] = 99
    _rewrite(path, "program.json", json.dumps(manifest).encode())
    with pytest.raises(ArtifactError, match=f"kernel {kid} names binaries/99"):
        load_program(path, trusted=True)
    manifest["binaries"][kid] = "0"
    _rewrite(path, "program.json", json.dumps(manifest).encode())
    with pytest.raises(ArtifactError, match="not a map of kernel ids to binary numbers"):
        load_program(path, trusted=True)


def test_format_1_programs_still_load(reductions_text, tmp_path, monkeypatch):
    monkeypatch.setattr(program_kernels, "LINK_KERNELS", False)
    exe = xla_gpu.compile(reductions_text, target="cuda", cache=False)
    path = exe.save(tmp_path / "prog")
    manifest = json.loads((path / "program.json").read_text())
    assert "binaries" not in manifest
    manifest["format"] = 1
    _rewrite(path, "program.json", json.dumps(manifest).encode())
    loaded = load_program(path, trusted=True)
    assert {k: i.ptx for k, i in loaded.kernels.items()} == \
        {k: i.ptx for k, i in exe.kernels.items()}


def _lowered(name: str, size: int, symbols=(), declarations=()):
    return cuda.LoweredKernel(name, "x" * size, tuple(declarations),
                              frozenset({name, *symbols}))


def test_link_groups_balance_code_and_keep_clashing_names_apart():
    kernels = [_lowered("a", 100), _lowered("b", 60), _lowered("c", 50), _lowered("d", 10)]
    groups = cuda.link_groups(kernels, 2)
    assert sorted(sum(len(k.definitions) for k in g) for g in groups) == [110, 110]
    assert [[k.name for k in g] for g in groups] == [["a", "d"], ["b", "c"]]
    assert [[k.name for k in g] for g in cuda.link_groups(kernels)] == [["a", "b", "c", "d"]]
    assert [[k.name for k in g] for g in cuda.link_groups(kernels[:1], 4)] == [["a"]]
    # Two kernels of the same name never share a module.
    twins = [_lowered("k", 10), _lowered("k", 10), _lowered("m", 10, {"k"})]
    groups = cuda.link_groups(twins, 1)
    assert len(groups) == 3
    assert all(len({s for k in g for s in k.symbols}) ==
               sum(len(k.symbols) for k in g) for g in groups)


def test_link_refuses_two_declarations_of_one_function():
    from xla_gpu import ir
    first = _lowered("a", 1, declarations=[("__nv_expf", "llvm.func @__nv_expf(f32) -> f32")])
    second = _lowered("b", 1, declarations=[("__nv_expf", "llvm.func @__nv_expf(f64) -> f64")])
    with pytest.raises(codegen.CodegenError, match="kernel 'b' declares @__nv_expf"):
        cuda.link([first, second], ir.Context())


def test_cuda_module_needs_code():
    from xla_gpu.runtime.cuda import CudaModule
    with pytest.raises(ValueError, match="needs a cubin or PTX"):
        CudaModule()
