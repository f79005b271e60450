#!/usr/bin/env bash
# Cross-compiles everything that needs no CUDA (MATMUL_CUDA=OFF) for arm64
# (aarch64, the DGX Spark's CPU) with Debian's aarch64 cross toolchain, and
# runs the CPU test suite with ctest under qemu-user.
#
# Usage (as root, from anywhere; Debian 12):
#   tests/arm64/cross_build_and_test.sh [--jobs=N] [--build-dir=DIR] [--skip-install]
#   then rerun ctest alone: ctest --test-dir build-arm64 -j1 --output-on-failure
#
# What it installs on the host (apt, only new packages, never removing one):
# g++-aarch64-linux-gnu and qemu-user. The arm64 libraries (grpc++,
# protobuf, abseil, prometheus-cpp, gtest/gmock, openblas, nlohmann-json,
# zlib, with libc6-dev and libstdc++-12-dev) go into a sysroot,
# <build-dir>/sysroot, not into the host: multiarch co-installation
# (dpkg --add-architecture arm64; apt-get install libfoo-dev:arm64) does not
# work here, because prometheus-cpp-dev depends on civetweb, which is not
# Multi-Arch: same (installing the arm64 one removes the amd64
# prometheus-cpp-dev the main build needs), and every Multi-Arch: same
# library must be at one version on both architectures, which upgrades
# amd64 packages under the other builds. The sysroot is made by apt itself
# with a private state directory (<build-dir>/apt, architecture arm64, an
# empty dpkg status), which resolves the dependencies and downloads the
# .debs; each is unpacked with dpkg-deb -x (no maintainer scripts run, so
# the update-alternatives links of openblas are made here). Host tools
# (protoc, grpc_cpp_plugin) are the amd64 ones of the main build.
#
# ctest runs the arm64 binaries through CMAKE_CROSSCOMPILING_EMULATOR
# (qemu-aarch64 -L <sysroot>); the tests that are shell or Python scripts
# start arm64 binaries, so binfmt_misc must send those to qemu as well
# (the script registers a handler when none is there, and removes it at
# exit). Tests that cannot run under qemu-user are excluded by name, each
# with its reason printed.
set -euo pipefail

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  cat <<'USAGE'
Options:
  --jobs=N          parallel compile jobs (default 2)
  --build-dir=DIR   build folder (default <repo>/build-arm64)
  --skip-install    do not apt-get install the toolchain or rebuild the sysroot
  --help            this text
USAGE
}

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
jobs=2
build_dir="${repo}/build-arm64"
skip_install=0
for arg in "$@"; do
  case "${arg}" in
    --jobs=*) jobs="${arg#*=}" ;;
    --build-dir=*) build_dir="$(realpath -m "${arg#*=}")" ;;
    --skip-install) skip_install=1 ;;
    --help | -h) usage; exit 0 ;;
    *) echo "unknown argument: ${arg} (see --help)" >&2; exit 2 ;;
  esac
done

sysroot="${build_dir}/sysroot"
apt_dir="${build_dir}/apt"
# The arm64 packages the build links and its tests use.
sysroot_packages=(
  libc6-dev libstdc++-12-dev libgcc-12-dev
  libgrpc++-dev libgrpc-dev libprotobuf-dev libabsl-dev prometheus-cpp-dev
  libgtest-dev libgmock-dev libopenblas-dev libopenblas0-pthread
  nlohmann-json3-dev zlib1g-dev libssl-dev libc-ares-dev libre2-dev
  libjemalloc-dev libjemalloc2
)
start_seconds=${SECONDS}

log() { echo "== $*"; }

install_host_tools() {
  log "host tools: g++-aarch64-linux-gnu, qemu-user"
  if dpkg -s g++-aarch64-linux-gnu qemu-user >/dev/null 2>&1; then
    return 0
  fi
  apt-get update -q -o DPkg::Lock::Timeout=900
  # --no-remove: apt fails rather than remove a package the main build needs.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-remove \
    --no-install-recommends -o DPkg::Lock::Timeout=900 \
    g++-aarch64-linux-gnu qemu-user
}

# apt with a state of its own: arm64 only, nothing installed, Debian 12.
private_apt() {
  apt-get \
    -o APT::Architecture=arm64 -o APT::Architectures::=arm64 \
    -o Dir::State="${apt_dir}/state" \
    -o Dir::State::status="${apt_dir}/state/status" \
    -o Dir::Cache="${apt_dir}/cache" \
    -o Dir::Etc::SourceList="${apt_dir}/sources.list" \
    -o Dir::Etc::SourceParts="${apt_dir}/sources.list.d" \
    -o Dir::Etc::Preferences="${apt_dir}/preferences" \
    -o Dir::Etc::PreferencesParts="${apt_dir}/preferences.d" \
    -o APT::Install-Recommends=false \
    "$@"
}

