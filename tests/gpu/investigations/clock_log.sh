# shellcheck shell=bash
# Sourced by the investigations that watch the GPU's clocks
# (kernels/kernel_clocks.sh, service/zero_copy_bench.sh): logs the GPU's SM
# clock and power (nvidia-smi) to DIR/clocks.csv and the start of each part
# of the script to DIR/parts.txt, which gpu_clocks.py reads back (samples
# belong to the last part started before them).
#   start_clock_log DIR [INTERVAL_MS]   starts the log (stopped on exit)
#   stop_clock_log
#   part NAME                           a part starts now
#   mark_bench_phases                   a filter for matmul-bench's stderr:
#     passes it through and starts a part "SHAPE table" when a shape's
#     tuning and table timing (short bursts) begin and "SHAPE WHICH" when
#     its sustained run of WHICH (pick, spark, cublaslt, an mma_ config)
#     begins
clock_log_dir=
clock_log_pid=

start_clock_log() {
  clock_log_dir=$1
  : >"$clock_log_dir/parts.txt"
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu \
    --format=csv,noheader -lms "${2:-250}" >"$clock_log_dir/clocks.csv" \
    2>/dev/null &
  clock_log_pid=$!
  trap stop_clock_log EXIT
}

stop_clock_log() {
  [ -n "$clock_log_pid" ] && kill "$clock_log_pid" 2>/dev/null
  clock_log_pid=
}

part() {
  echo "$(date '+%Y/%m/%d %H:%M:%S.%3N') $1" >>"$clock_log_dir/parts.txt"
}

mark_bench_phases() {
  local shape=
  while IFS= read -r line; do
    if [[ $line =~ ^\[[0-9]+/[0-9]+\]\ ([0-9x]+)\  ]]; then
      shape=${BASH_REMATCH[1]}
      part "$shape table"
    elif [[ $line =~ "sustained run of "([a-z0-9_]+): ]]; then
      part "$shape ${BASH_REMATCH[1]}"
    fi
    echo "$line"
  done
}
