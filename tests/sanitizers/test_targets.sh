# Sourced by asan_ubsan.sh and tsan.sh: test_targets BUILD_DIR INCLUDE EXCLUDE
# prints the test executables of a configured build whose target names match
# the extended regex INCLUDE and not EXCLUDE (both on the bare target name,
# e.g. regions_test).
test_targets() {
  local build_dir=$1 include=$2 exclude=$3
  ninja -C "$build_dir" -t targets all |
    sed -n 's/^\([^ :]*\): CXX_EXECUTABLE_LINKER.*/\1/p' |
    xargs -n1 basename | grep -E "$include" | grep -vE "$exclude" | sort -u
}