make_sysroot() {
  log "arm64 sysroot in ${sysroot}"
  rm -rf "${apt_dir}" "${sysroot}"
  mkdir -p "${apt_dir}/state/lists/partial" \
    "${apt_dir}/cache/archives/partial" "${apt_dir}/sources.list.d" \
    "${apt_dir}/preferences.d" "${sysroot}"
  : >"${apt_dir}/state/status"
  : >"${apt_dir}/preferences"
  cat >"${apt_dir}/sources.list" <<SOURCES
deb [arch=arm64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main
deb [arch=arm64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm-updates main
deb [arch=arm64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security bookworm-security main
SOURCES
  private_apt update -q
  private_apt install -y -q --download-only "${sysroot_packages[@]}"
  local deb count=0
  for deb in "${apt_dir}"/cache/archives/*.deb; do
    dpkg-deb -x "${deb}" "${sysroot}"
    count=$((count + 1))
  done
  log "unpacked ${count} arm64 packages"
  # What update-alternatives would link: OpenBLAS (pthread) as libopenblas,
  # libblas and liblapack, and its pkg-config files.
  local multiarch="${sysroot}/usr/lib/aarch64-linux-gnu" file
  for file in "${multiarch}"/openblas-pthread/lib*.so*; do
    ln -sfn "openblas-pthread/$(basename "${file}")" \
      "${multiarch}/$(basename "${file}")"
  done
  mkdir -p "${multiarch}/pkgconfig"
  for file in "${multiarch}"/openblas-pthread/pkgconfig/*.pc; do
    ln -sfn "../openblas-pthread/pkgconfig/$(basename "${file}")" \
      "${multiarch}/pkgconfig/$(basename "${file}")"
  done
  # Absolute symlinks inside the sysroot would point at the host's files.
  local link target
  while IFS= read -r -d '' link; do
    target="$(readlink "${link}")"
    if [[ "${target}" == /* ]]; then
      ln -sfn "$(realpath -s -m --relative-to="$(dirname "${link}")" \
        "${sysroot}${target}")" "${link}"
    fi
  done < <(find "${sysroot}" -type l -print0)
  # gRPC's CMake package names its code generators, which the build runs on
  # the host and never links: the host's amd64 ones stand in for them.
  mkdir -p "${sysroot}/usr/bin"
  for file in /usr/bin/grpc_*_plugin; do
    ln -sfn "${file}" "${sysroot}/usr/bin/$(basename "${file}")"
  done
  touch "${sysroot}/.complete"
}

# The handler that lets the kernel run an arm64 ELF file (a test script
# starting matmul-server, a test forking matmul-cli) through qemu-aarch64;
# QEMU_LD_PREFIX in the tests' environment names the sysroot. What the
# script registers (and mounts) is removed again when it exits.
binfmt_name="matmul-qemu-aarch64"
binfmt_registered=0
binfmt_mounted=0
ensure_binfmt() {
  local binfmt=/proc/sys/fs/binfmt_misc
  if [[ ! -e "${binfmt}/register" ]] &&
    mount -t binfmt_misc binfmt_misc "${binfmt}" 2>/dev/null; then
    binfmt_mounted=1
  fi
  if [[ ! -e "${binfmt}/register" ]]; then
    echo "binfmt_misc is not available: the tests that start arm64" \
      "programs from scripts or from other programs cannot run" >&2
    return 1
  fi
  local entry
  for entry in "${binfmt}"/*; do
    if grep -qs '^magic 7f454c460201010000000000000000000200b700' \
      "${entry}" && grep -qs '^enabled' "${entry}"; then
      log "binfmt_misc: $(basename "${entry}") runs arm64 programs"
      return 0
    fi
  done
  printf '%s' ":${binfmt_name}:M::\\x7fELF\\x02\\x01\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x02\\x00\\xb7\\x00:\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\x00\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xfe\\xff\\xff\\xff:$(command -v qemu-aarch64):" \
    >"${binfmt}/register"
  binfmt_registered=1
  log "binfmt_misc: registered ${binfmt_name} (removed on exit)"
}
remove_binfmt() {
  if ((binfmt_registered)); then
    echo -1 >"/proc/sys/fs/binfmt_misc/${binfmt_name}" || true
  fi
  if ((binfmt_mounted)); then
    umount /proc/sys/fs/binfmt_misc || true
  fi
}
trap remove_binfmt EXIT

# Tests that cannot run under qemu-user, by ctest name (a regular
# expression each), with why.
excluded_tests=()
excluded_reasons=()
exclude() { excluded_tests+=("$1"); excluded_reasons+=("$2"); }
exclude 'ServerMetricsTest\.ProcessFamiliesComeFromProc' \
  "qemu-user writes /proc/self/stat itself, with 0 for utime, stime and \
rss, so process_cpu_seconds_total and process_resident_memory_bytes read 0"
# These occupy the daemon's only worker with a product sized to take
# seconds natively (2000^3 to 3000^3); emulated, OpenBLAS's NEON kernels
# take many minutes for it, past the tests' deadlines and timeouts.
slow_product_reason="occupies the worker with a 2000^3..3000^3 product \
(seconds natively), which runs for many minutes under qemu, past the \
test's deadline and timeout"
for name in 'QueueTest\.FullQueueAndQueuedDeadline' \
  'BatchingTest\.RequestsQueuedTogetherShareALaunchAndGetTheirOwnResults' \
  'BatchingTest\.ProductsTheBackendRunsAloneAreNeverBatched' \
  'BatchingTest\.ACancelledCallIsDroppedWithoutRunning' \
  'LanesTest\.InlineRequestsGoToTheLeastLoadedLane' \
  'InFlightTest\.UnregisterWhileAProductReadsTheRegionIsDeferred' \
  'InFlightTest\.UnregisterOfAQueuedRequestsRegionIsDeferred' \
  'InFlightTest\.RequestsInFlightCountsRequests' \
  'LimitedRingTest\.ATimedOutRequestGivesItsSlotBackOnceAnswered' \
  'LimitedRingTest\.ACallbackThatFindsNoFreeSlotIsSentWhenOneFrees'; do
  exclude "${name}" "${slow_product_reason}"
done

main() {
  if ((EUID != 0)); then
    echo "run as root: it installs packages and registers binfmt_misc" >&2
    exit 1
  fi
  if ((!skip_install)); then
    install_host_tools
  fi
  local tool
  for tool in cmake ninja pkg-config protoc grpc_cpp_plugin \
    aarch64-linux-gnu-g++ qemu-aarch64; do
    command -v "${tool}" >/dev/null || {
      echo "${tool} is missing: deploy/install_deps.sh installs the main" \
        "build's tools; this script the cross toolchain and qemu-user" >&2
      exit 1
    }
  done
  if [[ ! -e "${sysroot}/.complete" ]]; then
    if ((skip_install)); then
      echo "no sysroot in ${sysroot}: run without --skip-install" >&2
      exit 1
    fi
    make_sysroot
  fi

  log "configure (MATMUL_CUDA=OFF) in ${build_dir}"
  local launcher=()
  if command -v ccache >/dev/null; then
    launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache
      -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  fi
  cmake -S "${repo}" -B "${build_dir}" -G Ninja \
    -DCMAKE_TOOLCHAIN_FILE="${repo}/tests/arm64/aarch64-linux-gnu.cmake" \
    -DMATMUL_ARM64_SYSROOT="${sysroot}" \
    -DCMAKE_BUILD_TYPE=Release -DMATMUL_CUDA=OFF "${launcher[@]}"
  local configured_seconds=$((SECONDS - start_seconds))

  log "build (-j${jobs})"
  cmake --build "${build_dir}" -j "${jobs}"
  local built_seconds=$((SECONDS - start_seconds))
  # e_machine, the ELF header's bytes 18-19: 0xb7 0x00 is EM_AARCH64.
  local machine
  machine="$(od -An -t x1 -j 18 -N 2 "${build_dir}/server/matmul-server" |
    tr -d ' \n')"
  [[ "${machine}" == "b700" ]] || {
    echo "matmul-server is not an arm64 program (e_machine ${machine})" >&2
    exit 1
  }
  log "matmul-server is an arm64 (EM_AARCH64) program"

  ensure_binfmt
  export QEMU_LD_PREFIX="${sysroot}"

  local i exclude_regex=""
  for i in "${!excluded_tests[@]}"; do
    echo "excluded under qemu: ${excluded_tests[i]}: ${excluded_reasons[i]}"
    exclude_regex+="${exclude_regex:+|}${excluded_tests[i]}"
  done
  log "ctest under qemu-aarch64"
  local ctest_status=0
  ctest --test-dir "${build_dir}" -j1 --output-on-failure \
    --timeout 900 ${exclude_regex:+-E "${exclude_regex}"} ||
    ctest_status=$?
  log "configure done at ${configured_seconds} s, build at" \
    "${built_seconds} s, tests at $((SECONDS - start_seconds)) s"
  return "${ctest_status}"
}

main
