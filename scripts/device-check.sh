#!/usr/bin/env bash
# The GPU check: builds syncfree against the torch of the machine's own Python
# (default python3: no virtual environment, no package registry) and runs the
# CUDA checks, most informative first, inside one total deadline.
#
#   scripts/device-check.sh --prepare    # on a Debian machine with libgtest-dev:
#                                        # copies GoogleTest's sources to .deps/,
#                                        # which must travel with the tree (the GPU
#                                        # machine has no GoogleTest)
#   PHASE=test scripts/device-check.sh   # on the GPU machine, from the repository root
#   scripts/device-check.sh --rehearse   # on a machine without a GPU: every step up to
#                                        # the GPU (tools, configure, build, the C++ tests
#                                        # that need no GPU); GPU steps are NOT-RUN
#
# PHASE (comma-separated; default test):
#   test      configure and build (one go, every core), the CUDA kernel tests
#             (bit-equal with the CPU core), the CUDA Python tests (pytest -m
#             cuda: CPU == CUDA, host syncs per call, CUDA graph capture and
#             replay), the other C++ tests;
#   bench     the GPU benchmarks and their verdict against the speed targets,
#             then the detection training step (bench/detection_bench.py:
#             host syncs, CUDA graph replay == eager, graphed vs torchvision)
#             of the default model, then of RetinaNet;
#   sanitize  compute-sanitizer (memcheck, racecheck, initcheck, synccheck) on
#             both launch paths;
#   all       test,bench,sanitize.
# DEADLINE (seconds, default 480; 3600 with --rehearse) bounds the whole run:
# before each step the clock is read, and a step whose planned time no longer
# fits is SKIPPED-FOR-TIME (which fails the run). Planned times and limits are
# for 16 cores; with fewer cores they are scaled (TIME_SCALE, default
# 16 / cores, at least 1).
#
# Exit status: 0 when every step that was asked for ran and passed (speed
# targets that are missed are reported as MISSED, they do not fail the run;
# a result that is NOT-MEASURED does;
# so are GPU steps of a rehearsal, NOT-RUN); 1 when a step failed, timed out,
# was SKIPPED-FOR-TIME or was INTERRUPTED (TERM, INT); 2 for bad usage or a
# missing prerequisite (said at once, with what to do); 3 when everything
# that ran passed but a tool was not found or refused the device.
#
# $OUT (default ./device-out) receives at most 7 files: verdict.txt (the
# verdict table), device-check.tgz (every log), and the five benchmark JSONs
# of the bench phase (bench-gpu, bench-gpu-rows, bench-gpu-python,
# bench-gpu-detection, bench-gpu-detection-retinanet). The
# verdict and the archive are rewritten after every step, and at the end also
# on TERM, INT and errors.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"

if [ "${1:-}" = "--prepare" ]; then
  src=/usr/src/googletest
  if [ ! -f "$src/CMakeLists.txt" ]; then
    echo "device-check --prepare: $src not found: install libgtest-dev (Debian: scripts/setup-debian.sh)" >&2
    exit 2
  fi
  rm -rf .deps/googletest && mkdir -p .deps && cp -r "$src" .deps/googletest || exit 2
  echo "device-check --prepare: copied $src to .deps/googletest ($(du -sh .deps | cut -f1))"
  echo "device-check --prepare: copy .deps along to the GPU machine (it is ignored by git)"
  exit 0
fi
REHEARSE=0
if [ "${1:-}" = "--rehearse" ]; then REHEARSE=1; shift; fi
if [ $# -gt 0 ]; then
  echo "usage: scripts/device-check.sh [--prepare | --rehearse]   (PHASE, DEADLINE, PYTHON, BUILD, OUT from the environment)" >&2
  exit 2
fi

T0=$SECONDS
OUT="${OUT:-$ROOT/device-out}"
BUILD="${BUILD:-build-gpu}"
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
LOGS="$BUILD/device-check-logs"
PY="${PYTHON:-python3}"
JOBS="${JOBS:-$(nproc)}"
MIN_TIME="${MIN_TIME:-0.2}"
if [ $REHEARSE = 1 ]; then DEADLINE="${DEADLINE:-3600}"; else DEADLINE="${DEADLINE:-480}"; fi
TIME_SCALE="${TIME_SCALE:-$(( (16 + JOBS - 1) / JOBS ))}"
RESERVE=10  # seconds kept for the verdict and the archive
export PYTHONUNBUFFERED=1
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
PHASE="${PHASE:-test}"
[ "$PHASE" = all ] && PHASE=test,bench,sanitize
for p in ${PHASE//,/ }; do
  case "$p" in test | bench | sanitize) ;;
    *) echo "PHASE must be test, bench, sanitize (comma-separated) or all, got '$PHASE'" >&2; exit 2 ;;
  esac
