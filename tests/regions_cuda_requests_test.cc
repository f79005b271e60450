// RegisterRegion's checks of the CUDA kinds that need no GPU: on the CPU
// backend they are refused, and a cuda_vmm request naming another process
// or malformed is refused before any CUDA or pidfd call, exactly as on the
// CUDA backend.
#include <unistd.h>

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/regions/cuda_vmm_layout.h"
#include "tests/regions_fixture.h"

namespace matmul {
namespace {

using region_tests::RegionTest;

TEST_F(RegionTest, CudaKindsOnTheCpuBackend) {
  v1::RegisterRegionRequest request;
  request.set_session_id(session_->session_id());
  // A malformed handle is malformed whatever the backend.
  for (size_t length : {0, 16, 63, 65}) {
    SCOPED_TRACE(length);
    request.mutable_cuda_ipc()->set_handle(std::string(length, '\x01'));
    request.mutable_cuda_ipc()->set_size_bytes(1 << 20);
    ExpectRegisterRejected(
        request, absl::StatusCode::kInvalidArgument,
        absl::StrCat("cuda_ipc handle has ", length, " bytes; expected 64"));
  }
  // A well-formed one cannot be served here.
  request.mutable_cuda_ipc()->set_handle(std::string(64, '\x01'));
  ExpectRegisterRejected(request, absl::StatusCode::kFailedPrecondition,
                         "CUDA regions need a daemon on the CUDA backend");
  request.mutable_cuda_vmm()->set_pid(getpid());
  request.mutable_cuda_vmm()->set_fd(0);
  request.mutable_cuda_vmm()->set_size_bytes(2 << 20);
  ExpectRegisterRejected(request, absl::StatusCode::kFailedPrecondition,
                         "CUDA regions need a daemon on the CUDA backend");
  // So can a well-formed chunked one (an expandable segment of PyTorch).
  request.mutable_cuda_vmm()->set_fd(0);
  request.mutable_cuda_vmm()->add_chunk_fds(7);
  request.mutable_cuda_vmm()->add_chunk_fds(8);
  request.mutable_cuda_vmm()->set_chunk_bytes(20 << 20);
  request.mutable_cuda_vmm()->set_size_bytes(40 << 20);
  ExpectRegisterRejected(request, absl::StatusCode::kFailedPrecondition,
                         "CUDA regions need a daemon on the CUDA backend");
  ExpectStillServing();
}

// The daemon takes descriptors only out of the calling process: a cuda_vmm
// request naming another pid is refused, on any backend, before CUDA.
TEST_F(RegionTest, CudaVmmNamingAnotherProcessIsRefused) {
  v1::RegisterRegionRequest request;
  request.set_session_id(session_->session_id());
  request.mutable_cuda_vmm()->set_pid(getppid());
  request.mutable_cuda_vmm()->set_fd(0);
  request.mutable_cuda_vmm()->set_size_bytes(2 << 20);
  ExpectRegisterRejected(request, absl::StatusCode::kPermissionDenied,
                         absl::StrCat("names pid ", getppid(),
                                      " but the caller is pid ", getpid()));
  ExpectStillServing();
}

// A malformed cuda_vmm request is refused before any CUDA or pidfd call, so
// the CPU backend checks it exactly as the CUDA one does.
TEST_F(RegionTest, MalformedCudaVmmRequests) {
  struct Case {
    const char* what;
    int32_t pid;
    int32_t fd;
    std::vector<int32_t> chunk_fds;
    uint64_t chunk_bytes;
    uint64_t size_bytes;
    const char* message;
  };
  const int32_t pid = getpid();
  const uint64_t kChunk = uint64_t{20} << 20;
  const std::vector<Case> cases = {
      {"no pid", 0, 3, {}, 0, 2 << 20, "needs the client's pid (> 0); got 0"},
      {"negative pid", -5, 3, {}, 0, 2 << 20, "got -5"},
      {"negative fd",
       pid,
       -1,
       {},
       0,
       2 << 20,
       "one allocation needs fd >= 0 and size_bytes > 0; got fd -1"},
      {"zero size", pid, 3, {}, 0, 0, "got fd 3, size_bytes 0"},
      {"chunk_bytes without chunk_fds",
       pid,
       3,
       {},
       kChunk,
       kChunk,
       "chunk_bytes (20971520) needs chunk_fds"},
      {"fd and chunk_fds",
       pid,
       3,
       {4, 5},
       kChunk,
       2 * kChunk,
       "set either fd (one allocation) or chunk_fds, not both; got fd 3 and "
       "2 chunk_fds"},
      {"negative chunk fd",
       pid,
       0,
       {4, -2, 6},
       kChunk,
       3 * kChunk,
       "chunk_fds[1] is -2"},
      {"no chunk_bytes",
       pid,
       0,
       {4, 5},
       0,
       kChunk,
       "chunk_fds need chunk_bytes > 0"},
      {"size beyond the chunks",
       pid,
       0,
       {4, 5},
       kChunk,
       2 * kChunk + 1,
       "size_bytes 41943041 does not match 2 chunk(s) of 20971520 bytes: "
       "expected more than 20971520 and at most 41943040"},
      {"a chunk holding none of the region",
       pid,
       0,
       {4, 5, 6},
       kChunk,
       2 * kChunk,
       "expected more than 41943040 and at most 62914560"},
      {"no size", pid, 0, {4}, kChunk, 0, "size_bytes 0 does not match"},
      {"chunks that overflow",
       pid,
       0,
       {4, 5},
       uint64_t{1} << 63,
       uint64_t{1} << 63,
       "overflows 63-bit sizes"},
      {"one allocation over int64",
       pid,
       3,
       {},
       0,
       uint64_t{1} << 63,
       "overflows 63-bit sizes"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    v1::RegisterRegionRequest request;
    request.set_session_id(session_->session_id());
    v1::CudaVmmRegion* vmm = request.mutable_cuda_vmm();
    vmm->set_pid(c.pid);
    vmm->set_fd(c.fd);
    for (int32_t fd : c.chunk_fds) vmm->add_chunk_fds(fd);
    vmm->set_chunk_bytes(c.chunk_bytes);
    vmm->set_size_bytes(c.size_bytes);
    ExpectRegisterRejected(request, absl::StatusCode::kInvalidArgument,
                           c.message);
  }
  // Bounded: one more chunk than the daemon takes.
  v1::RegisterRegionRequest many;
  many.set_session_id(session_->session_id());
  many.mutable_cuda_vmm()->set_pid(pid);
  for (int i = 0; i <= kMaxCudaVmmChunks; ++i) {
    many.mutable_cuda_vmm()->add_chunk_fds(3);
  }
  many.mutable_cuda_vmm()->set_chunk_bytes(2 << 20);
  many.mutable_cuda_vmm()->set_size_bytes(uint64_t{2 << 20} *
                                          (kMaxCudaVmmChunks + 1));
  ExpectRegisterRejected(
      many, absl::StatusCode::kInvalidArgument,
      absl::StrCat("has ", kMaxCudaVmmChunks + 1, " chunk_fds; at most ",
                   kMaxCudaVmmChunks, " are accepted"));
  ExpectStillServing();
}

}  // namespace
}  // namespace matmul
