#!/usr/bin/env bash
# A GPU soak longer than one device call (the device tool ends a command
# after 600 s, and a 10-minute soak with its settle and after-load wait
# takes about 11): `start` copies the checkout, bundle included, to a
# folder outside it (the next call's carry replaces bundle/ in the
# checkout), starts soak.sh (beside this script) there detached, with
# sample_memory.sh beside it, and returns at once; `collect`, in the next
# call, waits for the soak to end, packs its files into $OUT/soak_long.tgz
# (the device tool brings back at most 8 files), prints its summary and
# exits with its status. The machine stays warm only about 30 s after a
# call, so `collect` must come right after the call that ran `start`.
#
#   run(command="DURATION=600s bash tests/gpu/investigations/service/soak_long.sh start &&
#                COUNT=6 PARALLEL=2 ... bash tests/gpu/investigations/service/soak.sh",
#       carry=["bundle"])
#   run(command="bash tests/gpu/investigations/service/soak_long.sh collect",
#       carry=["bundle"])
#
# Env: soak.sh's (DURATION, COUNT, PARALLEL, REGIONS, CLIENTS, SOAK_ARGS;
# CLIENTS defaults to 32 here, leaving room for soaks beside it), WORK (the
# folder, default /tmp/soak_long), WAIT_S (how long `collect` waits, 580).
set -uo pipefail
cd "$(dirname "$0")/../../../.." || exit 1
work=${WORK:-/tmp/soak_long}
case "${1:-}" in
  start)
    rm -rf "$work"
    mkdir -p "$work/repo" "$work/out"
    cp -a . "$work/repo/"
    cd "$work/repo" || exit 1
    source tests/gpu/bundle_env.sh  # unpacks the bundle once, here
    setsid nohup bash "$work/repo/tests/gpu/investigations/service/soak_long.sh" run \
      </dev/null >/dev/null 2>&1 &
    echo "soak_long: started in $work (DURATION=${DURATION:-120s}); collect in the next call"
    ;;
  run)  # the detached part: the soak, then its status; the sampler stops
    bash tests/gpu/investigations/service/sample_memory.sh "$work/out/memory.txt" 10 &
    sampler=$!
    OUT="$work/out" CLIENTS=${CLIENTS:-32} \
      bash tests/gpu/investigations/service/soak.sh \
      >"$work/out/stdout.txt" 2>&1
    echo $? >"$work/rc.tmp"
    kill "$sampler"
    mv "$work/rc.tmp" "$work/rc"
    ;;
  collect)
    OUT=${OUT:-$PWD/gpu-out}
    mkdir -p "$OUT"
    if [ ! -d "$work/out" ]; then
      echo "soak_long: nothing started in $work (a fresh machine?)" >&2
      exit 1
    fi
    for _ in $(seq 1 "${WAIT_S:-580}"); do
      [ -f "$work/rc" ] && break
      sleep 1
    done
    tar -czf "$OUT/soak_long.tgz" -C "$work" out
    tail -n 30 "$work/out/stdout.txt"
    if [ ! -f "$work/rc" ]; then
      echo "soak_long: still running after ${WAIT_S:-580} s; collect again" >&2
      exit 1
    fi
    exit "$(cat "$work/rc")"
    ;;
  *)
    echo "usage: soak_long.sh start|collect (see its header)" >&2
    exit 2
    ;;
esac
