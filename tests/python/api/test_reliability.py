"""Reliability: a cache that knows the compiler, inputs as XLA's harness
makes them, correct host math, artifacts and cache entries that cannot be
turned against their user, clear errors instead of crashes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import xla_gpu
from xla_gpu import compile_cache, hlo, runtime
from xla_gpu.hlo.numerics import random_inputs

NEGATE = """HloModule m
fused {
  p = f32[64] parameter(0)
  ROOT n = f32[64] negate(p)
}
"""

EXP = NEGATE.replace("negate", "exponential")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("XLA_GPU_CACHE_DIR", str(root))
    xla_gpu.compiler.clear_memory_cache()
    yield root
    xla_gpu.compiler.clear_memory_cache()


def _entries(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir()
                  if compile_cache.KEY_PATTERN.fullmatch(p.name)) if root.exists() else []


# -- the cache key knows the compiler ----------------------------------------

def test_package_identity_changes_with_any_source(tmp_path, monkeypatch):
    tree = tmp_path / "pkg"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.py").write_text("x = 1\n")
    (tree / "sub" / "b.py").write_text("y = 2\n")
    monkeypatch.setattr(compile_cache, "_PACKAGE_DIR", tree)
    compile_cache._package_identity.cache_clear()
    try:
        first = compile_cache._package_identity()
        (tree / "sub" / "b.py").write_text("y = 33\n")   # (another size: a stat sees it)
        compile_cache._package_identity.cache_clear()
        second = compile_cache._package_identity()
        (tree / "c.py").write_text("")
        compile_cache._package_identity.cache_clear()
        third = compile_cache._package_identity()
    finally:
        compile_cache._package_identity.cache_clear()
    assert len({first, second, third}) == 3


def test_a_changed_compiler_misses_the_cache(cache, monkeypatch):
    xla_gpu.compile(NEGATE, target="cpu")
    assert len(_entries(cache)) == 1
    xla_gpu.compiler.clear_memory_cache()
    xla_gpu.compile(NEGATE, target="cpu")          # same compiler: a hit
    assert len(_entries(cache)) == 1
    monkeypatch.setattr(compile_cache, "compiler_identity",
                        lambda target: "an edited compiler")
    xla_gpu.compiler.clear_memory_cache()
    xla_gpu.compile(NEGATE, target="cpu")
    assert len(_entries(cache)) == 2


def test_cuda_identity_covers_ptxas_and_libdevice():
    from xla_gpu.backends.cuda import codegen
    identity = compile_cache._cuda_identity()
    assert compile_cache.compiler_identity("cuda") != compile_cache.compiler_identity("cpu")
    assert len(identity) == 64
    if codegen.find_ptxas():
        out = subprocess.run([codegen.find_ptxas(), "--version"], capture_output=True,
                             text=True).stdout
        assert "ptxas" in out.lower() or "cuda" in out.lower()


def test_tests_use_a_private_cache():
    home_cache = Path(os.path.expanduser("~")) / ".cache" / "xla_gpu"
    assert compile_cache.cache_dir() != home_cache
    assert "xla_gpu_test_cache_" in str(compile_cache.cache_dir()) or \
        os.environ["XLA_GPU_CACHE_DIR"]


# -- inputs as XLA's harness makes them ---------------------------------------

def _reduce_module(reducer_root: str, type_: str = "f32") -> str:
    return f"""HloModule m
r {{
  a = {type_}[] parameter(0)
  b = {type_}[] parameter(1)
  ROOT c = {type_}[] {reducer_root}(a, b)
}}
ENTRY e {{
  x = {type_}[8,16] parameter(0)
  init = {type_}[] parameter(1)
  ROOT y = {type_}[8] reduce(x, init), dimensions={{1}}, to_apply=r
}}
"""


@pytest.mark.parametrize("root,type_,identity", [
    ("add", "f32", 0.0), ("multiply", "f32", 1.0), ("maximum", "f32", -np.inf),
    ("minimum", "f32", np.inf), ("add", "s32", 0), ("maximum", "s32", -2**31),
    ("and", "pred", True), ("or", "pred", False), ("multiply", "bf16", 1.0),
])
def test_reduce_init_parameters_get_the_reducers_identity(root, type_, identity):
    comp = hlo.parse_module(_reduce_module(root, type_)).entry
    for seed in range(3):
        x, init = random_inputs(comp, seed)
        assert init.shape == () and init.item() == identity


def test_argmax_init_parameters_get_identities():
    text = """HloModule m
