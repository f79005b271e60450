#!/usr/bin/env bash
# Builds the Python client's native extension (matmul_client._native) for
# the GPU machine's python3 (3.12), which cannot build it itself: it has no
# gRPC/protobuf C++ headers. The extension links the same Debian libraries
# as matmul-server, which the GPU bundle carries in bundle/lib.
#
# Usage, from the repo root, after tests/gpu/bundle.sh:
#   bash tests/gpu/build_native_for_device.sh
#   run(command="bash tests/gpu/checks/python_torch.sh",
#       carry=["bundle", "<the .so path this script prints>"])
# Env: PYTHON312 (a CPython 3.12 with headers; default: pyenv's), JOBS.
# Debian's setuptools and pybind11 (python3-setuptools, python3-pybind11)
# serve as build tools for that interpreter.
set -euo pipefail
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi
cd "$(dirname "$0")/../.."
python=${PYTHON312:-$(ls -d /root/.pyenv/versions/3.12.*/bin/python3 2>/dev/null | tail -1)}
if [ -z "$python" ] || ! "$python" -c 'import sys; assert sys.version_info[:2] == (3, 12)'; then
  echo "build_native_for_device.sh: no CPython 3.12 (set PYTHON312)" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd client/python &&
  MATMUL_CLIENT_BUILD_NATIVE=1 MATMUL_BUILD_JOBS=${JOBS:-2} \
    CXX="${CXX:-$(command -v ccache >/dev/null && echo "ccache g++" || echo g++)}" \
    PYTHONPATH=/usr/lib/python3/dist-packages \
    "$python" setup.py build_ext --build-temp "$work/tmp" \
    --build-lib "$work/lib" >"$work/log" 2>&1) || {
  tail -30 "$work/log" >&2
  exit 1
}
so=$(cd "$work/lib" && ls matmul_client/_native.cpython-312-*.so)
cp "$work/lib/$so" "client/python/$so"
echo "client/python/$so"
