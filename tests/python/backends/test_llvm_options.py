"""The process-wide LLVM switch the host code generation sets (no loop
strength reduction) must not reach the cuda target's NVPTX code generation
in the same process: the first device code generation turns it back on for
good. Each case runs in a fresh interpreter (the switch is per process)."""

import subprocess
import sys
import textwrap

HLO = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  p = f32[64,32] parameter(0)
  c = f32[] constant(0)
  ROOT r = f32[64] reduce(p, c), dimensions={1}, to_apply=add
}
"""


def _run(script: str) -> list[str]:
    code = textwrap.dedent(f"""
        import xla_gpu
        from xla_gpu.backends import llvm_options
        HLO = {HLO!r}
        def cuda():
            try:
                xla_gpu.compile(HLO, target="cuda", cache=False)
            except xla_gpu.XlaGpuError:
                pass   # no cubin compiler here: the PTX was generated before
        """) + textwrap.dedent(script)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


def test_host_code_generation_turns_lsr_off_until_device_code_generation():
    out = _run("""
        xla_gpu.compile(HLO, target="cpu", cache=False)
        print(llvm_options.lsr_disabled())
        cuda()
        print(llvm_options.lsr_disabled())
        xla_gpu.compile(HLO.replace("f32[64,32]", "f32[64,48]"), target="cpu", cache=False)
        print(llvm_options.lsr_disabled())
        """)
    assert out == ["True", "False", "False"]


def test_device_code_generation_first_keeps_lsr_on_for_the_host():
    out = _run("""
        cuda()
        xla_gpu.compile(HLO, target="cpu", cache=False)
        print(llvm_options.lsr_disabled())
        """)
    assert out == ["False"]
