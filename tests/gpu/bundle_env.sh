# shellcheck shell=bash
# Sourced, from the repository root, by every script under tests/gpu that
# runs the bundle's binaries (tests/gpu/bundle.sh) on the GPU machine: puts
# the bundle's libraries on the library path and unpacks its compressed
# payload once. Sourcing it again (a script run by another) changes nothing.
case ":${LD_LIBRARY_PATH:-}:" in
  *":$PWD/bundle/lib:"*) ;;
  *) export LD_LIBRARY_PATH="$PWD/bundle/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;;
esac
if [ -f bundle/payload.tar.xz ] && [ ! -f bundle/.unpacked ]; then
  # Under a lock: scripts started together in one call (a soak beside the
  # GPU tests) would otherwise both unpack, and one would rewrite a binary
  # the other has started, which then dies at once without a word.
  (
    flock 9
    if [ ! -f bundle/.unpacked ]; then
      { tar -xJf bundle/payload.tar.xz -C bundle ||
        python3 -c "import tarfile; tarfile.open('bundle/payload.tar.xz').extractall('bundle')"; } &&
        touch bundle/.unpacked
    fi
  ) 9>bundle/.unpack.lock
fi
