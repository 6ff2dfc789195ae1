"""Saved artifacts as an attacker or a careless user meets them: loads that
are neither pinned nor trusted are refused, a manifest edited together with
its digests cannot make a run read or return past a buffer, and `save`
never writes through a link planted in its directory."""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

import numpy as np
import pytest

import xla_gpu
from xla_gpu import runtime
from xla_gpu.runtime.program import load_program

_PROGRAM = """HloModule p
fused_scale {
  p = f32[64] parameter(0)
  c = f32[] constant(3)
  b = f32[64] broadcast(c), dimensions={}
  ROOT m = f32[64] multiply(p, b)
}
ENTRY main {
  x = f32[64] parameter(0)
  k = f32[64] constant({0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61,62,63})
  s = f32[64] add(x, k)
  ROOT f = f32[64] fusion(s), kind=kLoop, calls=fused_scale
}
"""

_KERNEL = """HloModule k
fused_negate {
  p = f32[64] parameter(0)
  ROOT n = f32[64] negate(p)
}
ENTRY e {
  x = f32[64] parameter(0)
  ROOT f = f32[64] fusion(x), kind=kLoop, calls=fused_negate
}
"""


@pytest.fixture(scope="module")
def program():
    return xla_gpu.compile(_PROGRAM, target="cpu")


@pytest.fixture(scope="module")
def kernel():
    return xla_gpu.compile(_KERNEL, target="cpu", fusion="fused_negate")


def _rehash(directory: Path, name: str, data: bytes) -> None:
    """Replaces `name` and re-hashes digests.json to match (what anyone who
    can write the directory can do)."""
    (directory / name).write_bytes(data)
    digests = json.loads((directory / "digests.json").read_text())
    digests[name] = hashlib.sha256(data).hexdigest()
    (directory / "digests.json").write_text(json.dumps(digests))


def _edit_program_json(directory: Path, edit) -> None:
    manifest = json.loads((directory / "program.json").read_text())
    edit(manifest)
    _rehash(directory, "program.json", json.dumps(manifest).encode())


# -- pinned, trusted, or refused -----------------------------------------------------


def test_an_unpinned_load_is_refused_unless_trusted(program, kernel, tmp_path):
    x = np.arange(64, dtype=np.float32)
    for exe, name in ((program, "program"), (kernel, "kernel")):
        directory = exe.save(tmp_path / name)
        with pytest.raises(xla_gpu.ArtifactError, match="unpinned"):
            runtime.load(directory)
        pinned = runtime.load(directory, expected_digest=exe.artifact_digest)
        trusted = runtime.load(directory, trusted=True)
        np.testing.assert_array_equal(pinned.run(x)[0], exe.run(x)[0])
        np.testing.assert_array_equal(trusted.run(x)[0], exe.run(x)[0])
    with pytest.raises(xla_gpu.ArtifactError, match="unpinned"):
        load_program(tmp_path / "program")
    with pytest.raises(xla_gpu.ArtifactError, match="unpinned"):
        xla_gpu.Executable.load(tmp_path / "kernel")


@pytest.mark.parametrize("digest", [123, b"00" * 32, "abc", "G" * 64, ["x"]])
def test_a_malformed_expected_digest_is_an_argument_error(program, tmp_path, digest):
    directory = program.save(tmp_path / "p")
    with pytest.raises(xla_gpu.ArgumentError, match="expected_digest"):
        runtime.load(directory, expected_digest=digest)


@pytest.mark.parametrize("directory", [None, 12, 1.5, ["a"]])
def test_a_directory_that_is_not_a_path_is_an_argument_error(directory):
    with pytest.raises(xla_gpu.ArgumentError, match="path"):
        runtime.load(directory, trusted=True)
    with pytest.raises(xla_gpu.ArgumentError, match="trusted"):
        runtime.load("somewhere", trusted="yes")


# -- what a trusted load still checks -----------------------------------------------


def test_an_output_larger_than_its_slice_is_refused(program, tmp_path):
    """An output's dims decide the array a run returns: dims grown past
    their slice would give a view over memory the program does not own."""
    directory = program.save(tmp_path / "p")

    def grow(manifest):
        manifest["outputs"][0]["dims"] = [1 << 26]
    _edit_program_json(directory, grow)
    with pytest.raises(xla_gpu.ArtifactError, match="does not fit its slice"):
        runtime.load(directory, trusted=True)


def test_a_parameter_larger_than_its_slice_is_refused(program, tmp_path):
    directory = program.save(tmp_path / "p")

    def grow(manifest):
        manifest["parameters"][0][0]["dims"] = [4096]
        manifest["parameter_shapes"][0] = "f32[4096]"
    _edit_program_json(directory, grow)
    with pytest.raises(xla_gpu.ArtifactError, match="does not fit its slice"):
        runtime.load(directory, trusted=True)


def test_a_constant_shorter_than_its_allocation_is_refused(program, tmp_path):
    directory = program.save(tmp_path / "p")
    with np.load(directory / "constants.npz") as npz:
        arrays = {name: npz[name] for name in npz.files}
    assert arrays, "the program was meant to keep a constant"
    name = next(iter(arrays))
    arrays[name] = arrays[name][:2]
    stream = io.BytesIO()
    np.savez(stream, **arrays)
    _rehash(directory, "constants.npz", stream.getvalue())
    with pytest.raises(xla_gpu.ArtifactError, match="constant"):
        runtime.load(directory, trusted=True)


