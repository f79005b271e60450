#include "kernels/cuda/selector/internal/timing_operands.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/types/span.h"
#include "common/status_macros.h"
#include "kernels/cuda/runtime/cuda_status.h"
#include "kernels/cuda/runtime/device_ops.h"
#include "kernels/gemm_batch.h"

namespace matmul::cuda {

absl::StatusOr<TimingOperands> TimingOperands::Create(
    const GemmProblem& canonical, int device, cudaStream_t stream) {
  TimingOperands data;
  const GemmProblem& p = canonical;
  const int64_t a_elems = (p.a.strides.batch == 0 ? 1 : p.batch) * p.m * p.k;
  const int64_t b_elems = (p.b.strides.batch == 0 ? 1 : p.batch) * p.k * p.n;
  const int64_t c_bytes = p.batch * p.m * p.n * DTypeSize(p.c_dtype);
  // 256-byte aligned sub-allocations inside one buffer per copy.
  auto round_up = [](int64_t x) { return (x + 255) / 256 * 256; };
  const int64_t a_off = 0;
  const int64_t b_off = round_up(a_elems * 2);
  const int64_t c_off = b_off + round_up(b_elems * 2);
  const int64_t copy_bytes = c_off + round_up(c_bytes);

  int l2_bytes = 0;
  RETURN_IF_ERROR(CudaStatus(
      cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device),
      "cudaDeviceGetAttribute(L2CacheSize)"));
  // Enough copies that a round-robin pass moves about 3x the L2 size, and
  // at least two (memory permitting) so that back-to-back runs never find
  // the previous run's operands in L2.
  const int64_t wanted = (3 * int64_t{l2_bytes} + copy_bytes - 1) / copy_bytes;
  int copies = static_cast<int>(std::clamp<int64_t>(wanted, 2, 32));
  if (copy_bytes * 2 > (int64_t{2} << 30)) copies = 1;
  for (int i = 0; i < copies; ++i) {
    ASSIGN_OR_RETURN(DeviceBuffer buffer, DeviceBuffer::Create(copy_bytes));
    char* base = static_cast<char*>(buffer.data());
    RETURN_IF_ERROR(
        FillRandomBf16(base + a_off, a_elems, 0x1234u + 7919u * i, stream));
    RETURN_IF_ERROR(
        FillRandomBf16(base + b_off, b_elems, 0xabcdu + 7907u * i, stream));
    // C is written by every run; poisoned once so a beta != 0 timing
    // would not read uninitialised memory.
    RETURN_IF_ERROR(
        CudaStatus(cudaMemsetAsync(base + c_off, 0x3c, c_bytes, stream),
                   "cudaMemsetAsync"));
    GemmProblem copy = canonical;
    copy.a.data = base + a_off;
    copy.b.data = base + b_off;
    copy.c.data = base + c_off;
    if (canonical.a.pointers != nullptr) {
      // Entry b of each operand at its place in the dense batch, as
      // device-readable arrays: [A pointers | B pointers | C pointers].
      std::vector<const void*> host;
      for (int64_t b = 0; b < p.batch; ++b) {
        host.push_back(base + a_off + b * p.m * p.k * 2);
      }
      for (int64_t b = 0; b < p.batch; ++b) {
        host.push_back(base + b_off + b * p.k * p.n * 2);
      }
      for (int64_t b = 0; b < p.batch; ++b) {
        host.push_back(base + c_off + b * p.m * p.n * DTypeSize(p.c_dtype));
      }
      ASSIGN_OR_RETURN(DeviceBuffer arrays,
                       DeviceBuffer::Create(host.size() * sizeof(void*)));
      // On `stream`, so that the synchronization below covers it: a plain
      // cudaMemcpy from pageable memory may return before its DMA lands, and
      // `stream` (non-blocking) would not wait for it. The pageable source is
      // staged before the call returns, so `host` may go at scope end.
      RETURN_IF_ERROR(
          CudaStatus(cudaMemcpyAsync(arrays.data(), host.data(),
                                     host.size() * sizeof(void*),
                                     cudaMemcpyHostToDevice, stream),
                     "cudaMemcpyAsync(pointer arrays)"));
      const auto* device = static_cast<const void* const*>(arrays.data());
      copy.a.data = copy.b.data = copy.c.data = nullptr;
      copy.a.pointers = device;
      copy.b.pointers = device + p.batch;
      copy.c.pointers = const_cast<void* const*>(device + 2 * p.batch);
      // As the batcher's arrays say: the alignment all entries share.
      const absl::Span<const void* const> entries(host);
      copy.a.pointer_alignment = CommonAlignment(entries.subspan(0, p.batch));
      copy.b.pointer_alignment =
          CommonAlignment(entries.subspan(p.batch, p.batch));
      copy.c.pointer_alignment =
          CommonAlignment(entries.subspan(2 * p.batch, p.batch));
      data.buffers_.push_back(std::move(arrays));
    }
    data.problems_.push_back(copy);
    data.buffers_.push_back(std::move(buffer));
  }
  RETURN_IF_ERROR(
      CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize"));
  return data;
}

}  // namespace matmul::cuda
