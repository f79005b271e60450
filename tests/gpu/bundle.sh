#!/usr/bin/env bash
# Builds everything here and packs what the GPU machine needs into
# bundle/payload.tar.xz (plus bundle/COMMIT and bundle/MANIFEST): every test
# binary, matmul-bench, matmul-tune, matmul-server, matmul-cli,
# stream-order-bench, handoff-probe, mma_bench (when built), and the shared
# libraries they need that the GPU machine lacks (abseil, gRPC, protobuf,
# prometheus-cpp, OpenBLAS, gfortran, libmatmul_cuda, ...) under lib/. glibc,
# libstdc++/libgcc_s (newer there) and the CUDA libraries (CUDA 13.0 is
# installed there) are left out. tests/gpu/run.sh unpacks it.
#
# Usage: bash tests/gpu/bundle.sh   (then, from the repo root:
#   run(command="bash tests/gpu/run.sh", carry=["bundle"]))
# Env: MATMUL_CUDA_ARCHS (default "90a;121a"), JOBS (default 2),
#      BUILD_DIR (default build-gpu), TARGETS (default: all), SOURCE_DIR
#      (default: the repo root), EXCLUDE (a regex of binary names to leave
#      out, e.g. 'mma_' when the run needs no own-kernel tools),
#      BUNDLE_PROMETHEUS=1 (also Debian's prometheus, which links only libc:
#      tests/gpu/checks/dashboard_vs_bench.sh needs it), XZ_LEVEL (2; 9
#      packs a large bundle tighter, slowly).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
build=${BUILD_DIR:-build-gpu}
archs=${MATMUL_CUDA_ARCHS:-90a;121a}
limit_mib=60

cmake -S "${SOURCE_DIR:-.}" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_CUDA_ARCHITECTURES=$archs" >/dev/null
# -k 0: one engineer's broken target must not keep the others' binaries
# off the GPU machine.
if ! ninja -C "$build" -k 0 -j "${JOBS:-2}" ${TARGETS:-}; then
  echo "bundle.sh: some targets failed to build; bundling what was built" >&2
fi

# Assemble in a staging folder, then pack it: the CUDA fatbins and OpenBLAS
# (tens of MiB each) compress about 6x, which keeps what the device tool
# carries far under its 64 MiB. run.sh unpacks it on the GPU machine.
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/lib"
mapfile -t binaries < <(
  find "$build" -type f -perm -u+x \
    \( -name '*_test' -o -name 'matmul-bench' -o -name 'matmul-tune' \
       -o -name 'matmul-server' -o -name 'matmul-cli' -o -name 'mma_bench' -o -name 'cublaslt-survey' \
       -o -name 'matmul-soak' -o -name 'soak_holder' -o -name 'transport_probe' \
       -o -name 'stream-order-bench' -o -name 'grpc-floor' -o -name 'handoff-probe' \) \
    -not -path '*/CMakeFiles/*' | sort)
if [ ${#binaries[@]} -eq 0 ]; then
  echo "bundle.sh: nothing was built" >&2
  exit 1
fi
if [ -n "${EXCLUDE:-}" ]; then
  mapfile -t binaries < <(printf '%s\n' "${binaries[@]}" |
    awk -v pattern="$EXCLUDE" '{ n = $0; sub(".*/", "", n); if (n !~ pattern) print }')
fi
for bin in "${binaries[@]}"; do
  cp "$bin" "$stage/"
  strip --strip-unneeded "$stage/$(basename "$bin")"
done

if [ -n "${BUNDLE_PROMETHEUS:-}" ]; then
  cp "$(command -v prometheus)" "$stage/"
fi

# Libraries: everything ldd resolves except the system's C runtime and
# CUDA's own libraries.
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libpthread|libdl\.|librt\.|libresolv|libutil|libstdc\+\+|libgcc_s|libcuda\.|libcudart|libcublas|libcublasLt|libnvidia|libnvrtc)'
for bin in "${binaries[@]}"; do
  ldd "$bin" | awk '/=> \// {print $1, $3}'
done | sort -u | while read -r name path; do
  if [[ $name =~ $skip ]]; then continue; fi
  cp -L "$path" "$stage/lib/$name"
  strip --strip-unneeded "$stage/lib/$name" 2>/dev/null || true
done

rm -rf bundle
mkdir -p bundle
git -C "$root" rev-parse HEAD >bundle/COMMIT 2>/dev/null || true
git -C "$root" status --short >>bundle/COMMIT 2>/dev/null || true
(cd "$stage" && ls -la . lib) >bundle/MANIFEST
echo "unpacked size: $(du -sh "$stage" | cut -f1)"
XZ_OPT="-${XZ_LEVEL:-2} -T${JOBS:-2}" tar -C "$stage" -cJf bundle/payload.tar.xz .
du -sh bundle
size_kib=$(du -sk bundle | cut -f1)
if [ "$size_kib" -gt $((limit_mib * 1024)) ]; then
  echo "bundle.sh: bundle is $((size_kib / 1024)) MiB, over ${limit_mib} MiB" >&2
  exit 1
fi