argmax {
  a = f32[] parameter(0)
  ai = s32[] parameter(1)
  b = f32[] parameter(2)
  bi = s32[] parameter(3)
  gt = pred[] compare(a, b), direction=GT
  eq = pred[] compare(a, b), direction=EQ
  lt = pred[] compare(ai, bi), direction=LT
  tie = pred[] and(eq, lt)
  keep = pred[] or(gt, tie)
  v = f32[] select(keep, a, b)
  i = s32[] select(keep, ai, bi)
  ROOT t = (f32[], s32[]) tuple(v, i)
}
ENTRY e {
  x = f32[4,32] parameter(0)
  idx = s32[4,32] iota(), iota_dimension=1
  v0 = f32[] parameter(1)
  i0 = s32[] parameter(2)
  ROOT r = (f32[4], s32[4]) reduce(x, idx, v0, i0), dimensions={1}, to_apply=argmax
}
"""
    module = hlo.parse_module(text)
    x, v0, i0 = random_inputs(module.entry, 0)
    assert v0.item() == -np.inf
    expected = hlo.evaluate(module, x, v0, i0)
    np.testing.assert_array_equal(expected[1], np.argmax(x, axis=1))


def test_sort_keys_are_distinct():
    text = """HloModule m
less {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT lt = pred[] compare(a, b), direction=LT
}
ENTRY e {
  k = f32[3000] parameter(0)
  ROOT s = f32[3000] sort(k), dimensions={0}, to_apply=less
}
"""
    for t in ("f32", "bf16", "s32"):
        comp = hlo.parse_module(text.replace("f32", t)).entry
        (keys,) = random_inputs(comp, 1)
        assert np.unique(keys.astype(np.float64)).size == keys.size


def test_the_layer_norm_reduction_matches_with_identity_inits(cache):
    path = Path(__file__).parents[1] / "hlo_inputs" / "layer_norm.post.hlo"
    text = path.read_text()
    module = hlo.parse_module(text)
    from xla_gpu.analysis.fusion import select_fusion
    from xla_gpu.hlo.numerics import compare, has_reduction, tolerance_type
    for inst in module.entry.instructions:
        if inst.opcode != "fusion":
            continue
        fusion = select_fusion(module, inst.name)
        exe = xla_gpu.compile(text, target="cpu", fusion=inst.name)
        inputs = random_inputs(fusion.computation, 1)
        got = exe.run(*inputs)
        want = hlo.evaluate(fusion.computation, *inputs)
        for k, (g, w, s) in enumerate(zip(got, want, fusion.output_shapes)):
            assert compare(g, w, s.element_type, k,
                           tolerance_type(fusion.computation, s.element_type),
                           has_reduction(fusion.computation)) is None, inst.name


# -- host math at full accuracy ----------------------------------------------

_HARD_POINTS = np.array([1e-8, -1e-8, 1e-7, 6e-8, 1e-30, 1e-39, 1e-45, 0.0, -0.0, 1e-3, 0.5,
                         -0.5, 1.0, 3.0, 20.0, 88.0, -88.0, -100.0, 1e10, np.inf, -np.inf,
                         np.nan, 2.0 ** -126, -(2.0 ** -149)], np.float32)

_MATH = [
    ("exponential-minus-one", np.expm1, None), ("log-plus-one", np.log1p, "log1p"),
    ("tanh", np.tanh, None), ("erf", None, None), ("sine", np.sin, None),
    ("cosine", np.cos, None), ("exponential", np.exp, None), ("log", np.log, "pos"),
    ("sqrt", np.sqrt, "pos"), ("rsqrt", lambda v: 1 / np.sqrt(v), "pos"),
    ("cbrt", np.cbrt, None), ("logistic", None, None), ("tan", np.tan, "small"),
]


def _unary(op: str, type_: str) -> str:
    return f"""HloModule m
