#!/usr/bin/env bash
# Copies what the daemon needs at run time out of a build: matmul-server,
# matmul-cli and, where the build made them, matmul-tune and matmul-bench
# into DEST/bin, and every shared
# library they load that a CUDA runtime image of the same distribution
# lacks into DEST/lib (glibc, libstdc++ and CUDA's own libraries are left to
# the image; libcuda comes from the host's driver). The Dockerfile's build
# stage runs it; the binaries then need LD_LIBRARY_PATH=DEST/lib.
# Usage: deploy/collect_runtime.sh BUILD_DIR DEST
set -euo pipefail
build="$1"
dest="$2"
mkdir -p "$dest/bin" "$dest/lib"
binaries=("$build/server/matmul-server" "$build/client/matmul-cli")
for optional in "$build/kernels/cuda/matmul-tune" \
  "$build/kernels/cuda/matmul-bench"; do
  [[ -x $optional ]] && binaries+=("$optional")
done
for bin in "${binaries[@]}"; do
  install -m 0755 "$bin" "$dest/bin/"
  strip --strip-unneeded "$dest/bin/$(basename "$bin")"
done
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libpthread|libdl\.|librt\.|libresolv|libutil|libstdc\+\+|libgcc_s|libcuda\.|libcudart|libcublas|libcublasLt|libnvidia)'
for bin in "${binaries[@]}"; do
  ldd "$bin" | awk '/=> \// {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ $name =~ $skip ]] && continue
  cp -L "$path" "$dest/lib/$name"
  strip --strip-unneeded "$dest/lib/$name" 2>/dev/null || true
done
# Every binary must resolve every library from DEST/lib or the image.
for bin in "$dest"/bin/*; do
  if LD_LIBRARY_PATH="$dest/lib" ldd "$bin" | grep -v -E 'libcuda\.so' | grep -q 'not found'; then
    echo "collect_runtime.sh: $bin misses libraries:" >&2
    LD_LIBRARY_PATH="$dest/lib" ldd "$bin" | grep 'not found' >&2
    exit 1
  fi
done
echo "collected into $dest: $(ls "$dest/bin" | tr '\n' ' ')and $(ls "$dest/lib" | wc -l) libraries"
