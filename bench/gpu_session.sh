#!/bin/bash
# One lent GPU's whole check, as one command on the device machine (its
# time is short: a start costs minutes, so everything goes in one call).
#
#   here:   python bench/gpu_check.py prepare && python bench/run_gpu.py prepare \
#             && python bench/run_gpu.py prepare-programs
#   there:  bash bench/gpu_session.sh      (carry build/gpu_check, build/run_gpu,
#                                            build/run_gpu_programs)
#
# What comes back under $OUT (at most 8 files): env.txt, gpu_check.log,
# run_gpu.log, run_gpu.md, run_gpu.json, programs.log (with the profile
# step's output), programs.json, tests.log. Each step has its own time
# limit so that a hang in one leaves the rest their time.
#   GPU_SESSION_STEPS  the steps (default: check kernels programs):
#     check     bench/gpu_check.py run (the cuda path, every kernel, FFI)
#     kernels   bench/run_gpu.py run: the corpus and GEMMs vs jax.jit
#     programs  whole programs, with and without CUDA graphs, vs jax.jit
#     profile   where the host's time goes in PROFILE_PROGRAMS' runs
#     tests     the pytest files GPU_TESTS (default: those that need a GPU) and
#     plugin    jax through the PJRT plugin on the GPU: both need the compiler
#               there, carried by bench/gpu_bundle.py (make here; receive each
#               chunk there, a call each; install in this call, before this
#               script)
#   RUN_GPU_CASES  the kernels' cases (default: all)
set -o pipefail
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export XLA_GPU_CACHE_DIR=$(mktemp -d)
OUT=${OUT:-$(mktemp -d)}
PY=${PYTHON:-python3}
STEPS=${GPU_SESSION_STEPS:-"check kernels programs"}
PROFILE_PROGRAMS=${PROFILE_PROGRAMS:-"random_dropout/cb random_dropout/nocb"}
# The test files with cases that run only where a GPU is (skipped elsewhere).
GPU_TEST_FILES="tests/python/runtime tests/python/program/test_program.py
  tests/python/emitters/test_numerics_cpu.py tests/python/pjrt/test_pjrt_cuda.py
  tests/python/kernel_compiler/test_kernel_cache_and_artifacts.py"
start=$(date +%s)
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  $PY - <<'EOF'
import platform, numpy
print("python", platform.python_version(), "numpy", numpy.__version__)
try:
    import cuda.bindings
    print("cuda-bindings", cuda.bindings.__version__)
except Exception as e:
    print("cuda-bindings missing:", e)
try:
    import jax
    print("jax", jax.__version__, jax.devices())
except Exception as e:
    print("jax:", e)
EOF
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
code=0
for step in $STEPS; do
  echo "== $step ($(( $(date +%s) - start )) s in)"
  case $step in
    check)
      timeout -k 5 ${GPU_CHECK_TIMEOUT:-200} $PY bench/gpu_check.py run build/gpu_check \
        2>&1 | tee "$OUT/gpu_check.log" || code=1 ;;
    kernels)
      timeout -k 5 ${RUN_GPU_TIMEOUT:-150} $PY bench/run_gpu.py run build/run_gpu \
        --out "$OUT" --budget ${RUN_GPU_BUDGET:-90} ${RUN_GPU_CASES:+--cases $RUN_GPU_CASES} \
        2>&1 | tee "$OUT/run_gpu.log" || code=1 ;;
    programs)
      timeout -k 5 ${PROGRAMS_TIMEOUT:-100} $PY bench/run_gpu.py run-programs \
        build/run_gpu_programs --out "$OUT" --budget ${PROGRAMS_BUDGET:-60} \
        2>&1 | tee "$OUT/programs.log" || code=1 ;;
    profile)
      for program in $PROFILE_PROGRAMS; do
        timeout -k 5 ${PROFILE_TIMEOUT:-60} $PY bench/profile_program_run.py \
          build/run_gpu_programs "$program" || code=1
      done >> "$OUT/programs.log" 2>&1 ;;
    tests)
      PYTHONPATH="$PWD:/tmp/xla_gpu_site" timeout -k 5 ${TESTS_TIMEOUT:-240} $PY -m pytest \
        -q -p no:cacheprovider -rfEs ${GPU_TESTS:-$GPU_TEST_FILES} 2>&1 \
        | tee -a "$OUT/tests.log" || code=1 ;;
    plugin)
      PYTHONPATH="/tmp/xla_gpu_site_jax:$PWD:/tmp/xla_gpu_site" timeout -k 5 \
        ${PLUGIN_TIMEOUT:-180} $PY bench/gpu_check.py run build/gpu_check --cuda-path-only \
        --cases plugin 2>&1 | tee -a "$OUT/tests.log" || code=1 ;;
    *) echo "unknown step $step"; code=2 ;;
  esac
done
echo "== done in $(( $(date +%s) - start )) s, exit $code"
exit $code
