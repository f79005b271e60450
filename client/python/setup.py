"""Builds matmul_client's optional native extension, matmul_client._native
(client/python/native/: the C++ client's session and request ring, over
pybind11). pyproject.toml holds the package's metadata; this file only adds
the extension.

The extension compiles the C++ client sources it needs from this source
tree (client/, common/) and the protobuf/gRPC code of proto/matmul/v1,
generated here with protoc and grpc_cpp_plugin; it links grpc++, protobuf
and abseil as pkg-config finds them (Debian: pybind11-dev python3-pybind11
libgrpc++-dev libprotobuf-dev libabsl-dev protobuf-compiler
protobuf-compiler-grpc pkg-config). Nothing is downloaded.

Without those, the package installs without the extension (a warning says
why; `pip install -v` shows it) and its products go over gRPC.
Environment:
  MATMUL_CLIENT_BUILD_NATIVE=0  install without the extension
  MATMUL_CLIENT_BUILD_NATIVE=1  fail instead of installing without it
  MATMUL_SOURCE_ROOT            the project's root (default: ../.. of here)
  CXX                           the C++ compiler, e.g. "ccache g++"
  MATMUL_BUILD_JOBS             parallel compiles (default: the CPU count)
"""

import concurrent.futures
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.environ.get("MATMUL_SOURCE_ROOT",
                                      os.path.join(HERE, "..", "..")))
PROTO = "matmul/v1/matmul.proto"
# The C++ client sources the binding needs, relative to ROOT.
CLIENT_SOURCES = [
    "client/call_tickets.cc",
    "client/channel_credentials.cc",
    "client/client.cc",
    "client/ring/request_ring.cc",
    "client/regions/segment_names.cc",
    "client/session.cc",
    "client/regions/shared_memory_segment.cc",
    "common/request_ring_layout.cc",
]
NATIVE_SOURCES = [
    "native/connection.cc",
    "native/cuda_fast_path.cc",
    "native/matmul_error.cc",
    "native/module.cc",
    "native/product_request.cc",
    "native/ring.cc",
]
# Stream-ordered CUDA products and the CUDA buffer ids need the CUDA
# runtime's headers and library at build time; without them the extension is
# built with the stand-ins that say so, and CUDA tensors take the
# synchronizing path.
CUDA_HOME = os.environ.get("CUDA_HOME", "/usr/local/cuda")
HAVE_CUDA = os.path.exists(os.path.join(CUDA_HOME, "include", "cuda.h"))
CLIENT_SOURCES += [
    "client/regions/registered_region.cc",
    "client/stream_order/stream_order_numbers.cc",
    "client/stream_order/stream_ordered_calls.cc",
    "common/cuda_driver_api.cc",
] if HAVE_CUDA else ["client/stream_order/stream_ordered_calls_unavailable.cc"]
NATIVE_SOURCES += ["native/cuda_buffer_id.cc"] if HAVE_CUDA else \
    ["native/cuda_buffer_id_unavailable.cc"]
PKG_CONFIG_PACKAGES = [
    "grpc++", "protobuf", "absl_any_invocable", "absl_status",
    "absl_statusor", "absl_str_format", "absl_strings",
    "absl_synchronization", "absl_time",
]


def _warn(message):
    print(f"WARNING: matmul_client: {message}", file=sys.stderr, flush=True)


def _pkg_config(*args):
    return shlex.split(subprocess.run(
        ["pkg-config", *args, *PKG_CONFIG_PACKAGES], check=True,
        capture_output=True, text=True).stdout)


def _missing_prerequisite():
    """Why the extension cannot be built here, or None."""
    for path in [os.path.join("proto", PROTO), *CLIENT_SOURCES]:
        if not os.path.exists(os.path.join(ROOT, path)):
            return (f"{os.path.join(ROOT, path)} is missing (install from "
                    "the project's source tree, or set MATMUL_SOURCE_ROOT)")
    try:
        import pybind11  # noqa: F401
    except ImportError:
        return "pybind11 is not installed (Debian: python3-pybind11)"
    compiler = shlex.split(os.environ.get("CXX") or
                           sysconfig.get_config_var("CXX") or "c++")
    if shutil.which(compiler[0]) is None:
        return f"no C++ compiler {compiler[0]} (Debian: g++)"
    for tool, package in (("pkg-config", "pkg-config"),
                          ("protoc", "protobuf-compiler"),
                          ("grpc_cpp_plugin", "protobuf-compiler-grpc")):
        if shutil.which(tool) is None:
            return f"{tool} is not on PATH (Debian: {package})"
    try:
        _pkg_config("--exists")
    except subprocess.CalledProcessError:
        return ("pkg-config finds no " + " / ".join(PKG_CONFIG_PACKAGES) +
                " (Debian: libgrpc++-dev libprotobuf-dev libabsl-dev)")
    return None


