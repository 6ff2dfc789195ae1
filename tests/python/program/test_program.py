"""Whole programs (tests/python/programs/): compiled from XLA:CPU's
after_optimizations text and from JAX's before_optimizations text, run on
the cpu target, compared with jax's stored outputs; the executable's
views (as_text, memory_analysis, buffer assignment, thunk sequence), saving
and loading in a fresh process without MLIR, and xla-gpu-run on programs.

By default a representative subset runs (the test file stays fast);
XLA_GPU_ALL_PROGRAMS=1 runs every stored program in both forms
(`python bench/programs.py` reports all of them with timings)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import xla_gpu
from xla_gpu import hlo
from xla_gpu.runtime.program import ProgramExecutable, load_program
from xla_gpu.runtime.thunks import walk

sys.path.insert(0, str(Path(__file__).parents[1]))
from program_data import add_scaled, program_names  # noqa: E402
from program_data import load_program as load_data  # noqa: E402

AFTER = "after_optimizations_cpu.hlo"
BEFORE = "before_optimizations.hlo"

# Covered by the default run: gemms, while loops with in-place updates, a
# conditional inside a loop, bf16, custom calls, grouped convolutions, sort
# and top-k kernels, ffts and complex numbers, select-and-scatter, and
# rng-bit-generator (expanded).
DEFAULT = ("mlp_train_step", "scan_rnn", "cond_switch", "kv_cache_update",
           "layer_norm_bf16", "ffi_call", "conv_grouped_grad", "sort_topk", "fft_ops",
           "maxpool_grad", "random_rbg")


@pytest.fixture(autouse=True)
def _handlers():
    from xla_gpu.hlo import interpreter
    interpreter.register_custom_call("xla_gpu_test_add_scaled", add_scaled)
    yield
    interpreter.unregister_custom_call("xla_gpu_test_add_scaled")


def _cases():
    every = os.environ.get("XLA_GPU_ALL_PROGRAMS") == "1"
    names = program_names() if every else [n for n in DEFAULT if n in program_names()]
    for name in names:
        for form in (AFTER, BEFORE):
            yield pytest.param(name, form, id=f"{name}-{form.split('_')[0]}")


@pytest.mark.parametrize("name,form", list(_cases()))
def test_program_matches_jax(name, form):
    data = load_data(name)
    text = (data.folder / form).read_text()
    exe = xla_gpu.compile(text, target="cpu")
    assert isinstance(exe, ProgramExecutable)
    results = exe.run(*data.inputs)
    module = hlo.parse_module(text)
    assert not data.mismatches(results, module)
    assert exe.thunks   # something ran: kernels or library calls


@pytest.fixture(scope="module")
def mlp():
    data = load_data("mlp_train_step")
    text = (data.folder / AFTER).read_text()
    return data, text, xla_gpu.compile(text, target="cpu")


def test_views_of_the_executable(mlp):
    data, text, exe = mlp
    optimized = exe.as_text()
    module = hlo.parse_module(optimized)      # the optimized HLO parses back
    assert module.entry.root.shape.is_tuple
    memory = exe.memory_analysis()
    assert memory.argument_size_in_bytes == sum(a.nbytes for a in data.inputs)
    assert memory.output_size_in_bytes == sum(o.nbytes for o in data.outputs)
    assert memory.temp_size_in_bytes > 0
    # The kernels share a shared object (linked together): it counts once.
    code = {id(k.host_library): k.code_size for k in exe.kernels.values()}
    assert memory.generated_code_size_in_bytes == sum(code.values())
    assert memory.generated_code_size_in_bytes > 0
    assert "allocation" in exe.buffer_assignment_text()
    kinds = {t.kind for t in exe.thunks}
    assert "command_buffer" in kinds
    inner = {t.kind for t in exe.thunks[0].thunks}
    assert {"kernel", "gemm"} <= inner
    assert exe.thunk_sequence_text().count("gemm ") == 5


def test_device_independent_thunks_slices_are_inside_their_allocations(mlp):
    _, _, exe = mlp
    from xla_gpu.runtime.thunks import walk
    for thunk in walk(exe.thunks):
        for s, _ in thunk.buffer_uses():
            alloc = exe.allocations[s.allocation]
            assert 0 <= s.offset and s.offset + s.size <= alloc.size, (thunk.name, s)


def test_save_and_load_in_a_fresh_process_without_mlir(mlp, tmp_path):
    data, _, exe = mlp
    exe.save(tmp_path / "prog")
    np.savez(tmp_path / "inputs.npz", *data.inputs)
    script = (
        "import sys, numpy as np\n"
        "from xla_gpu.runtime.program import load_program\n"
        f"exe = load_program({str(tmp_path / 'prog')!r}, trusted=True)\n"
        f"with np.load({str(tmp_path / 'inputs.npz')!r}) as f:\n"
        "    args = [f[f'arr_{i}'] for i in range(len(f.files))]\n"
        "out = exe.run(*args)\n"
        f"np.savez({str(tmp_path / 'out.npz')!r}, *out)\n"
        "print('mlir' in sys.modules, len(exe.kernels), exe.kernel_launches())\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            env=dict(os.environ))
    assert result.returncode == 0, result.stderr
    mlir_loaded, kernels, launches = result.stdout.split()
    assert mlir_loaded == "False" and int(kernels) == len(exe.kernels) and int(launches) > 0
    with np.load(tmp_path / "out.npz") as f:
        out = [f[f"arr_{i}"] for i in range(len(f.files))]
    module = hlo.parse_module((data.folder / AFTER).read_text())
    assert not data.mismatches(out, module)
    # runtime.load opens program directories too (when the dispatcher knows them)
    loaded = load_program(tmp_path / "prog", trusted=True)
    assert loaded.thunk_sequence_text() == exe.thunk_sequence_text()
    assert loaded.memory_analysis() == exe.memory_analysis()


def test_a_tampered_program_is_refused(mlp, tmp_path):
    _, _, exe = mlp
    exe.save(tmp_path / "prog")
    manifest = tmp_path / "prog" / "program.json"
    manifest.write_text(manifest.read_text().replace('"kernel"', '"kernal"', 1))
    with pytest.raises(xla_gpu.ArtifactError, match="does not match its digest"):
        load_program(tmp_path / "prog", trusted=True)
    with pytest.raises(xla_gpu.ArtifactError, match="not a directory"):
        load_program(tmp_path / "nothing", trusted=True)
    (tmp_path / "empty").mkdir()
    with pytest.raises(xla_gpu.ArtifactError, match="not a saved program"):
        load_program(tmp_path / "empty", trusted=True)


def test_program_kernels_come_from_the_compile_cache(mlp):
    _, text, exe = mlp
    again = xla_gpu.compile(text.replace("jit_mlp_train_step", "renamed"), target="cpu")
    assert any("0 compiled" in note for note in again.notes)
    assert sorted(again.kernels) == sorted(exe.kernels)


def test_tuple_parameters_and_outputs_are_flattened():
    text = """HloModule m