done
want() { [[ ",$PHASE," == *",$1,"* ]]; }
case "$DEADLINE" in '' | *[!0-9]*) echo "DEADLINE must be whole seconds, got '$DEADLINE'" >&2; exit 2 ;; esac

# The CUDA toolkit's tools, and those installed beside the Python (pip).
PATH="/usr/local/cuda/bin:$PATH:/usr/local/cuda/compute-sanitizer"
if py_path="$(command -v "$PY" 2>/dev/null)"; then
  PATH="$(dirname "$py_path"):$PATH:$HOME/.local/bin"
fi
export PATH

rm -rf "$LOGS" && mkdir -p "$LOGS" "$OUT" || { echo "cannot create $LOGS or $OUT" >&2; exit 2; }

# --- bookkeeping: the verdict table, rewritten after every step
declare -a names statuses details
current="" child="" finished=0 prereq_missing=0 final_status=""
elapsed() { echo $((SECONDS - T0)); }
left() { echo $((DEADLINE - (SECONDS - T0) - RESERVE)); }
write_verdict() {
  {
    echo "syncfree device check: phase $PHASE$([ $REHEARSE = 1 ] && echo ' (rehearsal: no GPU steps)'), deadline ${DEADLINE} s, $(elapsed) s elapsed"
    if [ -n "$final_status" ]; then echo "status: $final_status"
    else echo "status: INCOMPLETE (still running, or stopped before the end: not a pass)"; fi
    for i in "${!names[@]}"; do
      printf '%-46s %-16s %s\n' "${names[$i]}" "${statuses[$i]}" "${details[$i]}"
    done
  } >"$LOGS/verdict.txt"
  cp "$LOGS/verdict.txt" "$OUT/verdict.txt.tmp" && mv "$OUT/verdict.txt.tmp" "$OUT/verdict.txt"
  tar -C "$LOGS/.." -czf "$OUT/device-check.tgz.tmp" "$(basename "$LOGS")" 2>/dev/null &&
    mv "$OUT/device-check.tgz.tmp" "$OUT/device-check.tgz"
}
record() {  # record NAME STATUS DETAIL
  names+=("$1"); statuses+=("$2"); details+=("$3")
  printf '%-46s %-16s %s\n' "$1" "$2" "$3"
  write_verdict
}
exit_status() {
  local rc=0 s
  [ $prereq_missing = 1 ] && return 2
  [ ${#names[@]} -eq 0 ] && return 1
  for s in "${statuses[@]}"; do
    case "$s" in
      PASS | MISSED | NOT-RUN) ;;
      NOT-FOUND | N/A) [ $rc -eq 0 ] && rc=3 ;;
      *) rc=1 ;;
    esac
  done
  return $rc
}
finish() {
  [ $finished = 1 ] && return
  finished=1
  trap - TERM INT
  exit_status
  local rc=$?
  final_status="exit $rc"
  write_verdict
  echo
  echo "=== verdict"
  cat "$LOGS/verdict.txt"
  echo "exit status $rc; $OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
  exit $rc
}
on_signal() {
  if [ -n "$child" ]; then kill -TERM "$child" 2>/dev/null; wait "$child" 2>/dev/null; fi
  record "${current:-device check}" INTERRUPTED "SIG$1 after $(elapsed) s"
  finish
}
trap 'on_signal TERM' TERM
trap 'on_signal INT' INT
# A script that stops on its own error (set -e / -u) before the end fails,
# whatever the steps recorded so far.
on_exit() {
  local rc=$1
  if [ $finished = 0 ] && [ $rc -ne 0 ] && [ $prereq_missing = 0 ]; then
    record "${current:-device check}" FAIL "the script stopped early (exit status $rc)"
  fi
  finish
}
trap 'on_exit $?' EXIT

