#!/usr/bin/env bash
# Where a synchronized PyTorch call's time goes on the daemon's side: for
# each daemon setting, native_speed.py's per-call part (a product, then
# torch.cuda.synchronize(), p50) against a daemon serving metrics, then the
# means of the daemon's own durations over those calls, per shape: accepted
# to launched (queue), accepted to answered (request), and per device one
# launch on its worker and its answer. The rest of a call's p50 is the
# client's side and the GPU's hand-offs.
#
# Usage, from the repo root on the GPU machine after tests/gpu/bundle.sh and
# tests/gpu/build_native_for_device.sh:
#   run(command="bash tests/gpu/investigations/python/per_call_breakdown.sh",
#       carry=["bundle", "client/python/matmul_client/_native...so"])
# Output: stdout and $OUT/per_call_breakdown.txt.
# Env: VARIANTS, daemon flag sets separated by ';' (default: the defaults;
# workers and the ring's poller spinning), REPEAT (native_speed --repeat, 1).
set -euo pipefail
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi
cd "$(dirname "$0")/../../../.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/per_call_breakdown.txt") 2>&1
source tests/gpu/bundle_env.sh
source tests/gpu/cuda_daemon.sh
IFS=';' read -r -a variants \
  <<<"${VARIANTS:- ;--worker_spin_us=1000 --ring_poll_spin_us=2000}"
port=9471
summary='
import collections, re, sys, urllib.request
sums, counts = collections.defaultdict(float), collections.defaultdict(int)
text = urllib.request.urlopen(sys.argv[1]).read().decode()
for line in text.splitlines():
    m = re.match(r"matmul_(request|queue|launch|answer)_duration_seconds_"
                 r"(sum|count)\{(.*)\} (\S+)", line)
    if not m:
        continue
    shape = re.search(r"shape=\"([^\"]*)\"", m.group(3))
    key = (shape.group(1) if shape else "(device)", m.group(1))
    if m.group(2) == "sum":
        sums[key] += float(m.group(4))
    else:
        counts[key] += int(float(m.group(4)))
print("daemon side, mean us over every product of the run:")
for key in sorted(counts):
    if counts[key]:
        print(f"  {key[0]:<18} {key[1]:<8} "
              f"{1e6 * sums[key] / counts[key]:8.1f}  ({counts[key]})")
'
rc=0
for flags in "${variants[@]}"; do
  echo "== matmul-server ${flags:-(defaults)}"
  # shellcheck disable=SC2086  # flags is a list of flags
  start_cuda_daemon --metrics_listen="127.0.0.1:$port" $flags
  PYTHONUNBUFFERED=1 python3 tests/gpu/bench/native_speed.py \
    --target="$sock" --only=per_call --repeat="${REPEAT:-1}" |
    grep -E "^[0-9]|^shape" || rc=1
  python3 -c "$summary" "http://127.0.0.1:$port/metrics" || rc=1
  stop_cuda_daemon 2 || rc=1
done
exit "$rc"
