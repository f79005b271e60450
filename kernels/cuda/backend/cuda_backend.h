// The daemon's CUDA backend: a matmul::GemmBackend that runs each product
// with the kernel GemmSelector picks for its shape (the project's own mma
// kernels or cuBLASLt), timing the kernel with CUDA events.
//
// Entry points (the GemmBackend interface):
//  * RunHost: every operand is staged through device buffers that are
//    reused across calls: A and B (and C when beta != 0) copied in, C copied
//    back. The pointers may address host memory or, through unified
//    addressing, device memory: a request that mixes inline operands with
//    operands in GPU regions runs here.
//  * RunDevice: operands already in device (or registered / unified)
//    memory, e.g. CUDA IPC or registered regions; nothing is staged.
//  * RunBatch: products of one BatchKey as one pointer-array launch, or,
//    when they all read the same B and that B outweighs their A and C, as
//    one product of their A's stacked row-wise (gathered into one matrix;
//    C scattered back after): B is then read once instead of once each.
// Either way an operand whose strides have no unit dimension is packed to a
// dense matrix first (staging.h), and the output is scattered back to its
// strides afterwards.
// A stream-ordered product (GemmProblem::stream_order) runs once its
// client's stream has reached it, and signals that stream behind it
// (client_stream_order.h).
//
// Construct once per device and share: all methods are thread-safe. Up to
// `streams` calls run at once, each on a stream slot of its own
// (stream_slots.h: stream, timing events, workspace, staging buffers), so
// one call's host work overlaps another's kernel; further callers wait for
// a free slot. Big products run one after another on a stream all slots
// share (product_schedule.h). The selector's background tuning holds every
// slot while it times a key.
#ifndef MATMUL_KERNELS_CUDA_BACKEND_CUDA_BACKEND_H_
#define MATMUL_KERNELS_CUDA_BACKEND_CUDA_BACKEND_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/cuda_driver_api.h"
#include "common/gemm/gemm_problem.h"
#include "kernels/cuda/backend/cuda_backend_options.h"
#include "kernels/cuda/backend/internal/completion_poller.h"
#include "kernels/cuda/backend/internal/product_schedule.h"
#include "kernels/cuda/backend/internal/stream_slots.h"
#include "kernels/cuda/backend/internal/validate_problem.h"
#include "kernels/cuda/runtime/cuda_resources.h"
#include "kernels/cuda/runtime/device_info.h"
#include "kernels/cuda/selector/gemm_selector.h"
#include "kernels/gemm_backend.h"
#include "kernels/gemm_batch.h"
#include "kernels/launch_stages.h"

namespace matmul::cuda {

class CudaBackend : public GemmBackend {
 public:
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(
      const CudaBackendOptions& options);
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  std::vector<DeviceInfo> devices() const override { return {info_}; }

  // See GemmBackend::RunHost. GemmRunInfo::kernel names what ran (e.g.
  // "cublaslt_algo0", "mma_128x128x32_s4_w2x2"), kernel_seconds its time
  // alone (staging and packing excluded).
  absl::StatusOr<GemmRunInfo> RunHost(const GemmProblem& problem) override;

  // The same for a problem whose pointers (and pointer arrays) address
  // memory the device can read and write. Returns once the output is
  // complete, so that kernel_seconds is known.
  absl::StatusOr<GemmRunInfo> RunDevice(const GemmProblem& problem) override;

  // See GemmBackend::RunBatch: with `on_device`, the pointer arrays are
  // copied to the device and the products run as one launch.
  absl::StatusOr<GemmRunInfo> RunBatch(
      absl::Span<const GemmProblem* const> problems, bool on_device) override;

  // See GemmBackend::StartBatch. Products on the device that do not run on
  // the shared serial stream (nor, several, each alone: FillsDevice) are
  // queued on a slot as RunBatch would run them (after any wait for their
  // clients' streams on the CPU) and left to the completion poller, which
  // notices the slot's stream's end and runs `done`; the slot stays
  // theirs until then. Everything else runs as RunBatch, on the calling
  // thread.
  void StartBatch(absl::Span<const GemmProblem* const> problems, bool on_device,
                  LaunchDone done) override;

  // See GemmBackend::RunList. On the device, the products are queued back
  // to back on one stream slot, with the list's scratch in the slot's
  // buffer, timed as a whole by one event pair (each product's share by
  // FLOPs), and waited for once; a stream-ordered list waits for its
  // client's stream before the first product and signals it after the
  // last, as one product would.
  absl::StatusOr<std::vector<GemmRunInfo>> RunList(const GemmList& list,
                                                   bool on_device) override;

  // 1 for products that fill the device (a wave of 128x128 tiles).
  int MaxUsefulBatch(const GemmProblem& problem) const override;

  GemmSelector& selector() { return *selector_; }
  int device() const { return options_.device; }
  int cuda_device() const override { return options_.device; }
  // Device memory (cudaMemGetInfo) and the selector's tuning counts.
  BackendGauges Gauges() const override;

 private:
  CudaBackend(const CudaBackendOptions& options, DeviceInfo info,
              std::unique_ptr<GemmSelector> selector,
              std::unique_ptr<StreamSlotPool> slots,
              std::unique_ptr<ProductSchedule> schedule);

