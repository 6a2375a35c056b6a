#!/usr/bin/env bash
# The GPU check: on a machine with a GPU, a CUDA toolkit, a CUDA build of
# torch, CMake, ninja, pytest and pytest-xdist, builds syncfree against that
# torch (once, for both phases), then
#   PHASE=test   the CUDA kernel tests (bit-equal with the CPU core), the CUDA
#                Python tests, compute-sanitizer on both launch paths, and the
#                GPU checks (syncs per call, CPU == CUDA counts, graph replays);
#   PHASE=bench  the GPU benchmarks and their verdict against the targets;
#   PHASE=all    both (the default).
# The CPU-only suite is CI's job, not this script's.
#
#   scripts/device-check.sh --prepare   # here, on a Debian machine with libgtest-dev: copies
#                                       # GoogleTest's sources to .deps/ (carry .deps along:
#                                       # the GPU machine has no GoogleTest)
#   PHASE=test scripts/device-check.sh  # on the GPU machine
#
# Exit status: 0 when every step ran and passed; 1 when a step failed (or
# could not run, or ran no test); 3 when everything that ran passed but a
# step was not available on this machine (compute-sanitizer refusing the
# device). Benchmark targets that are missed are reported in the verdict,
# not as failures; a benchmark that did not run is a failure.
# Logs, JSON and an archive of both (device-check.tgz) go to $OUT (default
# ./device-out). The last lines are the verdict table.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--prepare" ]; then
  rm -rf .deps/googletest && mkdir -p .deps && cp -r /usr/src/googletest .deps/googletest &&
    echo "copied /usr/src/googletest to .deps/googletest"
  exit
fi
OUT="${OUT:-$PWD/device-out}"
LOGS="$OUT/logs"
mkdir -p "$LOGS"
PY="${PYTHON:-python3}"
BUILD="${BUILD:-build-gpu}"
MIN_TIME="${MIN_TIME:-0.2}"
JOBS="$(nproc)"
export PYTHONUNBUFFERED=1
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
PHASE="${PHASE:-all}"
case "$PHASE" in all | test | bench) ;; *) echo "PHASE must be all, test or bench, got '$PHASE'" >&2; exit 2 ;; esac
want() { [ "$PHASE" = all ] || [ "$PHASE" = "$1" ]; }

declare -a names statuses details
record() {  # record NAME STATUS DETAIL   (STATUS: PASS, FAIL or N/A)
  names+=("$1"); statuses+=("$2"); details+=("$3")
  printf '%-44s %-5s %s\n' "$1" "$2" "$3" | tee -a "$LOGS/summary.log"
}
run_logged() {  # run_logged LOG SECONDS COMMAND...: exit status of COMMAND (124: time limit)
  local log="$LOGS/$1" limit="$2"
  shift 2
  echo "+ $*" >"$log"
  timeout "$limit" "$@" >>"$log" 2>&1
}
step() {  # step NAME LOG SECONDS COMMAND...: PASS when COMMAND exits 0
  local name="$1" log="$2" limit="$3" t0=$SECONDS
  shift 3
  run_logged "$log" "$limit" "$@"
  local rc=$?
  if [ $rc -eq 0 ]; then record "$name" PASS "$((SECONDS - t0)) s"
  elif [ $rc -eq 124 ]; then record "$name" FAIL "time limit ${limit} s ($log)"
  else record "$name" FAIL "rc=$rc ($log)"; tail -n 20 "$LOGS/$log"; fi
  return $rc
}
gtest_count() {  # gtest_count PASSED|SKIPPED|FAILED LOG: the count in GoogleTest's summary (0 if none)
  local n
  n=$(grep -Eo "^\[ +$1 +\] [0-9]+ tests?" "$LOGS/$2" | tail -n 1 | grep -Eo '[0-9]+' || true)
  echo "${n:-0}"
}
finish() {
  tar -C "$OUT" -czf "$OUT/device-check.tgz" logs 2>/dev/null
  echo
  echo "=== verdict ($PHASE)"
  local rc=0
  for i in "${!names[@]}"; do
    printf '%-44s %-5s %s\n' "${names[$i]}" "${statuses[$i]}" "${details[$i]}"
    case "${statuses[$i]}" in FAIL) rc=1 ;; N/A) [ $rc -eq 0 ] && rc=3 ;; esac
  done
  [ ${#names[@]} -eq 0 ] && rc=1
  echo "exit status $rc"
  exit $rc
}

# --- machine
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())'
  nvcc --version 2>&1 | tail -n 2
  cmake --version 2>&1 | head -n 1
} >"$LOGS/machine.txt" 2>&1
cat "$LOGS/machine.txt"
if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  record "GPU visible to torch" FAIL "no CUDA device (or no CUDA torch) for $PY"
  finish
