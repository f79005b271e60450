#!/usr/bin/env bash
# A step of tests/gpu/run.sh; also runs alone on the GPU machine after
# tests/gpu/bundle.sh built bundle/ here:
#   run(command="bash tests/gpu/checks/cublaslt_survey.sh", carry=["bundle"])
# cublaslt-survey on the seed's shapes (every cuBLASLt configuration timed
# and its kernel named, the fastest mma.sync one beside the baseline and
# the Spark path); the table to stdout and $OUT/survey.txt, every timing to
# $OUT/survey.json. Extra flags: SURVEY_ARGS.
set -euo pipefail
cd "$(dirname "$0")/../../.." || exit 1
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
source tests/gpu/bundle_env.sh
if [ ! -x bundle/cublaslt-survey ]; then
  echo "cublaslt_survey: cublaslt-survey not bundled (built only where CUPTI is found); skipped"
  exit 0
fi
echo "commit: $(head -1 bundle/COMMIT 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv
bundle/cublaslt-survey --json="$OUT/survey.json" ${SURVEY_ARGS:-} |
  tee "$OUT/survey.txt"
