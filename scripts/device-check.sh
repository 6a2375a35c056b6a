#!/usr/bin/env bash
# One run on a GPU machine (CUDA toolkit, a CUDA build of torch, cmake, ninja,
# pytest): builds against the torch there, runs every test (CUDA included),
# compute-sanitizer on the standalone kernel tests, then the GPU benchmarks.
# Logs and JSON go to $OUT (or ./device-out); a short table is printed last.
#
#   scripts/device-check.sh            # everything, a few minutes on an H200
#   PHASE=test scripts/device-check.sh # build and tests only
#   PHASE=bench scripts/device-check.sh # build (incremental) and benchmarks only
#   QUICK=1 scripts/device-check.sh    # shorter benchmark runs
# Every step has a time limit (a step that hits it reports rc=124), so one
# slow step cannot take the whole run.
#   scripts/device-check.sh --prepare  # on a Debian machine with libgtest-dev:
#                                      # copies GoogleTest's sources to .deps/ so
#                                      # that a GPU machine without GoogleTest
#                                      # builds the C++ tests (copy .deps along)
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--prepare" ]; then
  rm -rf .deps/googletest && mkdir -p .deps && cp -r /usr/src/googletest .deps/googletest &&
    echo "copied /usr/src/googletest to .deps/googletest"
  exit
fi
OUT="${OUT:-$PWD/device-out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
BUILD="${BUILD:-build-gpu}"
MIN_TIME=0.3
[ -n "${QUICK:-}" ] && MIN_TIME=0.1
export PYTHONUNBUFFERED=1
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"

PHASE="${PHASE:-all}"
case "$PHASE" in all | test | bench) ;; *) echo "PHASE must be all, test or bench, got '$PHASE'" >&2; exit 2 ;; esac
want() { [ "$PHASE" = all ] || [ "$PHASE" = "$1" ]; }

declare -a names statuses
step() {  # step NAME LOGFILE SECONDS COMMAND...: runs with a time limit, logs, records pass/fail
  local name="$1" log="$OUT/$2" limit="$3"
  shift 3
  local t0=$SECONDS
  echo "=== $name" | tee -a "$OUT/summary.log"
  timeout "$limit" "$@" >"$log" 2>&1
  local rc=$?
  tail -n 25 "$log"
  names+=("$name")
  statuses+=("$([ $rc -eq 0 ] && echo ok || echo "FAILED rc=$rc") ($((SECONDS - t0)) s)")
  return $rc
}

{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())'
  nvcc --version | tail -n 2
  cmake --version | head -n 1
} >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

TORCH_PREFIX="$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
GTEST_SRC=""
[ -d .deps/googletest ] && GTEST_SRC="$PWD/.deps/googletest"
step "configure" configure.log 120 cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DPython3_EXECUTABLE="$(command -v "$PY")" -DSYNCFREE_WITH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" \
  ${GTEST_SRC:+-DSYNCFREE_GTEST_SOURCE_DIR="$GTEST_SRC"}
step "build" build.log 360 cmake --build "$BUILD" -j "$(nproc)"

if want test; then
  step "ctest (core, api, baselines, CUDA kernels vs CPU, consumer)" ctest.log 240 \
    ctest --test-dir "$BUILD" --output-on-failure
  step "pytest (all, CUDA included)" pytest.log 360 \
    env PYTHONPATH="$PWD/$BUILD/python" "$PY" -m pytest -q -rs tests/python
  # compute-sanitizer on the standalone kernel tests, or on a small Python run
  # of the operator when GoogleTest (and so that binary) is not there.
  SANITIZE_PY=(env PYTHONPATH="$PWD/$BUILD/python" "$PY" -c \
    "import torch, syncfree; l = torch.randint(-1, 3, (4, 70000), device='cuda'); syncfree.balanced_sample_gather(torch.randn(4, 70000, 8, device='cuda'), l, 700); syncfree.balanced_sample(l, 5000, seed=1); torch.cuda.synchronize()")
  if [ -x "$BUILD/tests/syncfree_cuda_tests" ]; then
    SANITIZE=("$BUILD/tests/syncfree_cuda_tests" --gtest_filter='*SanitizerCase*')
  else
    SANITIZE=("${SANITIZE_PY[@]}")
  fi
  step "compute-sanitizer memcheck" memcheck.log 180 \
    compute-sanitizer --tool memcheck --error-exitcode 1 "${SANITIZE[@]}"
  step "compute-sanitizer racecheck" racecheck.log 180 \
    compute-sanitizer --tool racecheck --error-exitcode 1 "${SANITIZE[@]}"
fi

if want bench; then
  step "benchmark C++ (cuda)" bench-gpu.log 240 "$BUILD/syncfree_bench" --device cuda \
    --min-time "$MIN_TIME" --json "$OUT/bench-gpu.json"
  step "benchmark C++ (cuda, many short rows)" bench-gpu-rows.log 90 "$BUILD/syncfree_bench" \
    --device cuda --sizes '' --batch 4096 --batch-sizes 64,1000 \
    --impls topk,syncfree,syncfree-indices,syncfree-graph --min-time "$MIN_TIME" \
    --json "$OUT/bench-gpu-rows.json"
  # torch.compile of the topk sampler, compiled afresh for each shape.
  step "benchmark Python (cuda, torch.compile)" bench-gpu-python.log 300 \
    env PYTHONPATH="$PWD/$BUILD/python" "$PY" bench/bench.py --device cuda --min-time "$MIN_TIME" \
    --impls naive,topk-compiled,syncfree --json "$OUT/bench-gpu-python.json"
fi

if want bench; then
  echo
  echo "=== GPU benchmark (C++ CLI; then Python: naive, torch.compile(topk), syncfree)"
  for log in bench-gpu bench-gpu-rows bench-gpu-python; do
    grep -E '^ +[0-9]+ +[0-9]+ ' "$OUT/$log.log" || echo "(no table: see $log.log)"
  done
fi
echo
echo "=== summary"
for i in "${!names[@]}"; do printf '%-62s %s\n' "${names[$i]}" "${statuses[$i]}"; done
