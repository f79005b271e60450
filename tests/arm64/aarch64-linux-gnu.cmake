# CMake toolchain file for a cross build to arm64 (aarch64) Linux with
# Debian's cross toolchain (g++-aarch64-linux-gnu) against a sysroot of
# Debian arm64 packages; tests/arm64/cross_build_and_test.sh makes the
# sysroot and passes -DMATMUL_ARM64_SYSROOT=<it>. Programs (protoc,
# grpc_cpp_plugin) are the host's; libraries, headers and CMake packages
# come from the sysroot only. ctest runs the arm64 binaries with qemu-user.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

set(MATMUL_ARM64_SYSROOT "" CACHE PATH "Root of the arm64 packages")
if(NOT MATMUL_ARM64_SYSROOT OR NOT IS_DIRECTORY "${MATMUL_ARM64_SYSROOT}")
  message(FATAL_ERROR "MATMUL_ARM64_SYSROOT ('${MATMUL_ARM64_SYSROOT}') is "
    "not a folder; tests/arm64/cross_build_and_test.sh makes one")
endif()
# try_compile projects read this file again and need the sysroot too.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES MATMUL_ARM64_SYSROOT)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_SYSROOT "${MATMUL_ARM64_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH "${MATMUL_ARM64_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# pkg-config (OpenBLAS) reads the sysroot's .pc files and prefixes their
# paths with it.
set(ENV{PKG_CONFIG_SYSROOT_DIR} "${MATMUL_ARM64_SYSROOT}")
set(ENV{PKG_CONFIG_LIBDIR}
  "${MATMUL_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu/pkgconfig:${MATMUL_ARM64_SYSROOT}/usr/share/pkgconfig")

# ctest (and gtest_discover_tests) run the arm64 binaries through qemu, with
# the sysroot as the root the dynamic loader and the libraries come from.
find_program(MATMUL_QEMU_AARCH64 qemu-aarch64 REQUIRED)
set(CMAKE_CROSSCOMPILING_EMULATOR
  "${MATMUL_QEMU_AARCH64};-L;${MATMUL_ARM64_SYSROOT}")
