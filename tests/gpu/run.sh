#!/usr/bin/env bash
# Runs on the GPU machine, in the repo root, after tests/gpu/bundle.sh built
# bundle/ here:  run(command="bash tests/gpu/run.sh", carry=["bundle"])
# Runs nvidia-smi, every test binary in bundle/, matmul-bench (JSON to
# $OUT), a matmul-tune smoke run, the PyTorch/seed reference timings
# (checks/torch_bench.py), and every step, tests/gpu/checks/*.sh
# (cublaslt_survey.sh among them); logs go under $OUT (few files: the
# device tool brings back at most 8) and a summary table is printed last.
# What is not run here (benchmarks, measurements) is in tests/gpu/bench/
# and tests/gpu/investigations/ (tests/gpu/README.md).
# Env: BENCH_REPEAT (3), BENCH_ARGS (extra matmul-bench flags),
#      TEST_FILTER (gtest filter), TESTS (space-separated test binaries to
#      run; default all), STEPS (space-separated step names, checks/*.sh
#      without .sh; default all), SKIP_BENCH=1, SKIP_TORCH=1,
#      CUDA_DAEMON_FLAGS (flags for every daemon the steps start, e.g.
#      --cuda_devices=all).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
source tests/gpu/bundle_env.sh
export MATMUL_TRANSPORT_PROBE="$PWD/bundle/transport_probe"
log=$OUT/run.log
: >"$log"
rows=()

step() {  # step NAME TIMEOUT CMD... ; output appended to run.log
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  echo "===== $name: $*" >>"$log"
  timeout "$limit" "$@" >>"$log" 2>&1
  local rc=$?
  local dt=$((SECONDS - t0))
  rows+=("$(printf '%-28s rc=%-4s %5ss' "$name" "$rc" "$dt")")
  return $rc
}

{
  echo "commit: $(head -1 bundle/COMMIT 2>/dev/null)"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
} >>"$log" 2>&1
step nvidia-smi 30 nvidia-smi

# Every test binary; gtest's own summary lines give the counts.
for t in bundle/*_test; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  if [ -n "${TESTS:-}" ] && [[ " $TESTS " != *" $name "* ]]; then continue; fi
  if [[ $name == *_process_test ]]; then
    # They start matmul-server and matmul-cli by their build-tree paths,
    # which do not exist here; they need no GPU, and CI runs them.
    rows+=("$(printf '%-28s skipped: build-tree paths (CI runs it)' "$name")")
    continue
  fi
  before=$(wc -l <"$log")
  step "$name" 300 "$t" ${TEST_FILTER:+--gtest_filter=$TEST_FILTER}
  rc=$?
  counts=$(tail -n +"$before" "$log" | awk '
    /^\[  PASSED  \]/ {p=$4} /^\[  FAILED  \] [0-9]+ test/ {f=$4}
    /^\[  SKIPPED \] [0-9]+ test/ {s=$4}
    END {printf "passed %s failed %s skipped %s", p+0, f+0, s+0}')
  rows[-1]="${rows[-1]}  $counts"
done

if [ -z "${SKIP_BENCH:-}" ] && [ -x bundle/matmul-bench ]; then
  # shellcheck disable=SC2086  # BENCH_ARGS is a list of flags
  step matmul-bench 420 bundle/matmul-bench --repeat="${BENCH_REPEAT:-3}" \
    --json="$OUT/bench.json" ${BENCH_ARGS:-}
  # The table itself, for the reply's tail and for bench.txt.
  awk '/^===== matmul-bench/ {on=1; next} /^===== / {on=0} on' "$log" |
    grep -v '^\[' | grep -v '^matmul-bench:' >"$OUT/bench.txt"
fi
if [ -x bundle/matmul-tune ]; then
  step matmul-tune 120 bundle/matmul-tune --cache="$OUT/tuning.json" \
    --shapes=5120x2048x2048:NT,256x4096x4096:NN
fi
if [ -z "${SKIP_TORCH:-}" ] && command -v python3 >/dev/null; then
  step torch-reference 420 env PYTHONUNBUFFERED=1 python3 tests/gpu/checks/torch_bench.py \
    --out "$OUT/torch_bench.txt"
fi
for extra in tests/gpu/checks/*.sh; do
  [ -f "$extra" ] || continue
  if [ -n "${STEPS:-}" ] && [[ " $STEPS " != *" $(basename "$extra" .sh) "* ]]; then
    continue
  fi
  step "$(basename "$extra" .sh)" 300 env OUT="$OUT" bash "$extra"
done

echo
[ -f "$OUT/bench.txt" ] && cat "$OUT/bench.txt"
[ -f "$OUT/torch_bench.txt" ] && cat "$OUT/torch_bench.txt"
[ -f "$OUT/survey.txt" ] && cat "$OUT/survey.txt"
if grep -q '^===== daemon_e2e' "$log"; then
  echo
  echo "== daemon end to end =="
  awk '/^===== daemon_e2e/ {on=1; next} /^===== / {on=0} on' "$log" |
    grep -E 'shape|latency|kernel|backend|error|PASS|FAIL|exit' | head -30
fi
echo
echo "== failures (first lines) =="
grep -E '^\[  FAILED  \]|Failure$|error:' "$log" | head -20
echo
echo "== summary (full log: \$OUT/run.log) =="
printf '%s\n' "${rows[@]}"