fi
record "GPU visible to torch" PASS "$("$PY" -c 'import torch; print(torch.cuda.get_device_name())')"

# --- build (once: a second phase on the same machine only rebuilds what changed)
GTEST_SRC=""
if [ -d .deps/googletest ]; then GTEST_SRC="$PWD/.deps/googletest"; fi
if [ ! -f "$BUILD/build.ninja" ]; then
  TORCH_PREFIX="$("$PY" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')"
  step "configure" configure.log 180 cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DSYNCFREE_WITH_CUDA=ON \
    -DTORCH_CUDA_ARCH_LIST="$TORCH_CUDA_ARCH_LIST" \
    ${GTEST_SRC:+-DSYNCFREE_GTEST_SOURCE_DIR="$GTEST_SRC"} || finish
fi
step "build" build.log 420 cmake --build "$BUILD" -j "$JOBS" || finish
if ! grep -q '^SYNCFREE_CUDA_OPERATOR:INTERNAL=ON' "$BUILD/CMakeCache.txt"; then
  record "CUDA operator built" FAIL "the build did not compile the CUDA adapter ($BUILD/CMakeCache.txt)"
  finish
fi
KERNEL_TESTS="$BUILD/tests/syncfree_cuda_tests"
if [ ! -x "$KERNEL_TESTS" ]; then
  record "CUDA kernel tests built" FAIL "no $KERNEL_TESTS: no GoogleTest (run --prepare on a Debian machine and carry .deps)"
fi