def test_an_unknown_element_type_or_a_negative_trip_count_is_an_artifact_error(
        program, tmp_path):
    """Found by the artifact-loader fuzzer: an output typed 'f18' failed with
    a KeyError where the sizes were checked."""
    def retype(manifest):
        manifest["outputs"][0]["type"] = "f18"
    directory = program.save(tmp_path / "p")
    _edit_program_json(directory, retype)
    with pytest.raises(xla_gpu.ArtifactError, match="unknown element type 'f18'"):
        runtime.load(directory, trusted=True)

    def count(manifest):
        manifest["thunks"] = [{"kind": "while", "name": "w", "condition": [], "body": [],
                               "predicate": manifest["outputs"][0], "trip_count": -2}]
    directory = program.save(tmp_path / "q")
    _edit_program_json(directory, count)
    with pytest.raises(xla_gpu.ArtifactError, match="trip count of -2"):
        runtime.load(directory, trusted=True)


def test_a_deeply_nested_program_json_is_an_artifact_error(program, tmp_path):
    directory = program.save(tmp_path / "p")
    depth = 100_000
    _rehash(directory, "program.json", b"[" * depth + b"]" * depth)
    with pytest.raises(xla_gpu.ArtifactError):
        runtime.load(directory, trusted=True)

    def nest(manifest):
        thunk = manifest["thunks"][0]
        for _ in range(300):
            thunk = {"kind": "while", "name": "w", "condition": [], "body": [thunk],
                     "predicate": manifest["outputs"][0]}
        manifest["thunks"] = [thunk]
    directory = program.save(tmp_path / "q")
    _edit_program_json(directory, nest)
    with pytest.raises(xla_gpu.ArtifactError):
        runtime.load(directory, trusted=True)


# -- save never follows a link --------------------------------------------------------


def test_save_replaces_a_planted_file_symlink_instead_of_writing_through_it(
        program, kernel, tmp_path):
    outside = tmp_path / "outside.txt"
    for exe, name, victim in ((program, "p", "program.json"), (kernel, "k", "kernel.json")):
        outside.write_text("precious")
        directory = tmp_path / name
        directory.mkdir()
        (directory / victim).symlink_to(outside)
        (directory / "digests.json").symlink_to(outside)
        exe.save(directory)
        assert outside.read_text() == "precious"
        assert not (directory / victim).is_symlink()
        runtime.load(directory, expected_digest=exe.artifact_digest)


def test_save_refuses_a_symlinked_directory_or_subdirectory(program, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / "link"
    link.symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(xla_gpu.ArtifactError, match="symlink"):
        program.save(link)
    assert list(elsewhere.iterdir()) == []

    directory = tmp_path / "p"
    directory.mkdir()
    (directory / "kernels").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(xla_gpu.ArtifactError, match="symlink"):
        program.save(directory)
    assert list(elsewhere.iterdir()) == []


def test_save_errors_are_artifact_errors(program, kernel, tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    for exe in (program, kernel):
        with pytest.raises(xla_gpu.ArtifactError, match="not a directory"):
            exe.save(a_file)
        with pytest.raises(xla_gpu.ArtifactError):
            exe.save(a_file / "below")
        with pytest.raises(xla_gpu.ArgumentError):
            exe.save(None)
    # Missing parents are made, as mkdir -p does.
    program.save(tmp_path / "a" / "b" / "c")
    runtime.load(tmp_path / "a" / "b" / "c", expected_digest=program.artifact_digest)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_save_into_a_read_only_directory_is_an_artifact_error(program, tmp_path):
    directory = tmp_path / "ro"
    directory.mkdir()
    directory.chmod(0o500)
    try:
        with pytest.raises(xla_gpu.ArtifactError):
            program.save(directory)
    finally:
        directory.chmod(0o700)


def test_a_failed_save_leaves_no_temporary_file(program, tmp_path, monkeypatch):
    directory = tmp_path / "p"
    real_replace = os.replace
    calls = []

    def fail_third(*args, **kwargs):
        calls.append(args)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real_replace(*args, **kwargs)
    monkeypatch.setattr(os, "replace", fail_third)
    with pytest.raises(xla_gpu.ArtifactError, match="No space left"):
        program.save(directory)
    leftovers = [p.name for p in directory.rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []
    assert not (directory / "digests.json").exists()


def test_a_kernel_shared_with_a_program_saves_its_own_fusion(tmp_path):
    """One cache holds program kernels and single fusions (names do not
    matter to it): a fusion whose kernel a program compiled first still
    saves its own text and name, and loads back."""
    program = """HloModule shared
fused_a {
  p = f32[48] parameter(0)
  ROOT n = f32[48] negate(p)
}
ENTRY main {
  x = f32[48] parameter(0)
  g = f32[48] fusion(x), kind=kLoop, calls=fused_a
  ROOT e = f32[48] exponential(g)
}
"""
    single = program.replace("fused_a", "renamed_b").replace(
        "  ROOT e = f32[48] exponential(g)\n", "").replace("  g = f32[48] fusion",
                                                           "  ROOT f = f32[48] fusion")
    xla_gpu.compile(program, target="cpu")
    exe = xla_gpu.compile(single, target="cpu", fusion="f")
    assert exe.spec.fusion == "f" and exe.hlo_text == single
    loaded = runtime.load(exe.save(tmp_path / "k"), expected_digest=exe.artifact_digest)
    x = np.linspace(-1, 1, 48, dtype=np.float32)
    np.testing.assert_array_equal(loaded.run(x)[0], -x)
