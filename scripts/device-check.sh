#!/usr/bin/env bash
# One run on a GPU machine (CUDA toolkit, a CUDA build of torch, cmake, ninja,
# pytest): builds against the torch there, runs every test (CUDA included),
# compute-sanitizer on the standalone kernel tests, then the GPU benchmarks.
# Logs and JSON go to $OUT (or ./device-out); a short table is printed last.
#
#   scripts/device-check.sh            # everything, a few minutes on an H200
#   QUICK=1 scripts/device-check.sh    # shorter benchmark runs
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

declare -a names statuses
step() {  # step NAME LOGFILE COMMAND...: runs, logs, records pass/fail
  local name="$1" log="$OUT/$2"
  shift 2
  local t0=$SECONDS
  echo "=== $name" | tee -a "$OUT/summary.log"
  "$@" >"$log" 2>&1
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
step "configure" configure.log cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DPython3_EXECUTABLE="$(command -v "$PY")" -DSYNCFREE_WITH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" \
  ${GTEST_SRC:+-DSYNCFREE_GTEST_SOURCE_DIR="$GTEST_SRC"}
step "build" build.log cmake --build "$BUILD" -j "$(nproc)"
step "ctest (core, api, baselines, CUDA kernels vs CPU, consumer)" ctest.log \
  ctest --test-dir "$BUILD" --output-on-failure
step "pytest (all, CUDA included)" pytest.log \
  env PYTHONPATH="$PWD/$BUILD/python" "$PY" -m pytest -q -rs tests/python
# compute-sanitizer on the standalone kernel tests, or on a small Python run
# of the operator when GoogleTest (and so that binary) is not there.
SANITIZE_PY=(env PYTHONPATH="$PWD/$BUILD/python" "$PY" -c \
  "import torch, syncfree; l = torch.randint(-1, 3, (4, 70000), device='cuda'); syncfree.balanced_sample_gather(torch.randn(4, 70000, 8, device='cuda'), l, 700); syncfree.balanced_sample(l, 5000, seed=1); torch.cuda.synchronize()")
if [ -x "$BUILD/tests/syncfree_cuda_tests" ]; then
  SANITIZE_MEM=("$BUILD/tests/syncfree_cuda_tests" --gtest_filter='*SanitizerCase*')
  SANITIZE_RACE=("$BUILD/tests/syncfree_cuda_tests" --gtest_filter='*SanitizerCase*')
else
  SANITIZE_MEM=("${SANITIZE_PY[@]}")
  SANITIZE_RACE=("${SANITIZE_PY[@]}")
fi
step "compute-sanitizer memcheck" memcheck.log \
  compute-sanitizer --tool memcheck --error-exitcode 1 "${SANITIZE_MEM[@]}"
step "compute-sanitizer racecheck" racecheck.log \
  compute-sanitizer --tool racecheck --error-exitcode 1 "${SANITIZE_RACE[@]}"
step "benchmark C++ (cuda)" bench-gpu.log "$BUILD/syncfree_bench" --device cuda \
  --min-time "$MIN_TIME" --json "$OUT/bench-gpu.json"
step "benchmark C++ (cuda, many short rows)" bench-gpu-rows.log "$BUILD/syncfree_bench" \
  --device cuda --sizes '' --batch 4096 --batch-sizes 64,1000 \
  --impls topk,syncfree,syncfree-indices,syncfree-graph --min-time "$MIN_TIME" \
  --json "$OUT/bench-gpu-rows.json"
step "benchmark Python (cuda, torch.compile)" bench-gpu-python.log \
  env PYTHONPATH="$PWD/$BUILD/python" "$PY" bench/bench.py --device cuda --min-time "$MIN_TIME" \
  --json "$OUT/bench-gpu-python.json"

echo
echo "=== GPU benchmark (C++ CLI)"
grep -E '^ +[0-9]+ +[0-9]+ ' "$OUT/bench-gpu.log" || echo "(no table: see bench-gpu.log)"
grep -E '^ +[0-9]+ +[0-9]+ ' "$OUT/bench-gpu-rows.log" || echo "(no table: see bench-gpu-rows.log)"
echo
echo "=== summary"
for i in "${!names[@]}"; do printf '%-62s %s\n' "${names[$i]}" "${statuses[$i]}"; done