if want test; then
  # Kernel tests: every test must run (a skip means no GPU was seen).
  if [ -x "$KERNEL_TESTS" ]; then
    run_logged kernel-tests.log 240 "$KERNEL_TESTS"
    rc=$?
    passed=$(gtest_count PASSED kernel-tests.log)
    skipped=$(gtest_count SKIPPED kernel-tests.log)
    failed=$(gtest_count FAILED kernel-tests.log)
    detail="passed=$passed failed=$failed skipped=$skipped"
    if [ $rc -eq 0 ] && [ "$passed" -gt 0 ] && [ "$skipped" -eq 0 ]; then
      record "CUDA kernel tests (== CPU core)" PASS "$detail"
    else
      record "CUDA kernel tests (== CPU core)" FAIL "$detail rc=$rc"
      tail -n 30 "$LOGS/kernel-tests.log"
    fi
  fi
  # The C++ tests of the torch build (API, core, consumer), against this torch.
  step "ctest (all C++ tests)" ctest.log 300 ctest --test-dir "$BUILD" --output-on-failure \
    --no-tests=error -j 4
  # CUDA Python tests, in parallel; the CPU-only suite is CI's.
  run_logged pytest-cuda.log 360 env PYTHONPATH="$PWD/$BUILD/python" SYNCFREE_EXPECT_CUDA_OPERATOR=1 \
    "$PY" -m pytest -q -rs -n 4 -p no:cacheprovider tests/python/test_cuda.py tests/python/test_build.py
  rc=$?
  summary=$(grep -E '^[0-9]+ (passed|failed)|^=+ .*(passed|failed)' "$LOGS/pytest-cuda.log" | tail -n 1)
  if [ $rc -eq 0 ] && ! grep -q "skipped" <<<"$summary" && grep -q "passed" <<<"$summary"; then
    record "pytest CUDA" PASS "$summary"
  else
    record "pytest CUDA" FAIL "rc=$rc: ${summary:-no summary} (a skip here means the GPU was not used)"
    tail -n 30 "$LOGS/pytest-cuda.log"
  fi
  # compute-sanitizer: both launch paths (SanitizerCase), syncfree's kernels only.
  if [ -x "$KERNEL_TESTS" ]; then
    for tool in memcheck racecheck initcheck synccheck; do
      run_logged "sanitizer-$tool.log" 240 compute-sanitizer --tool "$tool" --error-exitcode 1 \
        --kernel-name kns=syncfree "$KERNEL_TESTS" --gtest_filter='*SanitizerCase*'
      rc=$?
      if grep -qiE "device not supported|not supported on this device" \
          "$LOGS/sanitizer-$tool.log"; then
        record "compute-sanitizer $tool" N/A "the tool refused this device (see sanitizer-$tool.log)"
      elif [ $rc -eq 0 ] && [ "$(gtest_count PASSED "sanitizer-$tool.log")" -gt 0 ] &&
          [ "$(gtest_count SKIPPED "sanitizer-$tool.log")" -eq 0 ]; then
        record "compute-sanitizer $tool" PASS "$(grep -E 'ERROR SUMMARY' "$LOGS/sanitizer-$tool.log" | tail -n 1)"
      else
        record "compute-sanitizer $tool" FAIL "rc=$rc (sanitizer-$tool.log)"
        tail -n 20 "$LOGS/sanitizer-$tool.log"
      fi
    done
  else
    record "compute-sanitizer" FAIL "no kernel test binary to run it on"
  fi
  # Syncs per call, CPU == CUDA counts, graph replays (one line each).
  step "GPU checks (scripts/device_report.py)" checks.log 240 \
    env PYTHONPATH="$PWD/$BUILD/python" "$PY" scripts/device_report.py checks
  cat "$LOGS/checks.log"
fi

if want bench; then
  step "benchmark C++ (cuda)" bench-gpu.log 240 "$BUILD/syncfree_bench" --device cuda \
    --min-time "$MIN_TIME" --json "$LOGS/bench-gpu.json"
  step "benchmark C++ (cuda, many short rows)" bench-gpu-rows.log 120 "$BUILD/syncfree_bench" \
    --device cuda --sizes '' --batch 4096 --batch-sizes 64,1000 \
    --impls topk,syncfree,syncfree-indices,syncfree-graph --min-time "$MIN_TIME" \
    --json "$LOGS/bench-gpu-rows.json"
  # The seed article's samplers in Python (torch.compile of the static one,
  # compiled afresh per shape), on the sizes of the targets only.
  step "benchmark Python (cuda, torch.compile)" bench-gpu-python.log 300 \
    env PYTHONPATH="$PWD/$BUILD/python" "$PY" bench/bench.py --device cuda --min-time "$MIN_TIME" \
    --sizes 1e6,1e7 --batch-sizes 1e5 --impls naive,topk,topk-compiled,syncfree \
    --json "$LOGS/bench-gpu-python.json"
  echo
  echo "=== GPU benchmark tables"
  for log in bench-gpu bench-gpu-rows bench-gpu-python; do
    grep -E '^ *\|? *[0-9]+ +\|? *[0-9]+ ' "$LOGS/$log.log" || echo "(no table: see $log.log)"
  done
  echo
  echo "=== targets"
  run_logged targets.log 60 "$PY" scripts/device_report.py targets "$LOGS/bench-gpu.json" \
    "$LOGS/bench-gpu-python.json"
  rc=$?
  cat "$LOGS/targets.log"
  if [ $rc -eq 0 ]; then record "benchmark verdict" PASS "$(tail -n 1 "$LOGS/targets.log")"
  else record "benchmark verdict" FAIL "$(tail -n 1 "$LOGS/targets.log")"; fi
fi
finish
