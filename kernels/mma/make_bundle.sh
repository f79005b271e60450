#!/usr/bin/env bash
# Builds the mma test and timing tool (sm_90a for the H200) and packs them,
# with the non-CUDA shared libraries they need and the sm_121a cubins from
# check_spark_build.sh, into bundle-mma/ (git-ignored) for the device call.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-mma}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90a >/dev/null
cmake --build "$BUILD" --target mma_gemm_test mma_bench
rm -rf bundle-mma && mkdir -p bundle-mma/lib bundle-mma/cubins
cp "$BUILD/kernels/mma/mma_gemm_test" "$BUILD/kernels/mma/mma_bench" \
  kernels/mma/check_spark_build.sh kernels/mma/run_h200.sh \
  kernels/mma/profile_h200.sh bundle-mma/
# abseil (and anything else not CUDA or glibc) travels; CUDA is there.
ldd bundle-mma/mma_gemm_test bundle-mma/mma_bench | awk '/=>/ {print $3}' |
  grep -v -E 'libcuda|libcublas|libcudart|libc\.so|libm\.so|libstdc|libgcc|ld-linux|libpthread|libdl|librt' |
  sort -u | xargs -r -I{} cp -L {} bundle-mma/lib/
cp build-spark-check/*.cubin bundle-mma/cubins/ 2>/dev/null || true
grep -qx '/bundle-mma/' .git/info/exclude || echo '/bundle-mma/' >>.git/info/exclude
du -sh bundle-mma
