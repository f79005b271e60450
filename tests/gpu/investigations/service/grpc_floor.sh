#!/usr/bin/env bash
# The gRPC path against gRPC's own floor on the GPU machine: a CUDA daemon
# on a fresh unix socket and grpc-floor against it, which measures in one
# process a bare gRPC echo (ping-pong p50/p90/p99, synchronous and callback
# API; a unary echo of 5120x11008x2048 BF16 sizes in GB/s) and the daemon's
# unary Matmul (1x1x1 inline and 256x256x256 NT in cuda_ipc regions, end to
# end minus kernel; 5120x11008x2048 NT inline payload GB/s). It runs once
# per setting in CONFIGS, each REPEATS times for the spread, with the same
# transport settings on the daemon (--grpc_args) and on grpc-floor's
# servers and channels; a setting may also set glibc's malloc tunables for
# both processes, and daemon flags of its own (the unary API, polling
# workers). Prints a table of medians (min-max) per setting and writes
# every run's JSON and the table (summary.txt, summary.json) to
# $OUT/grpc_floor/.
#
# Usage (repo root, bundle/ from tests/gpu/bundle.sh here):
#   bash tests/gpu/investigations/service/grpc_floor.sh [--help]
# Env: OUT (default ./gpu-out), REPEATS (3), CONFIGS (names from the list
#      below, space-separated; default all), SERVER (default
#      bundle/matmul-server), FLOOR (default bundle/grpc-floor),
#      DAEMON_FLAGS (more matmul-server flags), FLOOR_FLAGS (more
#      grpc-floor flags, e.g. --calls=5000).
set -euo pipefail
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi
cd "$(dirname "$0")/../../../.." || exit 1
OUT=${OUT:-$PWD/gpu-out}
res=$OUT/grpc_floor
mkdir -p "$res"
source tests/gpu/bundle_env.sh
source tests/gpu/cuda_daemon.sh
FLOOR=${FLOOR:-bundle/grpc-floor}
REPEATS=${REPEATS:-3}

# name | --grpc_args | GLIBC_TUNABLES for both processes | daemon flags
window="flow_control_window=67108864"
frames="$window,bdp_probe=0,max_frame_size=16777215"
reads="$frames,read_chunk_size=1048576,max_read_chunk_size=16777216"
keep_memory="glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736"
all_configs=(
  "defaults||"
  "window64m|$window|"
  "window64m_nobdp|$window,bdp_probe=0|"
  "frames16m|$frames|"
  "bigreads|$reads|"
  "bigreads_quota|$reads,resource_quota_bytes=17179869184|"
  "bigreads_keepmem|$reads|$keep_memory"
  "defaults_keepmem||$keep_memory"
  "sync_api|||--unary_api=sync"
  "sync_api_handoff|||--unary_api=sync --caller_thread_max_mflop=0"
  "callback_run_small|||--unary_api=callback_run_small"
  "callback_spin|||--worker_spin_us=1000"
  "sync_api_bigreads_keepmem|$reads|$keep_memory|--unary_api=sync"
)
selected=${CONFIGS:-}

rc=0
for config in "${all_configs[@]}"; do
  IFS='|' read -r name args tunables flags <<<"$config"
  if [ -n "$selected" ] && [[ " $selected " != *" $name "* ]]; then continue; fi
  for run in $(seq "$REPEATS"); do
    echo "== $name run $run: grpc_args='$args'" \
      "GLIBC_TUNABLES='$tunables' daemon flags '$flags'"
    # shellcheck disable=SC2086
    GLIBC_TUNABLES=$tunables start_cuda_daemon --metrics_listen= \
      --grpc_args="$args" $flags ${DAEMON_FLAGS:-}
    # shellcheck disable=SC2086
    if ! GLIBC_TUNABLES=$tunables "$FLOOR" --target="$sock" \
      --grpc_args="$args" --small_mode=ipc --socket_dir="$dir" \
      --json="$res/${name}_$run.json" ${FLOOR_FLAGS:-} \
      >"$res/${name}_$run.txt" 2>&1; then
      rc=1
    fi
    cat "$res/${name}_$run.txt"
    stop_cuda_daemon 3 || rc=1
  done
done

python3 - "$res" <<'PY' | tee "$res/summary.txt"
import glob, json, os, statistics, sys
res = sys.argv[1]
runs = {}
for path in sorted(glob.glob(os.path.join(res, "*_[0-9]*.json"))):
    name = os.path.basename(path).rsplit("_", 1)[0]
    with open(path) as f:
        runs.setdefault(name, []).append(json.load(f))

def get(report, *keys):
    for key in keys:
        report = report.get(key) if isinstance(report, dict) else None
    return report


columns = [
    ("ping sync p50 us", lambda r: get(r, "bare", "sync", "ping_pong", "p50_us")),
    ("ping cb p50 us", lambda r: get(r, "bare", "callback", "ping_pong", "p50_us")),
    ("1x1x1 e2e-k p50", lambda r: get(r, "daemon", "1x1x1_inline", "overhead", "p50_us")),
    ("small e2e-k p50", lambda r: get(r, "daemon", r.get("small_product", ""), "overhead", "p50_us")),
    ("echo sync GB/s", lambda r: get(r, "bare", "sync", "echo", "gb_per_second")),
    ("echo cb GB/s", lambda r: get(r, "bare", "callback", "echo", "gb_per_second")),
    ("daemon GB/s", lambda r: get(r, "daemon", r.get("large_product", ""), "gb_per_second")),
]
summary = {}
print("medians over runs (min-max); e2e-k: end to end minus kernel, us")
print("%-18s" % "setting" + "".join("%24s" % c for c, _ in columns) + "   ratio GB/s")
for name, reports in runs.items():
    row, cells = {}, []
    for column, pick in columns:
        values = [v for v in (pick(r) for r in reports) if isinstance(v, (int, float))]
        if not values:
            cells.append("%24s" % "-")
            continue
        row[column] = {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": len(values)}
        cells.append("%24s" % ("%.3g (%.3g-%.3g)" % (statistics.median(values), min(values), max(values))))
    ratio = ""
    if "daemon GB/s" in row and "echo sync GB/s" in row:
        ratio = "%.2fx" % (row["daemon GB/s"]["median"] / row["echo sync GB/s"]["median"])
        row["ratio daemon/echo sync GB/s"] = row["daemon GB/s"]["median"] / row["echo sync GB/s"]["median"]
    summary[name] = row
    print("%-18s" % name + "".join(cells) + "   " + ratio)
with open(os.path.join(res, "summary.json"), "w") as f:
    json.dump(summary, f, indent=2)
PY
echo "grpc_floor: rc=$rc"
exit $rc