  // RunDeviceOnSlot, followed by the signal to the client's stream when
  // `problem` is stream-ordered: behind a wait queued on the slot's stream
  // when `wait_on_gpu`, otherwise once WaitForClientStreams has returned
  // (the caller waits before it takes the slot).
  absl::StatusOr<GemmRunInfo> RunOneOnSlot(const GemmProblem& problem,
                                           StreamSlot& slot, bool wait_on_gpu);
  // StartBatch's queued paths, for one product and for several of one
  // BatchKey (one launch, as RunBatch): each moves from `done` only when
  // it queued the products, and returns why it did not otherwise.
  absl::Status StartOne(const GemmProblem& problem, LaunchDone& done);
  absl::Status StartCombined(absl::Span<const GemmProblem* const> problems,
                             LaunchDone& done);
  // What StartOne or StartCombined queued on one slot.
  struct QueuedProducts;
  // Queues `problem` on `queued`'s slot: the gathers of its operands into
  // the form the kernels take (kept in `queued`), the product between the
  // slot's events (its kernel's name in `queued`), the scatter of C; each
  // a lap of `clock`.
  absl::Status QueueProduct(const GemmProblem& problem, QueuedProducts& queued,
                            LaunchStageClock& clock);
  // Hands what StartOne or StartCombined queued to the completion poller,
  // with the laps of `clock` for the launch's GemmRunInfo.
  void Watch(std::unique_ptr<QueuedProducts> queued, LaunchStageClock clock);
  // Several products of one BatchKey as one pointer-array launch, or one
  // stacked product (StackedB).
  absl::StatusOr<GemmRunInfo> RunCombined(const CombinedProblem& combined,
                                          StreamSlot& slot);
  // `combined` with its pointer arrays copied into the slot's buffer.
  absl::StatusOr<GemmProblem> CopyPointerArrays(const CombinedProblem& combined,
                                                StreamSlot& slot);
  // The B every product of `combined` reads, when stacking their A's pays
  // (B outweighs their A and C); null otherwise.
  static const void* StackedB(const CombinedProblem& combined);
  // True when `problem` alone has a wave of 128x128 tiles for the device.
  bool FillsDevice(const GemmProblem& problem) const;
  // Gathers what `problem` needs into the form the kernels take, runs it
  // (ProductSchedule::RunTimed) and scatters C back, then `then`.
  absl::StatusOr<GemmRunInfo> RunDeviceOnSlot(
      const GemmProblem& problem, StreamSlot& slot, bool after_slot_work,
      const ProductSchedule::AfterProduct& then = nullptr,
      const ProductSchedule::QueuedWait* wait = nullptr,
      const ProductSchedule::Queued& queued = nullptr);
  // For a stream-ordered `problem`, waits for its client's stream as far
  // as it must before the product takes a slot; returns whether the rest of
  // the wait goes to the GPU (false without a stream order). The wait's
  // give_up status when it gives up.
  absl::StatusOr<bool> AwaitClientStream(const GemmProblem& problem);
  // Whether stream-ordered `problem` may wait for its client's stream on
  // the GPU (client_stream_order.h): the daemon does so where the driver
  // offers stream memory operations. It then does, once every earlier
  // product of the client is launched.
  bool MayWaitOnGpu(const GemmProblem& problem) const;
  // For `batched`, a pointer-array product (arrays on the device) whose
  // entries all read B at `shared_b`: queues the gather of its A's (and
  // C's, with beta) into the slot's buffers and returns the one stacked
  // product over them; QueueStackOut queues the scatter of its C back.
  absl::StatusOr<GemmProblem> QueueStackIn(const GemmProblem& batched,
                                           const void* shared_b,
                                           StreamSlot& slot);
  absl::Status QueueStackOut(const GemmProblem& batched, StreamSlot& slot,
                             cudaStream_t stream);

  const CudaBackendOptions options_;
  const DeviceInfo info_;
  std::unique_ptr<GemmSelector> selector_;
  std::unique_ptr<StreamSlotPool> slots_;
  std::unique_ptr<ProductSchedule> schedule_;
  // Stream memory operations, for the signals of stream-ordered products.
  const absl::StatusOr<CudaDriverApi> driver_api_;
  // Queues list's products (scratch set) on `slot`, with the signal when
  // stream-ordered, and waits for them.
  absl::StatusOr<std::vector<GemmRunInfo>> RunListOnSlot(
      const std::vector<GemmProblem>& products, const GemmProblem& head,
      StreamSlot& slot, bool wait_on_gpu);

  // Device memory held back by test_only_memory_headroom_bytes.
  DeviceBuffer test_only_ballast_;
  // Notice the ends of StartBatch's queued products, each its share
  // (completion_threads); destroyed first.
  std::vector<std::unique_ptr<CompletionPoller>> completions_;
  // The poller the next launch goes to.
  std::atomic<uint32_t> next_completions_{0};
};

// The factory the daemon calls for --backend=cuda|auto.
absl::StatusOr<std::unique_ptr<GemmBackend>> CreateCudaBackend(
    const CudaBackendOptions& options);

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_BACKEND_CUDA_BACKEND_H_