neg {
  x = f32[3] parameter(0)
  ROOT n = f32[3] negate(x)
}
ENTRY e {
  p = (f32[3], s32[2]) parameter(0)
  a = f32[3] get-tuple-element(p), index=0
  b = s32[2] get-tuple-element(p), index=1
  n = f32[3] fusion(a), kind=kLoop, calls=neg
  inner = (s32[2], f32[3]) tuple(b, a)
  ROOT t = (f32[3], (s32[2], f32[3])) tuple(n, inner)
}
"""
    exe = xla_gpu.compile(text, target="cpu")
    x = np.array([1, 2, 3], np.float32)
    i = np.array([7, 8], np.int32)
    out = exe.run((x, i))
    assert len(out) == 3
    np.testing.assert_array_equal(out[0], -x)
    np.testing.assert_array_equal(out[1], i)
    np.testing.assert_array_equal(out[2], x)
    with pytest.raises(xla_gpu.ArgumentError, match="tuple of 2 arrays"):
        exe.run((x,))


def _cli(*args: str) -> subprocess.CompletedProcess:
    code = "import sys; from xla_gpu._cli import run_hlo; sys.exit(run_hlo(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)


def test_xla_gpu_run_checks_whole_programs_and_dumps(tmp_path):
    path = load_data("scan_rnn").folder / AFTER
    result = _cli(str(path), "--target", "cpu", "--dump-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "program 'jit_scan_rnn'" in result.stdout and "OK" in result.stdout
    for name in ("before_optimizations.txt", "after_optimizations.txt",
                 "buffer-assignment.txt", "thunk-sequence.txt"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert "while " in (tmp_path / "thunk-sequence.txt").read_text()


def test_xla_gpu_run_exits_2_on_errors(tmp_path):
    bad = tmp_path / "bad.hlo"
    bad.write_text("HloModule m\nENTRY e {\n  x = f32[4] parameter(0)\n"
                   "  ROOT r = f32[4] rng(x, x), distribution=rng_uniform\n}\n")
    result = _cli(str(bad), "--target", "cpu")
    assert result.returncode == 2 and "'r'" in result.stderr


def test_cuda_programs_compile_without_a_gpu_and_run_where_one_is(tmp_path):
    """The cuda target: PTX (and cubin where ptxas is) for every kernel,
    cuBLASLt plans for every gemm, saved for a GPU machine; run and checked
    when this machine has a GPU (device arrays in and out too)."""
    from xla_gpu import runtime
    data = load_data("scan_rnn")
    text = (data.folder / AFTER).read_text()
    exe = xla_gpu.compile(text, target="cuda")
    assert exe.target == "cuda"
    assert all(k.ptx and ".entry" in k.ptx for k in exe.kernels.values())
    # The scan's loop (12 steps) is recorded unrolled into the command buffer.
    assert any(t.kind == "while" and t.trip_count == 12 for t in walk(exe.thunks))
    exe.save(tmp_path / "prog")
    loaded = load_program(tmp_path / "prog", trusted=True)
    assert loaded.target == "cuda" and loaded.thunk_sequence_text() == exe.thunk_sequence_text()
    if not runtime.cuda_available():
        return
    module = hlo.parse_module(text)
    assert not data.mismatches(loaded.run(*data.inputs), module, tf32=True)
    from xla_gpu.runtime.cuda import DeviceArray
    device = [DeviceArray.from_host(np.require(a, requirements="C")) for a in data.inputs]
    out = loaded.run(*device, device_outputs=True)
    assert not data.mismatches([o.to_host() for o in out], module, tf32=True)


_ADD = "add {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b)\n}\n"
# Programs with empty arrays: (body, parameter shapes). A reduce over an
# empty dimension is the init value (not empty); a fusion whose outputs are
# all empty becomes no kernel.
_ZERO_SIZE = {
    "negate": ("ENTRY e {\n p = f32[0,4] parameter(0)\n ROOT n = f32[0,4] negate(p)\n}",
               [(0, 4)]),
    "mixed_outputs": ("ENTRY e {\n p = f32[0,4] parameter(0)\n q = f32[3] parameter(1)\n"
                      " n = f32[0,4] negate(p)\n a = f32[3] add(q, q)\n"
                      " ROOT t = (f32[0,4], f32[3]) tuple(n, a)\n}", [(0, 4), (3,)]),
    "empty_parameter_out": ("ENTRY e {\n p = f32[0] parameter(0)\n q = f32[3] parameter(1)\n"
                            " a = f32[3] add(q, q)\n ROOT t = (f32[0], f32[3]) tuple(p, a)\n}",
                            [(0,), (3,)]),
    "reduce_empty_dims": (_ADD + "ENTRY e {\n p = f32[0,4] parameter(0)\n"
                          " z = f32[] constant(1.5)\n"
                          " r0 = f32[4] reduce(p, z), dimensions={0}, to_apply=add\n"
                          " r1 = f32[0] reduce(p, z), dimensions={1}, to_apply=add\n"
                          " r2 = f32[] reduce(p, z), dimensions={0,1}, to_apply=add\n"
                          " ROOT t = (f32[4], f32[0], f32[]) tuple(r0, r1, r2)\n}", [(0, 4)]),
    "empty_slice_of_full": ("ENTRY e {\n p = f32[5] parameter(0)\n"
                            " s = f32[0] slice(p), slice={[2:2]}\n"
                            " x = f32[0] exponential(s)\n n = f32[5] negate(p)\n"
                            " ROOT t = (f32[0], f32[5]) tuple(x, n)\n}", [(5,)]),
    "empty_dot_is_zeros": ("ENTRY e {\n a = f32[2,0] parameter(0)\n b = f32[0,3] parameter(1)\n"
                           " ROOT d = f32[2,3] dot(a, b), lhs_contracting_dims={1}, "
                           "rhs_contracting_dims={0}\n}", [(2, 0), (0, 3)]),
}


@pytest.mark.parametrize("name", list(_ZERO_SIZE))
def test_zero_size_programs_run_saved_and_loaded(name, tmp_path):
    """Empty outputs come back as empty arrays of their shape, next to the
    non-empty ones, from the compiled program and from its saved copy (a
    kernel thunk for an empty output used to make every run fail with "no
    kernel.so"); no kernel has only empty outputs, on cpu or cuda."""
    body, shapes = _ZERO_SIZE[name]
    text = "HloModule m\n" + body
    args = [np.arange(int(np.prod(s)), dtype=np.float32).reshape(s) + 1 for s in shapes]
    want = hlo.evaluate(hlo.parse_module(text), *args)
    exe = xla_gpu.compile(text, target="cpu")
    exe.save(tmp_path / "prog")
    loaded = xla_gpu.runtime.load(tmp_path / "prog", expected_digest=exe.artifact_digest)
    for got in (exe.run(*args), exe.run(*args), loaded.run(*args)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)
    for target_exe in (exe, xla_gpu.compile(text, target="cuda")):
        for kernel in target_exe.kernels.values():
            assert any(np.prod(o.shape) for o in kernel.spec.outputs), kernel.spec.name


# Tokens at the entry: a token parameter, a token inside a tuple parameter,
# token results made by after-all or passed through. They have no buffer:
# the program takes any value for them and gives back an empty byte array
# (the interpreter's token value), also once saved and loaded.
_TOKEN_PROGRAM = """HloModule tokens
ENTRY e {
  x = f32[3] parameter(0)
  t = token[] parameter(1)
  p = (token[], s32[2]) parameter(2)
  pt = token[] get-tuple-element(p), index=0
  pi = s32[2] get-tuple-element(p), index=1
  joined = token[] after-all(t, pt)
  fresh = token[] after-all()
  y = f32[3] add(x, x)
  ROOT r = (token[], f32[3], token[], s32[2], token[]) tuple(joined, y, t, pi, fresh)
}
"""


def test_token_parameters_and_results_have_no_buffers(tmp_path):
    exe = xla_gpu.compile(_TOKEN_PROGRAM, target="cpu")
    assert [r.describe() for r in exe.outputs] == ["token[]", "f32[3]", "token[]", "s32[2]",
                                                  "token[]"]
    x, i = np.array([1, 2, 3], np.float32), np.array([7, 8], np.int32)
    want = hlo.evaluate(hlo.parse_module(_TOKEN_PROGRAM), x, None, (None, i))
    exe.save(tmp_path / "prog")
    loaded = xla_gpu.runtime.load(tmp_path / "prog", expected_digest=exe.artifact_digest)
    for run in (exe.run, loaded.run):
        for token in (None, np.zeros((0,), np.uint8)):
            got = run(x, token, (token, i))
            assert len(got) == len(want)
            for g, w in zip(got, want):
                assert g.dtype == w.dtype and g.shape == w.shape
                np.testing.assert_array_equal(g, w)
    with pytest.raises(xla_gpu.ArgumentError, match="takes 3 arguments"):
        exe.run(x, None)
    with pytest.raises(xla_gpu.ArgumentError, match="tuple of 2 leaves"):
        exe.run(x, None, (i,))
    # Only a token result: nothing to compute.
    only = xla_gpu.compile("HloModule m\nENTRY e {\n  ROOT t = token[] after-all()\n}\n",
                           target="cpu")
    (token,) = only.run()
    assert token.shape == (0,) and token.dtype == np.uint8


@pytest.mark.parametrize("etype,values", [("s4", [1, -2, -3, 4, -8, 7]),
                                          ("s2", [1, -2, -1, 0, 1, -2]),
                                          ("u4", [1, 2, 15, 4, 8, 0])])
def test_sub_byte_arguments_are_converted_not_reinterpreted(etype, values):
    """ml_dtypes keeps an int4 in the low bits of its byte (-2 is 0x0e); the
    program's buffers hold the value sign-extended to the byte (0xfe), so
    the argument's values are converted, not its bytes copied."""
    import ml_dtypes
    dtype = {"s4": ml_dtypes.int4, "s2": ml_dtypes.int2, "u4": ml_dtypes.uint4}[etype]
    text = (f"HloModule m\nENTRY e {{\n  x = {etype}[6] parameter(0)\n"
            f"  w = s8[6] convert(x)\n  n = {etype}[6] negate(x)\n"
            f"  ROOT t = (s8[6], {etype}[6]) tuple(w, n)\n}}\n")
    x = np.array(values, dtype=dtype)
    want = hlo.evaluate(hlo.parse_module(text), x)
    got = xla_gpu.compile(text, target="cpu").run(x)
    np.testing.assert_array_equal(got[0], np.array(values, np.int8))
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g.astype(np.int8), w.astype(np.int8))