fused {{
  p = {type_}[{_HARD_POINTS.size}] parameter(0)
  ROOT y = {type_}[{_HARD_POINTS.size}] {op}(p)
}}
"""


@pytest.mark.parametrize("op,_fn,domain", _MATH, ids=[m[0] for m in _MATH])
@pytest.mark.parametrize("type_", ["f32", "f64"])
def test_host_math_near_hard_points(cache, op, _fn, domain, type_):
    dtype = np.dtype(np.float32 if type_ == "f32" else np.float64)
    x = _HARD_POINTS.astype(dtype)
    if domain == "pos":
        x = np.abs(x)
    elif domain == "log1p":
        x = np.where(x < -0.9, -x, x).astype(dtype)
    elif domain == "small":
        x = np.where(np.abs(x) > 1, np.float32(0.25), x).astype(dtype)
    text = _unary(op, type_)
    (got,) = xla_gpu.compile(text, target="cpu").run(x)
    (want,) = hlo.evaluate(hlo.parse_module(text), x)
    finite = np.isfinite(want)
    assert np.array_equal(np.isnan(got), np.isnan(want)), (x, got, want)
    assert np.array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
    ulp = np.spacing(np.abs(want[finite]).astype(dtype)).astype(np.float64)
    err = np.abs(got[finite].astype(np.float64) - want[finite].astype(np.float64))
    # A few ulp (libm), and exact tiny values: expm1(1e-8) is 1e-8, not 0.
    # logistic is 1 / (1 + exp(-x)) as XLA expands it: it underflows to 0
    # where the exact value is subnormal.
    floor = np.finfo(dtype).tiny if op == "logistic" else np.finfo(dtype).smallest_subnormal
    assert np.all(err <= np.maximum(4 * ulp, floor)), \
        (x[finite][err > 4 * ulp], got[finite][err > 4 * ulp], want[finite][err > 4 * ulp])


def test_expm1_of_tiny_values_is_not_zero(cache):
    x = np.array([1e-8, 1e-7, -3e-8, 1e-20], np.float32)
    text = _unary("exponential-minus-one", "f32").replace(str(_HARD_POINTS.size), "4")
    (got,) = xla_gpu.compile(text, target="cpu").run(x)
    np.testing.assert_allclose(got, np.expm1(x.astype(np.float64)), rtol=1e-6)


def test_cuda_math_calls_libdevice_for_expm1_and_log1p(cache):
    # libdevice's __nv_expm1f / __nv_log1pf are accurate near 0 (an
    # exp(x) - 1 expansion is not).
    for op, name in (("exponential-minus-one", "expm1f"), ("log-plus-one", "log1pf")):
        exe = xla_gpu.compile(_unary(op, "f32"), target="cuda", cache=False)
        assert f"@__nv_{name}" in exe.mlir("llvm")


# -- the cache trusts nothing it reads -----------------------------------------

def test_index_paths_never_leave_the_cache(cache, tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("precious")
    xla_gpu.compile(NEGATE, target="cpu")
    raw = cache / "raw"
    for index in raw.iterdir():
        for target in (str(victim), f"../{victim.name}", "../../victim", "/x"):
            index.write_text(target)
            xla_gpu.compiler.clear_memory_cache()
            exe = xla_gpu.compile(NEGATE, target="cpu")
            np.testing.assert_array_equal(exe.run(np.ones(64, np.float32))[0],
                                          -np.ones(64, np.float32))
    assert (victim / "keep").read_text() == "precious"


def test_a_copied_entry_is_not_served_for_another_fusion(cache):
    xla_gpu.compile(NEGATE, target="cpu")
    (negate_entry,) = _entries(cache)
    xla_gpu.compile(EXP, target="cpu")
    (exp_entry,) = [e for e in _entries(cache) if e != negate_entry]
    # Replace the exp entry with a copy of the negate entry.
    import shutil
    shutil.rmtree(exp_entry)
    shutil.copytree(negate_entry, exp_entry)
    xla_gpu.compiler.clear_memory_cache()
    exe = xla_gpu.compile(EXP, target="cpu")
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    np.testing.assert_allclose(exe.run(x)[0], np.exp(x), rtol=1e-6)


def test_unsigned_or_foreign_entries_are_rebuilt(cache):
    xla_gpu.compile(NEGATE, target="cpu")
    (entry,) = _entries(cache)
    (cache / ".key").write_bytes(os.urandom(32))     # as if another user's key
    xla_gpu.compiler.clear_memory_cache()
    exe = xla_gpu.compile(NEGATE, target="cpu")
    np.testing.assert_array_equal(exe.run(np.ones(64, np.float32))[0], -np.ones(64))


@pytest.mark.parametrize("damage", ["garbage kernel.json", "truncated kernel.so",
                                    "empty digests", "raw index garbage", "key missing"])
def test_corrupt_cache_files_are_rebuilt(cache, damage):
    xla_gpu.compile(NEGATE, target="cpu")
    (entry,) = _entries(cache)
    if damage == "garbage kernel.json":
        (entry / "kernel.json").write_text("{not json")
    elif damage == "truncated kernel.so":
        data = (entry / "kernel.so").read_bytes()
        (entry / "kernel.so").write_bytes(data[: len(data) // 3])
    elif damage == "empty digests":
        (entry / "digests.json").write_text("")
    elif damage == "raw index garbage":
        for index in (cache / "raw").iterdir():
            index.write_bytes(b"\xff\xfe" * 1000)
    else:
        (cache / ".key").unlink()
    for _ in range(2):
        xla_gpu.compiler.clear_memory_cache()
        exe = xla_gpu.compile(NEGATE, target="cpu")
        np.testing.assert_array_equal(exe.run(np.ones(64, np.float32))[0], -np.ones(64))


def test_a_cache_others_can_write_is_not_used(tmp_path, monkeypatch):
    root = tmp_path / "shared"
    root.mkdir()
    os.chmod(root, 0o777)
    monkeypatch.setenv("XLA_GPU_CACHE_DIR", str(root))
    xla_gpu.compiler.clear_memory_cache()
    compile_cache._warned.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        xla_gpu.compile(NEGATE, target="cpu")
    assert any("other users can write" in str(w.message) for w in caught)
    assert not _entries(root) and not (root / "raw").exists()


def test_failed_cache_writes_leave_no_temp_directories(cache, monkeypatch):
    def broken_save(self, directory):
        Path(directory, "kernel.json").write_text("partial")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(xla_gpu.compiler.Executable, "save", broken_save)
    exe = xla_gpu.compile(NEGATE, target="cpu")
    np.testing.assert_array_equal(exe.run(np.ones(64, np.float32))[0], -np.ones(64))
    assert [p.name for p in cache.iterdir() if p.name not in (".key", "raw")] == []


def test_the_cache_directory_is_private(cache):
    xla_gpu.compile(NEGATE, target="cpu")
    assert not cache.stat().st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    assert stat.S_IMODE((cache / ".key").stat().st_mode) == 0o600


# -- artifacts are verified before anything runs -----------------------------------

@pytest.fixture
def artifact(cache, tmp_path):
    exe = xla_gpu.compile(NEGATE, target="cpu", cache=False)
    directory = exe.save(tmp_path / "artifact")
    return directory, exe.artifact_digest


def test_a_saved_artifact_loads_and_runs(artifact):
    directory, digest = artifact
    kernel = runtime.load(directory, expected_digest=digest)
    np.testing.assert_array_equal(kernel.run(np.ones(64, np.float32))[0], -np.ones(64))


def test_an_edited_file_is_refused(artifact):
    directory, _ = artifact
    (directory / "kernel.ptx").write_text("x") if (directory / "kernel.ptx").exists() \
        else (directory / "emitted.mlir").write_text("edited")
    with pytest.raises(xla_gpu.ArtifactError, match="does not match its digest"):
        runtime.load(directory, trusted=True)


def test_a_manifest_with_a_smaller_output_is_refused(artifact):
    directory, _ = artifact
    spec = json.loads((directory / "kernel.json").read_text())
    spec["outputs"][0]["shape"] = [1]
    text = json.dumps(spec)
    (directory / "kernel.json").write_text(text)
    digests = json.loads((directory / "digests.json").read_text())
    import hashlib
    digests["kernel.json"] = hashlib.sha256(text.encode()).hexdigest()
    (directory / "digests.json").write_text(json.dumps(digests))
    with pytest.raises(xla_gpu.ArtifactError, match="outputs .* differ from the fusion"):
        runtime.load(directory, trusted=True)


def test_a_pinned_artifact_refuses_a_rewritten_manifest(artifact):
    directory, digest = artifact
    digests = json.loads((directory / "digests.json").read_text())
    (directory / "digests.json").write_text(json.dumps(digests, indent=2))
    runtime.load(directory, trusted=True)                       # consistent, but not what was saved
    with pytest.raises(xla_gpu.ArtifactError, match="expected artifact digest"):
        runtime.load(directory, expected_digest=digest)


def test_a_truncated_shared_object_is_refused_before_loading(artifact):
    directory, _ = artifact
    data = (directory / "kernel.so").read_bytes()
    (directory / "kernel.so").write_bytes(data[:100])
    with pytest.raises(xla_gpu.ArtifactError, match="kernel.so"):
        runtime.load(directory, trusted=True)


def test_symlinks_devices_and_foreign_names_are_refused(artifact):
    directory, _ = artifact
    (directory / "kernel.so").unlink()
    (directory / "kernel.so").symlink_to("/dev/zero")
    with pytest.raises(xla_gpu.ArtifactError, match="not a regular file"):
        runtime.load(directory, trusted=True)
    digests = json.loads((directory / "digests.json").read_text())
    digests["../../etc/passwd"] = "0" * 64
    (directory / "digests.json").write_text(json.dumps(digests))
    with pytest.raises(xla_gpu.ArtifactError, match="unknown file"):
        runtime.load(directory, trusted=True)


def test_loading_a_saved_kernel_needs_no_mlir(artifact):
    directory, digest = artifact
    code = (f"import sys, numpy as np; from xla_gpu import runtime; "
            f"k = runtime.load({str(directory)!r}, expected_digest={digest!r}); "
            f"(y,) = k.run(np.ones(64, np.float32)); assert (y == -1).all(); "
            f"assert not any(m == 'mlir' or m.startswith('mlir.') for m in sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)


# -- clear errors instead of crashes ----------------------------------------------

@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_shapes_whose_size_overflows_int64_are_parse_errors(target):
    for dims in ("4294967296,2147483648", "9223372036854775808", "3037000500,3037000500,2"):
        text = NEGATE.replace("f32[64]", f"f32[{dims}]")
        with pytest.raises(xla_gpu.HloParseError, match="does not fit in int64"):
            xla_gpu.compile(text, target=target, cache=False)


def test_empty_outputs_launch_nothing(cache, tmp_path):
    text = NEGATE.replace("f32[64]", "f32[0,4]")
    exe = xla_gpu.compile(text, target="cpu")
    (y,) = exe.run(np.zeros((0, 4), np.float32))
    assert y.shape == (0, 4) and y.dtype == np.float32
    (z,) = runtime.load(exe.save(tmp_path / "empty"), trusted=True).run(np.zeros((0, 4), np.float32))
    assert z.shape == (0, 4)


@pytest.mark.parametrize("case,text,expected", [
    ("constant only", """HloModule m