# run_timed LOG LIMIT COMMAND...: runs COMMAND in the background (so that a
# signal is handled at once), output to LOG; its exit status (124: limit).
run_timed() {
  local log="$LOGS/$1" limit="$2"
  shift 2
  echo "+ $*" >"$log"
  timeout --kill-after=5 "$limit" "$@" >>"$log" 2>&1 </dev/null &
  child=$!
  wait "$child"
  local rc=$?
  child=""
  return $rc
}
# begin NAME PLANNED LIMIT: 0 when the step fits in the time left (it then
# runs with LIMIT cut to that time: $step_limit); otherwise records it
# SKIPPED-FOR-TIME. PLANNED and LIMIT are for 16 cores (scaled here).
begin() {
  local planned=$(($2 * TIME_SCALE)) limit=$(($3 * TIME_SCALE)) remaining
  remaining=$(left)
  current="$1"
  if [ "$remaining" -lt "$planned" ]; then
    record "$1" SKIPPED-FOR-TIME "needs about ${planned} s, ${remaining} s left of ${DEADLINE} s"
    return 1
  fi
  step_limit=$((limit < remaining ? limit : remaining))
  step_t0=$SECONDS
  echo "[$(elapsed) s] $1 (planned ${planned} s, limit ${step_limit} s)"
  return 0
}
# end NAME RC LOG [DETAIL]: PASS when RC is 0, else FAIL or TIMEOUT with LOG's tail.
end() {
  local took=$((SECONDS - step_t0))
  if [ "$2" -eq 0 ]; then
    record "$1" PASS "${took} s${4:+; $4}"
  elif [ "$2" -eq 124 ] || [ "$2" -eq 137 ]; then
    record "$1" TIMEOUT "stopped at ${step_limit} s ($3)"
  else
    record "$1" FAIL "rc=$2 after ${took} s${4:+; $4} ($3)"
    tail -n 25 "$LOGS/$3"
  fi
}
# not_run NAME: a GPU step in a rehearsal.
not_run() { record "$1" NOT-RUN "rehearsal: needs a GPU"; }
gtest_count() {  # gtest_count PASSED|SKIPPED|FAILED LOG: the count in GoogleTest's summary
  local n
  n=$(grep -Eo "^\[ +$1 +\] [0-9]+ tests?" "$LOGS/$2" | tail -n 1 | grep -Eo '[0-9]+' | head -n 1)
  echo "${n:-0}"
}
missing() {  # missing WHAT TODO: a prerequisite is missing: say what to do, stop.
  prereq_missing=1
  record "prerequisite: $1" FAIL "not found: $2"
  echo "device-check: cannot go on without $1: $2" >&2
  finish
}

# --- what this runs against, and what it needs copied along
echo "=== device check: phase $PHASE, deadline ${DEADLINE} s, $JOBS cores (time scale x$TIME_SCALE)$([ $REHEARSE = 1 ] && echo ', REHEARSAL (no GPU steps)')"
echo "needs copied along from the source machine: .deps (made by scripts/device-check.sh --prepare); found: $([ -f .deps/googletest/CMakeLists.txt ] && echo yes || echo NO)"
current="machine"
write_verdict  # a verdict exists (INCOMPLETE) even if the probe below hangs
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -srm), $(nproc) cores"
  if command -v nvidia-smi >/dev/null; then
    echo "GPU: $(timeout 60 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -n 4 | paste -sd ';')"
  else
    echo "GPU: nvidia-smi not found"
  fi
  echo "python: $PY -> $(command -v "$PY" || echo 'not found')"
  timeout 120 "$PY" - <<'PY' 2>&1 || echo "torch: cannot be imported (or the probe hung for 120 s)"