class BuildNative(build_ext):
    """Generates the protobuf/gRPC C++ code, then compiles the sources in
    parallel (the generated code alone takes a while) and links them."""

    def build_extensions(self):
        cxx = shlex.split(os.environ.get("CXX", ""))
        if cxx:
            # distutils compiles with CC and its flags; put CXX in CC's
            # place, keeping the flags.
            cc = shlex.split(os.environ.get("CC") or
                             sysconfig.get_config_var("CC") or "")
            flags = self.compiler.compiler_so
            if cc and flags[:len(cc)] == cc:
                flags = flags[len(cc):]
            else:
                flags = flags[1:]
            self.compiler.set_executable("compiler_so", cxx + flags)
            self.compiler.set_executable("compiler_cxx", cxx)
            self.compiler.set_executable("linker_so", cxx + ["-shared"])
        # Without CXX, distutils links C++ with the compiler_cxx it found.
        self._link_as_cxx = not cxx
        super().build_extensions()

    def build_extension(self, ext):
        generated = os.path.join(os.path.abspath(self.build_temp), "proto")
        os.makedirs(generated, exist_ok=True)
        subprocess.run(
            ["protoc", f"--proto_path={os.path.join(ROOT, 'proto')}",
             f"--cpp_out={generated}", f"--grpc_out={generated}",
             f"--plugin=protoc-gen-grpc={shutil.which('grpc_cpp_plugin')}",
             os.path.join(ROOT, "proto", PROTO)], check=True)
        stem = os.path.join(generated, PROTO[:-len(".proto")])
        # The C++ client's sources lie outside this directory, which setup()
        # arguments may not name: they are added here.
        sources = list(ext.sources) + \
            [os.path.join(ROOT, s) for s in CLIENT_SOURCES] + \
            [stem + ".pb.cc", stem + ".grpc.pb.cc"]
        include_dirs = list(ext.include_dirs) + [generated]
        jobs = int(os.environ.get("MATMUL_BUILD_JOBS",
                                  len(os.sched_getaffinity(0))))

        def compile_one(source):
            return self.compiler.compile(
                [source], output_dir=self.build_temp,
                include_dirs=include_dirs,
                extra_postargs=ext.extra_compile_args)[0]

        with concurrent.futures.ThreadPoolExecutor(max(jobs, 1)) as pool:
            objects = list(pool.map(compile_one, sources))
        self.compiler.link_shared_object(
            objects, self.get_ext_fullpath(ext.name),
            extra_postargs=ext.extra_link_args,
            target_lang="c++" if self._link_as_cxx else None)


def _native_extension():
    if os.environ.get("MATMUL_CLIENT_BUILD_NATIVE") == "0":
        _warn("MATMUL_CLIENT_BUILD_NATIVE=0: installing without the native "
              "extension; products go over gRPC")
        return []
    reason = _missing_prerequisite()
    if reason is not None:
        if os.environ.get("MATMUL_CLIENT_BUILD_NATIVE") == "1":
            raise SystemExit(f"matmul_client: cannot build the native "
                             f"extension: {reason}")
        _warn(f"installing WITHOUT the native extension (matmul_client."
              f"_native): {reason}. Products will go over gRPC, not "
              f"through the request ring.")
        return []
    import pybind11
    cuda_include, cuda_link = [], []
    if HAVE_CUDA:
        lib = os.path.join(CUDA_HOME, "lib64")
        cuda_include = [os.path.join(CUDA_HOME, "include")]
        cuda_link = [f"-L{lib}", "-lcudart", f"-Wl,-rpath,{lib}"]
    return [Extension(
        "matmul_client._native",
        sources=NATIVE_SOURCES,
        include_dirs=[ROOT, pybind11.get_include()] + cuda_include,
        extra_compile_args=["-std=c++20", "-O2", "-g0",
                            "-fvisibility=hidden"] + _pkg_config("--cflags"),
        extra_link_args=_pkg_config("--libs") + cuda_link,
        language="c++")]


setup(ext_modules=_native_extension(), cmdclass={"build_ext": BuildNative})