fused {
  c = f32[] constant(2)
  ROOT b = f32[4] broadcast(c), dimensions={}
}
""", np.full(4, 2, np.float32)),
    ("broadcast without dimensions", """HloModule m
fused {
  c = f32[] constant(3)
  ROOT b = f32[4] broadcast(c)
}
""", np.full(4, 3, np.float32)),
])
def test_ordinary_corner_cases_compile_and_run(cache, case, text, expected):
    (got,) = xla_gpu.compile(text, target="cpu").run()
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("text,message", [
    ("""HloModule m
a {
  p = f32[4] parameter(0)
  ROOT c = f32[4] call(p), to_apply=b
}
b {
  p = f32[4] parameter(0)
  ROOT c = f32[4] call(p), to_apply=a
}
ENTRY e {
  p = f32[4] parameter(0)
  ROOT c = f32[4] call(p), to_apply=a
}
""", "call cycle: a -> b -> a"),
    ("""HloModule m
fused {
  p = f32[4] parameter(0)
  ROOT d = f32[4] dynamic-update-slice(p)
}
""", "takes at least 2 operands"),
    ("""HloModule m
fused {
  p = f32[4,2] parameter(0)
  ROOT b = f32[4,2,3] broadcast(p)
}
""", "needs 'dimensions="),
])
def test_malformed_modules_are_parse_errors(text, message):
    with pytest.raises(xla_gpu.HloParseError, match=message):
        xla_gpu.compile(text, target="cpu", cache=False)


def test_many_users_of_one_instruction_are_each_listed_once():
    n = 20000
    lines = ["HloModule m", "ENTRY e {", "  p = f32[] parameter(0)"]
    lines += [f"  u{i} = f32[] add(p, p)" for i in range(n)]
    lines += ["  ROOT t = f32[] add(u0, u1)", "}"]
    module = hlo.parse_module("\n".join(lines))
    p = module.entry.parameters[0]
    assert len(p.users) == n and len({id(u) for u in p.users}) == n


@pytest.mark.parametrize("n", [400, 1200])
def test_deep_elementwise_chains_compile(cache, n):
    lines = ["HloModule m", "fused {", "  p0 = f32[16,16] parameter(0)"]
    prev = "p0"
    for i in range(n):
        op = ("add", "multiply", "subtract")[i % 3]
        lines.append(f"  v{i} = f32[16,16] {op}({prev}, p0)")
        prev = f"v{i}"
    lines[-1] = lines[-1].replace(f"  v{n - 1}", f"  ROOT v{n - 1}")
    text = "\n".join(lines + ["}"])
    x = np.random.default_rng(0).uniform(-0.01, 0.01, (16, 16)).astype(np.float32)
    (got,) = xla_gpu.compile(text, target="cpu").run(x)
    (want,) = hlo.evaluate(hlo.parse_module(text), x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_compile_raises_only_xla_gpu_errors():
    bad = [NEGATE.replace("negate", "frobnicate"), "garbage", NEGATE.replace("64", "-1"),
           NEGATE.replace("f32[64] negate", "f32[65] negate")]
    for text in bad:
        with pytest.raises(xla_gpu.XlaGpuError):
            xla_gpu.compile(text, target="cpu", cache=False)
    with pytest.raises(xla_gpu.ArgumentError):
        xla_gpu.compile(NEGATE, target="tpu")
    with pytest.raises(xla_gpu.ArgumentError):
        xla_gpu.compile(12)


def _run_cli(*args):
    return subprocess.run([sys.executable, "-c",
                           "from xla_gpu._cli import run_hlo_main; run_hlo_main()", *args],
                          capture_output=True, text=True)


def test_xla_gpu_run_errors_exit_2_in_one_line(tmp_path):
    cases = {
        "parse": "garbage",
        "too big for int64": NEGATE.replace("f32[64]", "f32[4294967296,2147483648]"),
        "unsupported": NEGATE.replace("negate", "frobnicate"),
    }
    for name, text in cases.items():
        path = tmp_path / f"{name.replace(' ', '_')}.hlo"
        path.write_text(text)
        result = _run_cli(str(path), "--target=cpu", "--no-cache")
        assert result.returncode == 2, (name, result.stderr)
        assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1, \
            (name, result.stderr)


def test_xla_gpu_run_refuses_inputs_larger_than_host_memory(tmp_path):
    path = tmp_path / "huge.hlo"
    path.write_text(NEGATE.replace("f32[64]", "f32[1048576,1048576]"))
    result = _run_cli(str(path), "--target=cpu", "--no-cache")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "memory" in result.stderr


# -- whole-program artifacts are verified the same way ----------------------------

_PROGRAM = """HloModule p
fused_exp {
  p = f32[64] parameter(0)
  ROOT e = f32[64] exponential(p)
}
fused_neg {
  p = f32[64] parameter(0)
  ROOT n = f32[64] negate(p)
}
ENTRY main {
  x = f32[64] parameter(0)
  a = f32[64] fusion(x), kind=kLoop, calls=fused_exp
  ROOT b = f32[64] fusion(a), kind=kLoop, calls=fused_neg
}
"""


@pytest.fixture
def program_dir(cache, tmp_path):
    exe = xla_gpu.compile(_PROGRAM, target="cpu")
    return exe.save(tmp_path / "program"), exe.artifact_digest


def _rewrite_manifest(directory: Path, edit) -> None:
    import hashlib
    manifest = json.loads((directory / "program.json").read_text())
    edit(manifest)
    text = json.dumps(manifest).encode()
    (directory / "program.json").write_bytes(text)
    digests = json.loads((directory / "digests.json").read_text())
    digests["program.json"] = hashlib.sha256(text).hexdigest()
    (directory / "digests.json").write_text(json.dumps(digests))


def test_a_saved_program_loads_pinned_and_runs(program_dir):
    directory, digest = program_dir
    program = runtime.load(directory, expected_digest=digest)
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    np.testing.assert_allclose(program.run(x)[0], -np.exp(x), rtol=1e-6)


def test_a_program_slice_outside_its_allocation_is_refused(program_dir):
    directory, digest = program_dir

    def grow(manifest):
        stack = list(manifest["thunks"])
        while stack:
            thunk = stack.pop()
            if thunk["kind"] == "kernel":
                thunk["args"][0][2] = 1 << 40
                return
            stack.extend(t for key in ("thunks", "body", "condition")
                         for t in thunk.get(key, []) if isinstance(t, dict))
    _rewrite_manifest(directory, grow)
    with pytest.raises(xla_gpu.ArtifactError, match="outside the program's allocations"):
        runtime.load(directory, trusted=True)
    with pytest.raises(xla_gpu.ArtifactError, match="expected artifact digest"):
        runtime.load(directory, expected_digest=digest)


def test_a_program_with_a_foreign_file_name_is_refused(program_dir):
    directory, _ = program_dir
    digests = json.loads((directory / "digests.json").read_text())
    digests["kernels/../../x"] = "0" * 64
    (directory / "digests.json").write_text(json.dumps(digests))
    with pytest.raises(xla_gpu.ArtifactError, match="unknown file"):
        runtime.load(directory, trusted=True)


_NEGATE_EXP_PROGRAM = """
HloModule p
ENTRY e {
  x = f32[64] parameter(0)
  n = f32[64] negate(x)
  ROOT e = f32[64] exponential(n)
}"""


def test_program_buffers_start_as_the_debug_fill(monkeypatch):
    # The tests run whole programs on garbage-filled temps and outputs
    # (conftest); a bad fill value is an ArgumentError, not a crash.
    exe = xla_gpu.compile(_NEGATE_EXP_PROGRAM, target="cpu")
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    for fill in ("0x00", "0xFF"):
        monkeypatch.setenv("XLA_GPU_DEBUG_FILL", fill)
        (out,) = exe.run(x)
        np.testing.assert_allclose(out, np.exp(-x), rtol=1e-6)
    monkeypatch.setenv("XLA_GPU_DEBUG_FILL", "0x1FF")
    with pytest.raises(xla_gpu.ArgumentError, match="XLA_GPU_DEBUG_FILL"):
        exe.run(x)


def test_program_outputs_are_never_overwritten_while_held():
    # Output buffers are reused by later runs only once nothing refers to
    # them: held outputs (or views of them) keep their values.
    exe = xla_gpu.compile(_NEGATE_EXP_PROGRAM, target="cpu")
    xs = [np.full(64, v, np.float32) for v in (0.0, 1.0, 2.0)]
    (first,) = exe.run(xs[0])
    view = exe.run(xs[1])[0][10:20]
    (third,) = exe.run(xs[2])
    np.testing.assert_allclose(first, np.exp(-xs[0]), rtol=1e-6)
    np.testing.assert_allclose(view, np.exp(-xs[1][10:20]), rtol=1e-6)
    np.testing.assert_allclose(third, np.exp(-xs[2]), rtol=1e-6)
    address = third.ctypes.data
    del third
    (again,) = exe.run(xs[0])          # the dropped buffer is taken again
    assert again.ctypes.data == address
    np.testing.assert_allclose(again, np.exp(-xs[0]), rtol=1e-6)
    np.testing.assert_allclose(first, np.exp(-xs[0]), rtol=1e-6)


# -- whole programs in the cache ----------------------------------------------

PROGRAM = """HloModule two_kernels
neg {
  p = f32[64] parameter(0)
  ROOT n = f32[64] negate(p)
}
ex {
  p = f32[64] parameter(0)
  ROOT e = f32[64] exponential(p)
}
ENTRY main {
  x = f32[64] parameter(0)
  a = f32[64] fusion(x), kind=kLoop, calls=neg
  ROOT b = f32[64] fusion(a), kind=kLoop, calls=ex
}
"""


def _from_cache(program) -> bool:
    return xla_gpu.compiler.FROM_DISK_CACHE in program.notes


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_whole_programs_come_back_from_the_disk_cache(cache, target):
    first = xla_gpu.compile(PROGRAM, target=target)
    assert not _from_cache(first)
    xla_gpu.compiler.clear_memory_cache()
    again = xla_gpu.compile(PROGRAM, target=target)
    assert again is not first and _from_cache(again)
    assert again.thunk_sequence_text() == first.thunk_sequence_text()
    assert {k: (i.ptx, i.cubin) for k, i in again.kernels.items()} == \
        {k: (i.ptx, i.cubin) for k, i in first.kernels.items()}
    # Never the same object twice: a program's state is its caller's.
    assert xla_gpu.compile(PROGRAM, target=target) is not again
    if target == "cpu":
        x = np.linspace(-1, 1, 64, dtype=np.float32)
        np.testing.assert_allclose(again.run(x)[0], np.exp(-x), rtol=1e-6)


def test_program_options_are_part_of_the_program_key(cache):
    with_buffers = xla_gpu.compile(PROGRAM, target="cuda")
    without = xla_gpu.compile(PROGRAM, target="cuda", command_buffers=False)
    assert not _from_cache(without)                  # not the other's entry
    assert with_buffers.thunk_sequence_text() != without.thunk_sequence_text()


def test_a_program_entry_moved_to_another_key_is_not_taken(cache):
    other = PROGRAM.replace("exponential", "tanh")
    xla_gpu.compile(PROGRAM, target="cpu")
    before = set(_entries(cache))
    xla_gpu.compile(other, target="cpu")
    added = [e for e in _entries(cache) if e not in before and
             (e / "program.json").exists()]
    (program_entry,) = [e for e in before if (e / "program.json").exists()]
    (other_entry,) = added
    import shutil
    shutil.rmtree(other_entry)
    shutil.copytree(program_entry, other_entry)
    xla_gpu.compiler.clear_memory_cache()
    exe = xla_gpu.compile(other, target="cpu")
    assert not _from_cache(exe)                      # rebuilt, not the copy
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    np.testing.assert_allclose(exe.run(x)[0], np.tanh(-x), rtol=1e-6)
    assert _from_cache(xla_gpu.compile(other, target="cpu"))


def test_a_damaged_program_entry_is_rebuilt(cache):
    xla_gpu.compile(PROGRAM, target="cpu")
    (entry,) = [e for e in _entries(cache) if (e / "program.json").exists()]
    (entry / "thunk-sequence.txt").write_text("changed")
    xla_gpu.compiler.clear_memory_cache()
    exe = xla_gpu.compile(PROGRAM, target="cpu")
    assert not _from_cache(exe)
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    np.testing.assert_allclose(exe.run(x)[0], np.exp(-x), rtol=1e-6)
