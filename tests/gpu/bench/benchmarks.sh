#!/usr/bin/env bash
# The measurements behind docs/benchmarks.md, on the GPU machine, in one
# device call (about 6 minutes on an H200):
#  1. matmul-bench on the seed shapes (5120x11008x2048, 5120x2048x11008,
#     5120x2048x2048, 5120x512x2048), NN and NT, with a short sustained run
#     of the pick, the best GB10-fitting own kernel and cuBLASLt; its picks
#     go to a tuning cache the daemons below start on;
#  2. a CUDA daemon with its defaults, driven by matmul-cli bench --save:
#     5120x11008x2048 NT over CUDA IPC regions at concurrency 1 and 4
#     (unary gRPC); 16x4096x4096 NT over 4 request rings at concurrency 1,
#     16 and 64 (dynamic batching on); 256x256x256 NT at concurrency 1
#     through one ring and over unary gRPC (the service's own latency);
#  3. the 16x4096x4096 sweep again against a daemon with batching off
#     (--max_batch_size=1).
#  4. with DASHBOARD=1 only: tests/gpu/checks/dashboard_vs_bench.sh (about
#     3 minutes more; needs a bundle made with BUNDLE_PROMETHEUS=1), whose
#     Prometheus data comes back as $OUT/prometheus-data.tar.gz.
# Everything the page generator reads is packed into $OUT/docs_bench.tgz
# (the device tool brings back few files): run_info.json (commit, GPU,
# date, the commands), matmul_bench.json, service_*.json and, with
# DASHBOARD=1, dashboard_vs_bench.txt. The log, with matmul-bench's own
# table, is $OUT/benchmarks.log.
#
# Usage, from the repo root after tests/gpu/bundle.sh built bundle/:
#   run(command="bash tests/gpu/bench/benchmarks.sh", carry=["bundle"])
# then here (docs/bench/README.md):
#   git rm -q docs/bench/*.json; tar -xzf FILES_AT/docs_bench.tgz -C docs/bench
#   python3 tools/benchmarks_page.py
# Env: SUSTAINED_S (1: seconds per sustained phase), SUSTAINED_KERNELS
# (pick,spark,cublaslt), SKIP_KERNELS=1 / SKIP_SERVICE=1 (leave a part
# out), DASHBOARD=1 (part 4; alone, in a call of its own:
# SKIP_KERNELS=1 SKIP_SERVICE=1 DASHBOARD=1).
set -euo pipefail
if [[ ${1:-} == --help || ${1:-} == -h ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi
cd "$(dirname "$0")/../../.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
source tests/gpu/bundle_env.sh
source tests/gpu/cuda_daemon.sh
for binary in matmul-bench matmul-server matmul-cli; do
  [ -x "bundle/$binary" ] || { echo "benchmarks: bundle/$binary missing" >&2; exit 1; }
done
results=$(mktemp -d)
cache=$(mktemp -d)/tuning.json  # matmul-bench's picks, for the daemons
log=$OUT/benchmarks.log
: >"$log"
exec > >(tee -a "$log") 2>&1
commands=()  # what ran, for run_info.json
rc=0

shapes=5120x11008x2048,5120x2048x11008,5120x2048x2048,5120x512x2048
if [ -z "${SKIP_KERNELS:-}" ]; then
  bench_cmd=(bundle/matmul-bench "--shapes=$shapes" "--layouts=NN,NT"
    "--sustained_s=${SUSTAINED_S:-1}" --operand_sets=4
    "--sustained_kernels=${SUSTAINED_KERNELS:-pick,spark,cublaslt}"
    "--tuning_cache=$cache" "--json=$results/matmul_bench.json")
  echo "== ${bench_cmd[*]}"
  commands+=("${bench_cmd[*]}")
  timeout 360 "${bench_cmd[@]}" || rc=1
fi

# service NAME LABEL [matmul-cli bench flags]: one saved sweep, after an
# unmeasured pass that lets the daemon finish tuning what it meets.
service() {
  local name=$1 label=$2
  shift 2
  local flags=(--target="$sock" --transpose_b --mode=ipc "$@")
  timeout 60 bundle/matmul-cli bench "${flags[@]}" --warmup=1s \
    --duration=300ms --max_windows=2 --stable_windows=1 >/dev/null 2>&1 || true
  echo "== $label: matmul-cli bench ${*}"
  commands+=("matmul-server $daemon_flags; matmul-cli bench --transpose_b --mode=ipc $* --warmup=2s --duration=1s --max_windows=6 --label=\"$label\"")
  timeout 120 bundle/matmul-cli bench "${flags[@]}" --warmup=2s --duration=1s \
    --max_windows=6 --label="$label" --save="$results/$name.json" || rc=1
}
daemon() {  # daemon [matmul-server flags]
  daemon_flags="--backend=cuda --tuning_cache=tuning.json${*:+ $*}"
  start_cuda_daemon --metrics_listen= --tuning_cache="$cache" "$@" &&
    wait_cuda_daemon_serving 10
}

if [ -z "${SKIP_SERVICE:-}" ]; then
  echo "== daemon with its defaults"
  daemon || rc=1
  service service_1_5120x11008x2048_ipc "daemon defaults" \
    --shape=5120x11008x2048 --concurrency=1,4
  service service_2_16x4096x4096_batching_on \
    "batching on (daemon defaults)" \
    --shape=16x4096x4096 --concurrency=1,16,64 --rings=4
  service service_4_256x256x256_ring "one request ring" \
    --shape=256x256x256 --concurrency=1 --channels=1 --rings=1
  service service_5_256x256x256_unary "unary gRPC" \
    --shape=256x256x256 --concurrency=1 --channels=1
  stop_cuda_daemon 3 || rc=1

  echo "== daemon with batching off"
  daemon --max_batch_size=1 || rc=1
  service service_3_16x4096x4096_batching_off \
    "batching off (--max_batch_size=1)" \
    --shape=16x4096x4096 --concurrency=1,16,64 --rings=4
  stop_cuda_daemon 3 || rc=1
fi

if [ -n "${DASHBOARD:-}" ]; then
  dashboard_out=$(mktemp -d)
  commands+=("OUT=... bash tests/gpu/checks/dashboard_vs_bench.sh")
  OUT=$dashboard_out timeout 400 bash tests/gpu/checks/dashboard_vs_bench.sh || rc=1
  cp "$dashboard_out/dashboard_vs_bench.txt" "$results/" || rc=1
  cp "$dashboard_out/prometheus-data.tar.gz" "$OUT/" || rc=1
  rm -rf "$dashboard_out"
fi

# run_info.json: what the page says it was generated from.
json_string() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; }
{
  printf '{\n  "commit": %s,\n' "$(json_string "$(head -1 bundle/COMMIT 2>/dev/null || echo unknown)")"
  printf '  "date": %s,\n' "$(json_string "$(date -u +%Y-%m-%dT%H:%MZ)")"
  printf '  "gpu": %s,\n' "$(json_string "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)")"
  printf '  "host_cpus": %s,\n' "$(nproc)"
  printf '  "commands": ['
  sep=
  for c in "${commands[@]}"; do
    c=${c//$cache/tuning.json}  # the temporary folders mean nothing later
    c=${c//$results\//}
    printf '%s\n    %s' "$sep" "$(json_string "$c")"
    sep=,
  done
  printf '\n  ]\n}\n'
} >"$results/run_info.json"

(cd "$results" && shopt -s nullglob && tar -czf "$OUT/docs_bench.tgz" ./*.json ./*.txt)
echo "== packed: $(tar -tzf "$OUT/docs_bench.tgz" | tr '\n' ' ')"
rm -rf "$results"
echo "benchmarks: rc=$rc"
exit $rc
