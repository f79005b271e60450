#!/usr/bin/env bash
# Issue 47's cases (a) and (b) under several daemon and client settings,
# one fresh daemon each, to find what holds the daemon below local
# processes: 8 processes, distinct weights and one shared weight,
# 16x4096x4096 NT, call + synchronize
# (tests/gpu/bench/many_processes.py), each setting under MPS (MPS=on, the
# default), without (off) or both. Every run reads the daemon's /metrics
# around each round, so each setting's table says where a launch's time
# went (the worker's hold and each step of it) and how busy the machine's
# cores were on each side.
# VARIANTS is a list of "label|matmul-server flags|many_processes.py flags"
# separated by ';' (default: the defaults; launches' ends read from a
# mapped word; two completion threads; daemon threads that spin less; one
# worker and one ring poller, where requests queue while it launches and
# go out together; a worker waiting up to 50 us for a batch to fill;
# clients that do not spin on their rings).
# FLAGS adds many_processes.py flags to every run (default:
# --modes=distinct,shared --processes=8). One summary table closes (also $OUT/variants.txt): per
# setting and case, products/s and the ratio, the mean batch, the worker's
# hold per launch and its longest steps, the completion thread's busy share,
# the daemon's and the machine's CPU. Each setting's files (many_processes
# JSON, table, metrics) go into $OUT/variants.tar.gz: the device tool brings
# back few files. Needs bundle/ (tests/gpu/bundle.sh) and the client's
# extension (tests/gpu/build_native_for_device.sh).
set -uo pipefail
cd "$(dirname "$0")/../../../.." || exit 1
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
res=$(mktemp -d)
trap 'rm -rf "$res"' EXIT
VARIANTS=${VARIANTS:-"default||;word|--completion_poll=word|;two_completers|--completion_threads=2|;quiet|--worker_spin_us=0 --ring_poll_spin_us=50|;one_worker|--worker_threads=1 --ring_pollers=1|;delay|--max_queue_delay_us=50|;client_no_spin||--ring_spin_us=0"}
FLAGS=${FLAGS:---modes=distinct,shared --processes=8}
MPS=${MPS:-on}
rc=0
labels=()
IFS=';' read -ra variants <<<"$VARIANTS"
for variant in "${variants[@]}"; do
  IFS='|' read -r label daemon_flags script_flags <<<"$variant"
  labels+=("$label")
  echo "=== $label: daemon ${daemon_flags:-(defaults)}, clients ${script_flags:-(defaults)}"
  mkdir -p "$res/$label"
  # shellcheck disable=SC2086  # flag lists
  OUT=$res/$label DAEMON_FLAGS=$daemon_flags MPS=$MPS \
    bash tests/gpu/bench/python_bench.sh many_processes $FLAGS $script_flags ||
    rc=1
done
python3 - "$res" "${labels[@]}" <<'PY' | tee "$OUT/variants.txt"
import json, os, sys
res, labels = sys.argv[1], sys.argv[2:]
print(f"\n{'setting':<15} {'mps':<3} {'case':<8} {'procs':>5} "
      f"{'daemon/s':>8} {'local/s':>8} {'ratio':>5} {'batch':>5} "
      f"{'worker':>7} {'completer':>9} {'cores d/all':>11}  longest steps (us)")
for label in labels:
    for name, mps in (("many_processes", "off"), ("many_processes_mps", "on")):
        path = os.path.join(res, label, name + ".json")
        if not os.path.exists(path):
            continue
        for case in json.load(open(path))["cases"]:
            b = case.get("daemon_launches") or {}
            steps = sorted((b.get("stages_us") or {}).items(),
                           key=lambda kv: -kv[1])[:4]
            busy = (b.get("completion_polling", 0) +
                    b.get("completion_completing", 0))
            print(f"{label:<15} {mps:<3} {case['mode']:<8} "
                  f"{case['processes']:>5} "
                  f"{case['daemon_per_s']['median']:>8.0f} "
                  f"{case['local_per_s']['median']:>8.0f} "
                  f"{case['ratio']['median']:>5.2f} "
                  f"{b.get('mean_batch', 0):>5.2f} "
                  f"{b.get('worker_us', 0):>7.1f} {busy:>9.2f} "
                  f"{b.get('daemon_cores', 0):>5.1f}/"
                  f"{case['machine']['daemon']['cores_busy']:<5.1f}  "
                  + ", ".join(f"{k} {v:.1f}" for k, v in steps))
PY
tar czf "$OUT/variants.tar.gz" -C "$res" .
exit $rc