_BIN_EDGES = """HloModule m
edges_below {{
  e = f32[11] parameter(0)
  x = f32[5] parameter(1)
  eb = f32[5,11] broadcast(e), dimensions={{1}}
  xb = f32[5,11] broadcast(x), dimensions={{0}}
  le = pred[5,11] compare(eb, xb), direction=LE
  n = s32[5,11] convert(le)
  zero = s32[] constant(0)
  ROOT count = s32[5] reduce(n, zero), dimensions={{1}}, to_apply=sum
}}
sum {{
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT s = s32[] add(a, b)
}}
ENTRY e {{
  x = f32[5] parameter(0)
  edges = f32[11] constant({values})
  below = s32[5] call(edges, x), to_apply=edges_below
  ROOT t = (s32[5], f32[11]) tuple(below, edges)
}}
"""


def test_a_constant_read_by_a_call_and_returned_matches_the_interpreter():
    # Bin edges (jnp.histogram's): one constant read inside a called
    # computation and returned as it is.
    text = _BIN_EDGES.format(values="{-5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5}")
    x = np.array([-4.5, 0, 2.5, 5, -7], np.float32)
    want = hlo.evaluate(hlo.parse_module(text), x)
    got = xla_gpu.compile(text, target="cpu", cache=False).run(x)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(got[1], np.arange(-5, 6, dtype=np.float32))


def test_a_constant_whose_values_the_text_elides_is_refused_by_name():
    # XLA's printer writes `{...}` for a large constant unless asked for its
    # values: the program cannot run, and the error says which constant.
    text = _BIN_EDGES.format(values="{...}")
    with pytest.raises(xla_gpu.CompileError, match=r"constant 'edges' \(f32\[11\]\) "
                       r"has no values: the HLO text elides them"):
        xla_gpu.compile(text, target="cpu", cache=False)