import sys, importlib.util as u
print("python version:", sys.version.split()[0])
import torch
print("torch:", torch.__version__, "| CUDA build:", torch.version.cuda,
      "| cuda available:", torch.cuda.is_available(),
      "| device:", torch.cuda.get_device_name() if torch.cuda.is_available() else "-")
import torch.utils
print("torch cmake prefix:", torch.utils.cmake_prefix_path)
for m in ("pytest", "xdist", "torchvision", "numpy"):
    print(f"{m}:", "found" if u.find_spec(m) else "not found")
PY
  for tool in nvcc cmake ninja compute-sanitizer; do
    if command -v "$tool" >/dev/null; then
      case "$tool" in
        nvcc) echo "nvcc: $(command -v nvcc), $(nvcc --version | grep -Eo 'release [0-9.]+' | head -n 1)" ;;
        compute-sanitizer) echo "compute-sanitizer: $(command -v compute-sanitizer)" ;;
        *) echo "$tool: $(command -v "$tool"), $("$tool" --version | head -n 1)" ;;
      esac
    else
      echo "$tool: not found"
    fi
  done
  if [ -f .deps/googletest/CMakeLists.txt ]; then echo "googletest: .deps/googletest (copied along)"
  else echo "googletest: not found in .deps"; fi
} >"$LOGS/machine.txt" 2>&1
cat "$LOGS/machine.txt"
grep -q "^torch: .*CUDA build: [0-9]" "$LOGS/machine.txt" ||
  missing "a CUDA build of torch for $PY" "use a Python whose torch is a CUDA build (PYTHON=...); this script installs nothing"
for tool in nvcc cmake ninja; do
  grep -q "^$tool: not found" "$LOGS/machine.txt" &&
    missing "$tool" "put it on PATH (nvcc: the CUDA toolkit's bin, e.g. /usr/local/cuda/bin; cmake, ninja: pip, beside $PY)"
done
[ -f .deps/googletest/CMakeLists.txt ] ||
  missing "GoogleTest sources (.deps/googletest)" "run scripts/device-check.sh --prepare on a machine with libgtest-dev, then copy .deps along"
# The CUDA Python tests need pytest and numpy (their NumPy references).
grep -q "^pytest: found" "$LOGS/machine.txt" && grep -q "^numpy: found" "$LOGS/machine.txt" &&
  have_pytest=1 || have_pytest=0
grep -q "^xdist: found" "$LOGS/machine.txt" && xdist=(-n 4) || xdist=()
grep -q "^compute-sanitizer: not found" "$LOGS/machine.txt" && have_sanitizer=0 || have_sanitizer=1
if [ $REHEARSE = 1 ]; then
  not_run "GPU visible to torch"
elif grep -q "cuda available: True" "$LOGS/machine.txt"; then
  record "GPU visible to torch" PASS "$(grep -Eo 'device: .*' "$LOGS/machine.txt" | head -n 1)"
else
  record "GPU visible to torch" FAIL "no CUDA device for $PY (on a machine without a GPU: --rehearse)"
  finish
fi

