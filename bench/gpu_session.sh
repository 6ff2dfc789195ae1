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
# run_gpu.log, run_gpu.md, run_gpu.json, programs.log, programs.json,
# profile.txt. Each step has its own time limit so that a hang in one
# leaves the rest their time; GPU_SESSION_STEPS picks steps (default: the
# first three), RUN_GPU_CASES the kernels' cases (default: all),
# PROFILE_PROGRAMS the saved programs the profile step runs.
set -o pipefail
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export XLA_GPU_CACHE_DIR=$(mktemp -d)
OUT=${OUT:-$(mktemp -d)}
PY=${PYTHON:-python3}
STEPS=${GPU_SESSION_STEPS:-"check kernels programs"}
PROFILE_PROGRAMS=${PROFILE_PROGRAMS:-"random_dropout/cb random_dropout/nocb"}
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
      done > "$OUT/profile.txt" 2>&1 ;;
    *) echo "unknown step $step"; code=2 ;;
  esac
done
echo "== done in $(( $(date +%s) - start )) s, exit $code"
exit $code
