#!/usr/bin/env bash
# A/B of two mma_bench builds in one GPU-machine call (same GPU, same clock
# regime): runs BEFORE and AFTER alternately ROUNDS times (default 2) on the
# seed shapes, then prints, per shape/layout and config, the mean TFLOP/s
# of each and after/before. Extra arguments go to both mma_bench runs.
#
# Usage (from the repo root on the GPU machine, with both binaries and
# their libraries there, e.g. two unpacked tests/gpu/bundle.sh bundles):
#   tests/gpu/investigations/kernels/bench_ab.sh BEFORE_MMA_BENCH \
#     AFTER_MMA_BENCH [mma_bench args...]
# Env: ROUNDS (2), OUT (/tmp/out); logs go under $OUT/compare/. Each binary
# runs with the library path it is given (not bundle_env.sh's: two builds
# bring two sets of libraries).
set -euo pipefail
if [[ $# -lt 2 || "$1" == "--help" || "$1" == "-h" ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  [[ $# -ge 1 && ( "$1" == "--help" || "$1" == "-h" ) ]] && exit 0
  exit 2
fi
before=$1 after=$2
shift 2
OUT=${OUT:-/tmp/out}
res=$OUT/compare
mkdir -p "$res"
rc=0
for round in $(seq "${ROUNDS:-2}"); do
  for side in before after; do
    bin=$before
    [ "$side" = after ] && bin=$after
    timeout 240 "$bin" "$@" >"$res/${side}_$round.log" 2>&1 ||
      { rc=1; echo "$side round $round failed: its figures are missing"; }
  done
done
python3 - "$res" <<'PY' || rc=1
import collections, glob, re, sys
res = sys.argv[1]
line = re.compile(r"^(\S+)\s+(mma_\S+|cuBLASLt)\s+[\d.]+ ms\s+([\d.]+) TFLOP/s")
tf = {"before": collections.defaultdict(list),
      "after": collections.defaultdict(list)}
for side in tf:
    for path in sorted(glob.glob(f"{res}/{side}_*.log")):
        for text in open(path):
            m = line.match(text)
            if m:
                tf[side][(m.group(1), m.group(2))].append(float(m.group(3)))
mean = lambda v: sum(v) / len(v)
print(f"{'shape':<22} {'kernel':<26} {'before':>8} {'after':>8} {'after/before':>12}")
for key in tf["before"]:
    if key not in tf["after"]:
        continue
    b, a = mean(tf["before"][key]), mean(tf["after"][key])
    print(f"{key[0]:<22} {key[1]:<26} {b:8.1f} {a:8.1f} {a / b:12.3f}")
PY
echo "compare: rc=$rc"
exit $rc