# --- build: configure once (a later phase on the same machine only rebuilds
# what changed), GoogleTest from the copied sources on every machine; file
# by file (no unity build: the GPU machine has many cores).
# The Python entry (syncfree._C) is built for $PY where it has its headers
# (AUTO): its absolute path, symbolic links kept (a venv's python is one).
py_abs="$(command -v "$PY" || true)"
case "$py_abs" in /*) ;; ?*) py_abs="$PWD/$py_abs" ;; esac
if [ ! -f "$BUILD/build.ninja" ]; then
  if begin "configure" 25 120; then
    prefix="$(sed -n 's/^torch cmake prefix: //p' "$LOGS/machine.txt")"
    run_timed configure.log "$step_limit" cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_DISABLE_FIND_PACKAGE_Python3=ON \
      -DSYNCFREE_PYTHON="$py_abs" \
      -DSYNCFREE_WITH_CUDA=ON -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" -DSYNCFREE_UNITY_BUILD=OFF \
      -DTORCH_CUDA_ARCH_LIST="$TORCH_CUDA_ARCH_LIST" \
      -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON -DSYNCFREE_GTEST_SOURCE_DIR="$ROOT/.deps/googletest"
    rc=$?
    end "configure" $rc configure.log
    [ $rc -eq 0 ] || finish
  else
    finish
  fi
fi
begin "build" 120 300 || finish
run_timed build.log "$step_limit" cmake --build "$BUILD" -j "$JOBS"
rc=$?
end "build" $rc build.log "$(grep -c '^\[' "$LOGS/build.log") build lines"
[ $rc -eq 0 ] || finish
if ! grep -q '^SYNCFREE_CUDA_OPERATOR:INTERNAL=ON' "$BUILD/CMakeCache.txt"; then
  record "CUDA operator built" FAIL "the build did not compile the CUDA adapter ($BUILD/CMakeCache.txt)"
  finish
fi
# Whether the wrappers' CUDA calls below go through the Python entry or,
# without Python's headers here, through torch.ops (the tests pass either way).
if compgen -G "$BUILD/python/syncfree/_C.*.so" >/dev/null; then
  record "Python entry syncfree._C built" PASS "for $py_abs"
else
  record "Python entry syncfree._C built" NOT-RUN "$(grep -o 'not building the Python entry.*' "$LOGS/configure.log" | head -n 1) (the wrappers call torch.ops)"
fi
KERNEL_TESTS="$BUILD/tests/syncfree_cuda_tests"
if [ ! -x "$KERNEL_TESTS" ]; then
  record "CUDA kernel tests built" FAIL "no $KERNEL_TESTS"
  finish
fi
# The sanitizer cases exist (the filter of the sanitize phase matches them).
SANITIZER_FILTER='*SanitizerCase*'
sanitizer_cases=$("$KERNEL_TESTS" --gtest_list_tests --gtest_filter="$SANITIZER_FILTER" 2>/dev/null | grep -c '^  ')
if [ "${sanitizer_cases:-0}" -ge 2 ]; then
  record "sanitizer cases listed" PASS "$sanitizer_cases tests match $SANITIZER_FILTER"
else
  record "sanitizer cases listed" FAIL "${sanitizer_cases:-0} tests match $SANITIZER_FILTER (want both launch paths' cases)"
fi

pyenv=(env PYTHONPATH="$BUILD/python" SYNCFREE_EXPECT_CUDA_OPERATOR=1)
if want test; then
  # Kernel tests, once (ctest below leaves them out): every test must run.
  if [ $REHEARSE = 1 ]; then not_run "CUDA kernel tests (== CPU core)"
  elif begin "CUDA kernel tests (== CPU core)" 30 180; then
    run_timed kernel-tests.log "$step_limit" "$KERNEL_TESTS"
    rc=$?
    detail="passed=$(gtest_count PASSED kernel-tests.log) failed=$(gtest_count FAILED kernel-tests.log) skipped=$(gtest_count SKIPPED kernel-tests.log)"
    if [ $rc -eq 0 ] && { [ "$(gtest_count PASSED kernel-tests.log)" -eq 0 ] || [ "$(gtest_count SKIPPED kernel-tests.log)" -ne 0 ]; }; then
      rc=1  # a skip means the GPU was not used
    fi
    end "CUDA kernel tests (== CPU core)" $rc kernel-tests.log "$detail"
  fi
  # The CUDA Python tests, by marker (the CPU-only suite is CI's): no skips
  # allowed. Options, markers and the test paths: pyproject.toml.
  name="pytest CUDA (-m 'cuda or registration')"
  if [ $REHEARSE = 1 ]; then not_run "$name"
  elif [ $have_pytest = 0 ]; then record "$name" NOT-FOUND "pytest or numpy is not installed for $PY"
  elif begin "$name" 60 240; then
    run_timed pytest-cuda.log "$step_limit" "${pyenv[@]}" "$PY" -m pytest -q -rs "${xdist[@]}" \
      -p no:cacheprovider -m "cuda or registration" tests/python
    rc=$?
    summary=$(grep -E '^[0-9]+ (passed|failed)|^=+ .*(passed|failed)' "$LOGS/pytest-cuda.log" | tail -n 1)
    if [ $rc -eq 0 ] && { grep -q "skipped" <<<"$summary" || ! grep -q "passed" <<<"$summary"; }; then
      rc=1  # a skip here means the GPU was not used
    fi
    end "$name" $rc pytest-cuda.log "${summary:-no summary}"
  fi
  # The other C++ tests of this build (core, API, consumer, ...): no GPU needed.
  if begin "ctest (C++ tests but the kernel tests)" 60 300; then
    run_timed ctest.log "$step_limit" ctest --test-dir "$BUILD" --output-on-failure --no-tests=error \
      -E '^cuda_kernels$' -j "$JOBS"
    rc=$?
    end "ctest (C++ tests but the kernel tests)" $rc ctest.log "$(grep -Eo '[0-9]+% tests passed.*' "$LOGS/ctest.log" | tail -n 1)"
  fi
fi

if want bench; then
  for b in cpp rows python; do
    case $b in
      cpp) name="benchmark C++ (cuda)"; planned=40; limit=150
        cmd=("$BUILD/syncfree_bench" --device cuda --sizes 1e3,1e6,1e7 --batch-sizes 1e5
             --min-time "$MIN_TIME" --json "$LOGS/bench-gpu.json") ;;
      rows) name="benchmark C++ (cuda, many short rows)"; planned=20; limit=90
        cmd=("$BUILD/syncfree_bench" --device cuda --sizes '' --batch 4096 --batch-sizes 64,1000
             --impls topk,syncfree,syncfree-indices,syncfree-graph --min-time "$MIN_TIME"
             --json "$LOGS/bench-gpu-rows.json") ;;
      python) name="benchmark Python (cuda, torch.compile)"; planned=90; limit=240
        # The reference samplers (naive, topk), torch.compile of the static one compiled per shape,
        # syncfree through torch.ops and through its wrapper, the floor.
        cmd=("${pyenv[@]}" "$PY" bench/bench.py --device cuda --min-time "$MIN_TIME" --sizes 1e6,1e7
             --batch-sizes 1e5 --impls naive,topk,topk-compiled,syncfree,syncfree-python,floor
             --no-fixed-cost --json "$LOGS/bench-gpu-python.json") ;;
    esac
    if [ $REHEARSE = 1 ]; then not_run "$name"; continue; fi
    begin "$name" $planned $limit || continue
    run_timed "bench-$b.log" "$step_limit" "${cmd[@]}"
    end "$name" $? "bench-$b.log"
  done
  for j in bench-gpu bench-gpu-rows bench-gpu-python; do
    [ -f "$LOGS/$j.json" ] && cp "$LOGS/$j.json" "$OUT/$j.json"
  done
  # The targets: met, MISSED (reported, not a failure) or not measured (a failure).
  if [ $REHEARSE = 1 ]; then not_run "speed targets"
  elif begin "speed targets" 5 30; then
    run_timed targets.log "$step_limit" "$PY" scripts/device_report.py targets "$LOGS/bench-gpu.json" \
      "$LOGS/bench-gpu-python.json"
    rc=$?
    cat "$LOGS/targets.log"
    last="$(tail -n 1 "$LOGS/targets.log")"
    case $rc in
      0) record "speed targets" PASS "$last" ;;
      2) record "speed targets" MISSED "$last" ;;
      *) end "speed targets" $rc targets.log "$last" ;;
    esac
  fi
  # The detection training step (bench/detection_bench.py): torchvision eager,
  # static eager and static graphed (torch.cuda.graph); the static step under
  # the sync debug mode, and the graph's replay against eager. First the
  # default model at B = 2 and 8, 512x512 and 800x800, then RetinaNet
  # (retinanet_resnet50_fpn, a one-stage model) at B = 2, 512x512 only. Their
  # JSONs are the sixth and seventh files of $OUT. After each, its verdict,
  # one row per aspect: met (PASS), MISSED (the speed goal only),
  # NOT-MEASURED or FAIL (both fail the run).
  no_vision=0
  grep -q "^torchvision: found" "$LOGS/machine.txt" || no_vision=1
  for det in default retinanet; do
    case $det in
      default) label="detection step"; json=bench-gpu-detection; sfx=""; planned=60; limit=180
        name="benchmark detection (cuda, torchvision vs static step)"
        config=(--model fasterrcnn_mobilenet_v3_large_fpn --batch-sizes 2,8 --image-sizes 512,800) ;;
      retinanet) label="RetinaNet step"; json=bench-gpu-detection-retinanet; sfx="-retinanet"; planned=30; limit=90
        name="benchmark detection RetinaNet (cuda, B=2 512x512)"
        config=(--model retinanet_resnet50_fpn --batch-sizes 2 --image-sizes 512) ;;
    esac
    if [ $REHEARSE = 1 ]; then not_run "$name"
    elif [ $no_vision = 1 ]; then record "$name" NOT-FOUND "torchvision is not installed for $PY"
    elif begin "$name" $planned $limit; then
      run_timed "bench-detection$sfx.log" "$step_limit" "${pyenv[@]}" "$PY" bench/detection_bench.py --device cuda \
        "${config[@]}" --impls torchvision,static,graphed --steps 10 --warmup 2 --json "$LOGS/$json.json"
      rc=$?
      end "$name" $rc "bench-detection$sfx.log" "$(grep -E '^FAILED: ' "$LOGS/bench-detection$sfx.log" | cut -c1-200)"
    fi
    [ -f "$LOGS/$json.json" ] && cp "$LOGS/$json.json" "$OUT/$json.json"
    for aspect in syncs graph speed; do
      case $aspect in
        syncs) what="zero host syncs" ;;
        graph) what="graph replay == eager" ;;
        speed) what="graphed >= 1.5x torchvision" ;;
      esac
      name="$label: $what"
      if [ $REHEARSE = 1 ]; then not_run "$name"; continue; fi
      if [ $no_vision = 1 ]; then record "$name" NOT-FOUND "torchvision is not installed for $PY"; continue; fi
      begin "$name" 2 30 || continue
      run_timed "detection$sfx-$aspect.log" "$step_limit" "$PY" scripts/device_report.py detection "$aspect" \
        "$LOGS/$json.json"
      rc=$?
      cat "$LOGS/detection$sfx-$aspect.log"
      last="$(tail -n 1 "$LOGS/detection$sfx-$aspect.log" | cut -c1-300)"
      case $rc in
        0) record "$name" PASS "$last" ;;
        2) record "$name" MISSED "$last" ;;
        *) if [[ "$last" == "NOT MEASURED"* ]]; then record "$name" NOT-MEASURED "$last"
           else end "$name" $rc "detection$sfx-$aspect.log" "$last"; fi ;;
      esac
    done
  done
fi

if want sanitize; then
  # compute-sanitizer on both launch paths' cases, syncfree's kernels only;
  # initcheck sees the workspace as the kernels get it (not memset).
  for tool in memcheck racecheck initcheck synccheck; do
    name="compute-sanitizer $tool"
    if [ $REHEARSE = 1 ]; then not_run "$name"; continue; fi
    if [ $have_sanitizer = 0 ]; then record "$name" NOT-FOUND "compute-sanitizer is not on PATH nor in /usr/local/cuda"; continue; fi
    begin "$name" 40 150 || continue
    run_timed "sanitizer-$tool.log" "$step_limit" compute-sanitizer --tool "$tool" --error-exitcode 1 \
      --kernel-name kns=syncfree "$KERNEL_TESTS" --gtest_filter="$SANITIZER_FILTER"
    rc=$?
    if grep -qiE "device not supported|not supported on this device" "$LOGS/sanitizer-$tool.log"; then
      record "$name" N/A "the tool refused this device (sanitizer-$tool.log)"
      continue
    fi
    if [ $rc -eq 0 ] && { [ "$(gtest_count PASSED "sanitizer-$tool.log")" -lt 2 ] ||
                          [ "$(gtest_count SKIPPED "sanitizer-$tool.log")" -ne 0 ]; }; then
      rc=1  # the cases must have run
    fi
    end "$name" $rc "sanitizer-$tool.log" "$(grep -E 'ERROR SUMMARY' "$LOGS/sanitizer-$tool.log" | tail -n 1)"
  done
fi
current=""
finish
