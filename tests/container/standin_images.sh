#!/usr/bin/env bash
# Makes the local stand-ins for the images the Dockerfile and compose.yaml
# name, where no image registry can be reached (CI): a Debian 12 root file
# system from debootstrap, with this machine's CUDA toolkit in it, imported
# with `podman import`. Each image is made only when podman storage lacks
# it, so a machine that ran this once reuses them.
#   localhost/matmul-standin/cuda:13.0-devel    nvcc, headers, cudart, cuBLAS
#                                               (as the CUDA devel image)
#   localhost/matmul-standin/cuda:13.0-runtime  cudart and cuBLAS(Lt) only
#                                               (as the CUDA runtime image)
#   localhost/matmul-standin/prometheus:debian12
#                                               Debian's prometheus package,
#                                               started as prom/prometheus is
# Debian 12 stands in for Ubuntu 24.04: deploy/install_deps.sh names
# packages both ship. Usage: standin_images.sh [--rebuild]
set -euo pipefail
cuda=${CUDA_HOME:-/usr/local/cuda}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
rebuild=0
[[ ${1:-} == --rebuild ]] && rebuild=1
readonly devel=localhost/matmul-standin/cuda:13.0-devel
readonly runtime=localhost/matmul-standin/cuda:13.0-runtime
readonly prometheus=localhost/matmul-standin/prometheus:debian12

wanted() {
  ((rebuild)) || ! podman image exists "$1"
}
if ! wanted "$devel" && ! wanted "$runtime" && ! wanted "$prometheus"; then
  echo "stand-in images present: $devel $runtime $prometheus"
  exit 0
fi

work=$(mktemp -d /var/tmp/matmul-standin.XXXXXX)
trap 'rm -rf "$work"' EXIT

# One minimal Debian 12, copied for each image.
base=$work/base
start=$(date +%s)
debootstrap --variant=minbase bookworm "$base" "$mirror" >"$work/debootstrap.log" 2>&1 ||
  { tail -20 "$work/debootstrap.log" >&2; exit 1; }
rm -rf "$base"/var/cache/apt/archives/*.deb "$base"/var/lib/apt/lists/*
echo "debootstrap: $(($(date +%s) - start)) s"

# Copies `base` to DIR and runs the rest of the arguments in it.
import_root() {
  local image=$1 dir=$2
  shift 2
  local start
  start=$(date +%s)
  tar -C "$dir" -c . | podman import "$@" - "$image" >/dev/null
  echo "imported $image: $(($(date +%s) - start)) s"
}

# The CUDA libraries the daemon loads, where the CUDA images keep them
# (lib64 and targets/*/lib lead to lib, as in the toolkit's own layout).
cuda_runtime_libs() {
  local dir=$1
  mkdir -p "$dir/usr/local/cuda-13.0/lib"
  ln -sfn lib "$dir/usr/local/cuda-13.0/lib64"
  ln -sfn cuda-13.0 "$dir/usr/local/cuda"
  cp -a "$cuda"/lib64/libcudart.so* "$cuda"/lib64/libcublas.so* \
    "$cuda"/lib64/libcublasLt.so* "$dir/usr/local/cuda-13.0/lib/"
  echo /usr/local/cuda/lib64 >"$dir/etc/ld.so.conf.d/000_cuda.conf"
  chroot "$dir" ldconfig
}

if wanted "$runtime"; then
  dir=$work/runtime
  cp -a "$base" "$dir"
  cuda_runtime_libs "$dir"
  import_root "$runtime" "$dir" \
    --change 'ENV PATH=/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]'
  rm -rf "$dir"
fi

if wanted "$devel"; then
  dir=$work/devel
  cp -a "$base" "$dir"
  cuda_runtime_libs "$dir"
  # What a build of the project uses: nvcc and its tools, headers, NVVM,
  # CMake's package files, the static and stub libraries CMake's
  # CUDAToolkit module looks for, and CUPTI for the optional tools.
  cp -a "$cuda"/bin "$cuda"/include "$cuda"/nvvm "$dir/usr/local/cuda-13.0/"
  [[ -d $cuda/targets ]] && cp -a "$cuda"/targets "$dir/usr/local/cuda-13.0/"
  cp -a "$cuda"/lib64/cmake "$cuda"/lib64/stubs "$cuda"/lib64/*.a \
    "$dir/usr/local/cuda-13.0/lib/"
  cp -a "$cuda"/lib64/libcupti.so* "$dir/usr/local/cuda-13.0/lib/" 2>/dev/null || true
  chroot "$dir" ldconfig
  import_root "$devel" "$dir" \
    --change 'ENV PATH=/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV CUDA_HOME=/usr/local/cuda' \
    --change 'CMD ["/bin/bash"]'
  rm -rf "$dir"
fi

if wanted "$prometheus"; then
  dir=$work/prometheus
  cp -a "$base" "$dir"
  start=$(date +%s)
  cp /etc/resolv.conf "$dir/etc/resolv.conf"
  chroot "$dir" apt-get update -qq
  chroot "$dir" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  chroot "$dir" apt-get clean
  rm -rf "$dir"/var/lib/apt/lists/* "$dir/etc/resolv.conf"
  # prom/prometheus runs as nobody with its data in /prometheus.
  install -d -o 65534 -g 65534 "$dir/prometheus"
  echo "prometheus package: $(($(date +%s) - start)) s"
  import_root "$prometheus" "$dir" \
    --change 'USER nobody' \
    --change 'WORKDIR /prometheus' \
    --change 'EXPOSE 9090' \
    --change 'ENTRYPOINT ["/usr/bin/prometheus"]' \
    --change 'CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]'
  rm -rf "$dir"
fi
