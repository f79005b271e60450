#include "kernels/cuda/backend/cuda_backend.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/gemm/launch_order.h"
#include "common/gemm/matrix_layout.h"
#include "common/gemm/stream_order.h"
#include "common/status_macros.h"
#include "kernels/cuda/backend/internal/client_stream_order.h"
#include "kernels/cuda/backend/internal/schedule_options.h"
#include "kernels/cuda/backend/internal/staging.h"
#include "kernels/cuda/runtime/cuda_status.h"
#include "kernels/cuda/runtime/device_ops.h"
#include "kernels/cuda/runtime/mps_client.h"
#include "kernels/gemm_batch.h"
#include "kernels/launch_stages.h"

namespace matmul::cuda {

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(
    const CudaBackendOptions& options) {
  if (options.streams < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("streams is ", options.streams, "; expected >= 1"));
  }
  if (options.completion_threads < 1) {
    return absl::InvalidArgumentError(absl::StrCat("completion_threads is ",
                                                   options.completion_threads,
                                                   "; expected >= 1"));
  }
  if (!(options.serial_min_gflop_per_sm > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("serial_min_gflop_per_sm is ",
                     options.serial_min_gflop_per_sm, "; expected > 0"));
  }
  const int count = CudaDeviceCount();
  if (count == 0) {
    return absl::UnavailableError("no CUDA device or driver available");
  }
  if (options.device < 0 || options.device >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", options.device, " does not exist (", count,
                     " present)"));
  }
  ASSIGN_OR_RETURN(ScopedDevice scoped, ScopedDevice::Create(options.device));
  ASSIGN_OR_RETURN(DeviceInfo info, DescribeDevice(options.device));
  info.mps_client = IsMpsClient(options.device);

  ASSIGN_OR_RETURN(std::unique_ptr<GemmSelector> selector,
                   GemmSelector::Create(options.device, options.selector));
  ASSIGN_OR_RETURN(std::unique_ptr<StreamSlotPool> slots,
                   StreamSlotPool::Create(options.device, options.streams,
                                          selector->max_workspace_bytes()));
  ASSIGN_OR_RETURN(
      std::unique_ptr<ProductSchedule> schedule,
      ProductSchedule::Create(
          *selector, info.multiprocessors,
          {.serial_min_gflop_per_sm = options.serial_min_gflop_per_sm,
           .test_only_inject_fault_after =
               options.test_only_inject_fault_after}));
  auto backend = std::unique_ptr<CudaBackend>(
      new CudaBackend(options, std::move(info), std::move(selector),
                      std::move(slots), std::move(schedule)));
  StreamSlotPool* pool = backend->slots_.get();
  backend->selector_->SetTuningGuard([pool] { return pool->HoldAll(); });
  if (options.test_only_memory_headroom_bytes > 0) {
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    RETURN_IF_ERROR(CudaStatus(cudaMemGetInfo(&free_bytes, &total_bytes),
                               "cudaMemGetInfo"));
    const auto headroom =
        static_cast<size_t>(options.test_only_memory_headroom_bytes);
    if (free_bytes > headroom) {
      RETURN_IF_ERROR(
          backend->test_only_ballast_.Reserve(free_bytes - headroom));
    }
  }
  return backend;
}

CudaBackend::CudaBackend(const CudaBackendOptions& options, DeviceInfo info,
                         std::unique_ptr<GemmSelector> selector,
                         std::unique_ptr<StreamSlotPool> slots,
                         std::unique_ptr<ProductSchedule> schedule)
    : options_(options),
      info_(std::move(info)),
      selector_(std::move(selector)),
      slots_(std::move(slots)),
      schedule_(std::move(schedule)),
      driver_api_(LoadCudaDriverApi()) {
  CompletionPollerOptions poller;
  poller.idle_spin = options_.completion_idle_spin;
  const int device = options_.device;
  for (int i = 0; i < options_.completion_threads; ++i) {
    completions_.push_back(std::make_unique<CompletionPoller>(
        poller, [device] { (void)cudaSetDevice(device); }));
  }
}

CudaBackend::~CudaBackend() {
  // Products still queued end and give their slots back first.
  completions_.clear();
  // Stop background tuning (whose guard holds the slots) before the slots,
  // buffers and streams go away.
  selector_.reset();
}

bool CudaBackend::FillsDevice(const GemmProblem& p) const {
  return p.batch * p.m * p.n >=
         int64_t{128} * 128 * std::max(1, info_.multiprocessors);
}

int CudaBackend::MaxUsefulBatch(const GemmProblem& problem) const {
  return FillsDevice(problem) ? 1 : 0;
}

absl::StatusOr<GemmRunInfo> CudaBackend::RunHost(const GemmProblem& p) {
  RETURN_IF_ERROR(ValidateForCuda(p));
  ASSIGN_OR_RETURN(StreamSlotLease lease, slots_->Acquire());
  StreamSlot& slot = lease.slot();
  cudaStream_t stream = slot.stream.get();
  const MatrixLayout ca = ClassifyLayout(p.a.strides, p.m, p.k);
  const MatrixLayout cb = ClassifyLayout(p.b.strides, p.k, p.n);
  const MatrixLayout cc = ClassifyLayout(p.c.strides, p.m, p.n);
  const bool a_broadcast =
      p.batch > 1 && p.a.pointers == nullptr && p.a.strides.batch == 0;
  const bool b_broadcast =
      p.batch > 1 && p.b.pointers == nullptr && p.b.strides.batch == 0;
  const int64_t a_entries = a_broadcast ? 1 : p.batch;
  const int64_t b_entries = b_broadcast ? 1 : p.batch;
  const size_t c_element = DTypeSize(p.c_dtype);
  RETURN_IF_ERROR(slot.a_buffer.Reserve(a_entries * p.m * p.k * 2));
  RETURN_IF_ERROR(slot.b_buffer.Reserve(b_entries * p.k * p.n * 2));
  RETURN_IF_ERROR(slot.c_buffer.Reserve(p.batch * p.m * p.n * c_element));

  // Dense device copies keep a row- or column-major source's layout (a
  // transposed operand stays transposed: the kernels take either); a
  // strided source becomes row-major.
  auto device_layout = [](const MatrixLayout& c) {
    return c.order == MatrixOrder::kColMajor ? MatrixOrder::kColMajor
                                             : MatrixOrder::kRowMajor;
  };
  GemmProblem d = p;
  d.a.pointers = nullptr;
  d.b.pointers = nullptr;
  d.c.pointers = nullptr;
  d.a.data = slot.a_buffer.data();
  d.b.data = slot.b_buffer.data();
  d.c.data = slot.c_buffer.data();
  d.a.strides = DenseStrides(device_layout(ca), p.m, p.k, a_broadcast);
  d.b.strides = DenseStrides(device_layout(cb), p.k, p.n, b_broadcast);
  d.c.strides = DenseStrides(device_layout(cc), p.m, p.n, false);

  std::vector<char> pack;
  RETURN_IF_ERROR(
      StageIn(p.a.data, p.a.pointers, p.a.strides, ca, p.m, p.k, a_entries, 2,
              static_cast<char*>(slot.a_buffer.data()), stream, pack));
  RETURN_IF_ERROR(
      StageIn(p.b.data, p.b.pointers, p.b.strides, cb, p.k, p.n, b_entries, 2,
              static_cast<char*>(slot.b_buffer.data()), stream, pack));
  if (p.beta != 0.0f) {
    RETURN_IF_ERROR(
        StageIn(p.c.data, const_cast<const void* const*>(p.c.pointers),
                p.c.strides, cc, p.m, p.n, p.batch, c_element,
                static_cast<char*>(slot.c_buffer.data()), stream, pack));
  }
  ASSIGN_OR_RETURN(GemmRunInfo info,
                   schedule_->RunTimed(d, slot, /*after_slot_work=*/true));
  RETURN_IF_ERROR(StageOut(
      p, cc, static_cast<const char*>(slot.c_buffer.data()), stream, pack));
  RETURN_IF_ERROR(slot.stream.Synchronize());
  return info;
}

absl::StatusOr<GemmRunInfo> CudaBackend::RunDevice(const GemmProblem& p) {
  RETURN_IF_ERROR(ValidateForCuda(p));
  ASSIGN_OR_RETURN(const bool wait_on_gpu, AwaitClientStream(p));
  ASSIGN_OR_RETURN(StreamSlotLease lease, slots_->Acquire());
  return RunOneOnSlot(p, lease.slot(), wait_on_gpu);
}

void CudaBackend::StartBatch(absl::Span<const GemmProblem* const> problems,
                             bool on_device, LaunchDone done) {
  if (!options_.launch_pipeline || !on_device || problems.empty() ||
      schedule_->RunsSerially(*problems.front()) ||
      (problems.size() > 1 && FillsDevice(*problems.front()))) {
    std::move(done)(RunBatch(problems, on_device));
    return;
  }
  const absl::Status status = problems.size() == 1
                                  ? StartOne(*problems.front(), done)
                                  : StartCombined(problems, done);
  if (!status.ok()) std::move(done)(status);
}

// What StartOne or StartCombined queued on one slot, until the completion
// poller has seen it end.
struct CudaBackend::QueuedProducts {
  QueuedProducts(StreamSlotLease lease,
                 absl::Span<const GemmProblem* const> problems)
      : lease(std::move(lease)), problems(problems.begin(), problems.end()) {}
  StreamSlotLease lease;
  std::vector<const GemmProblem*> problems;
  std::optional<KernelOperands> operands;
  std::string kernel;
  // Set when products wait for their clients' streams on the GPU.
  std::optional<QueuedWaitWatch> watch;
  // StartOne's or StartCombined's laps (GemmRunInfo::launch_stages).
  std::vector<LaunchStage> stages;
  GemmBackend::LaunchDone done;
};

absl::Status CudaBackend::StartOne(const GemmProblem& p, LaunchDone& done) {
  LaunchStageClock clock;
  RETURN_IF_ERROR(ValidateForCuda(p));
  clock.Lap("validate");
  ASSIGN_OR_RETURN(const bool wait_on_gpu, AwaitClientStream(p));
  clock.Lap("await_stream");
  ASSIGN_OR_RETURN(StreamSlotLease lease, slots_->Acquire());
  clock.Lap("slot");
  const GemmProblem* one[] = {&p};
  auto queued = std::make_unique<QueuedProducts>(std::move(lease), one);
  StreamSlot& slot = queued->lease.slot();
  cudaStream_t stream = slot.stream.get();
  const bool ordered = p.stream_order != nullptr;
  // As RunOneOnSlot queues it: the wait for the client's stream (before
  // the gathers, which read its operands too), the gathers, the product
  // between the slot's events, the scatter of C, the signal.
  auto queue = [&]() -> absl::Status {
    if (wait_on_gpu) {
      RETURN_IF_ERROR(QueueClientWaits(*driver_api_, one, stream));
      queued->watch.emplace(one, absl::Now());
      clock.Lap("stream_wait");
    }
    RETURN_IF_ERROR(QueueProduct(p, *queued, clock));
    if (ordered && driver_api_.ok()) {
      RETURN_IF_ERROR(QueueClientSignals(*driver_api_, one, stream));
      clock.Lap("signal");
    }
    return absl::OkStatus();
  };
  const absl::Status status = queue();
  if (ordered) p.stream_order->launch.MarkLaunched();
  if (!status.ok()) {
    // The slot goes back to the pool: its stream must not keep waiting for
    // a client stream that may never get there.
    if (wait_on_gpu) ReleaseQueuedWaits(one);
    return status;
  }
  queued->done = std::move(done);
  Watch(std::move(queued), std::move(clock));
  return absl::OkStatus();
}

absl::Status CudaBackend::StartCombined(
    absl::Span<const GemmProblem* const> problems, LaunchDone& done) {
  // Stream-ordered products are batched only when their clients' streams
  // have got there (the daemon's runner launches the others alone), so
  // this wait on the CPU returns at once, and nothing that can give up is
  // left on the GPU: once queued, the launch fails only as the device
  // does.
  LaunchStageClock clock;
  RETURN_IF_ERROR(WaitForClientStreams(problems));
  clock.Lap("await_stream");
  ASSIGN_OR_RETURN(CombinedProblem combined,
                   CombinedProblem::Combine(problems));
  RETURN_IF_ERROR(ValidateForCuda(combined.problem()));
  clock.Lap("validate");
  ASSIGN_OR_RETURN(StreamSlotLease lease, slots_->Acquire());
  clock.Lap("slot");
  auto queued = std::make_unique<QueuedProducts>(std::move(lease), problems);
  StreamSlot& slot = queued->lease.slot();
  cudaStream_t stream = slot.stream.get();
  // As RunBatch runs them, queued: the pointer arrays, the product
  // (stacked or pointer-array) between the slot's events, the scatters,
  // the signals.
  auto queue = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(const GemmProblem arrays,
                     CopyPointerArrays(combined, slot));
    clock.Lap("pointer_arrays");
    const void* shared_b = StackedB(combined);
    GemmProblem run = arrays;
    if (shared_b != nullptr) {
      ASSIGN_OR_RETURN(run, QueueStackIn(arrays, shared_b, slot));
      clock.Lap("stack_in");
    }
    RETURN_IF_ERROR(QueueProduct(run, *queued, clock));
    if (shared_b != nullptr) {
      RETURN_IF_ERROR(QueueStackOut(arrays, slot, stream));
      queued->kernel = absl::StrCat(queued->kernel, "+stacked");
      clock.Lap("stack_out");
    }
    // Signals only the stream-ordered ones.
    if (driver_api_.ok()) {
      RETURN_IF_ERROR(QueueClientSignals(*driver_api_, problems, stream));
      clock.Lap("signal");
    }
    return absl::OkStatus();
  };
  const absl::Status status = queue();
  for (const GemmProblem* p : problems) {
    if (p->stream_order != nullptr) p->stream_order->launch.MarkLaunched();
  }
  RETURN_IF_ERROR(status);
  queued->done = std::move(done);
  Watch(std::move(queued), std::move(clock));
  return absl::OkStatus();
}

absl::Status CudaBackend::QueueProduct(const GemmProblem& p,
                                       QueuedProducts& queued,
                                       LaunchStageClock& clock) {
  StreamSlot& slot = queued.lease.slot();
  cudaStream_t stream = slot.stream.get();
  ASSIGN_OR_RETURN(KernelOperands operands, KernelOperands::Gather(p, stream));
  queued.operands.emplace(std::move(operands));
  clock.Lap("gather");
  ASSIGN_OR_RETURN(queued.kernel,
                   schedule_->QueueTimed(queued.operands->problem(), slot));
  clock.Lap("kernel");
  RETURN_IF_ERROR(queued.operands->ScatterC(stream));
  clock.Lap("scatter");
  return absl::OkStatus();
}

namespace {

// Polls of a launch's end mark between queries of its stream.
constexpr uint32_t kStreamQueryEvery = 64;

}  // namespace

void CudaBackend::Watch(std::unique_ptr<QueuedProducts> owned,
                        LaunchStageClock clock) {
  QueuedProducts* queued = owned.get();
  StreamSlot& slot = queued->lease.slot();
  // The end mark behind everything queued (where the option asks for it
  // and the driver queues it): ready() then reads the slot's word.
  std::optional<uint32_t> end_mark;
  if (options_.completion_by_word && driver_api_.ok() &&
      driver_api_->stream_write_value32(
          slot.stream.get(), reinterpret_cast<CUdeviceptr>(slot.ends.device()),
          slot.launches + 1, CU_STREAM_WRITE_VALUE_DEFAULT) == CUDA_SUCCESS) {
    end_mark = ++slot.launches;
    clock.Lap("end_mark");
  }
  queued->lease.RestoreDevice();
  clock.Lap("restore_device");
  queued->stages = std::move(clock).Take();
  // Launches go to the pollers in turn: each notices the ends of its own
  // and completes them (answers included) on its thread.
  const uint32_t turn =
      next_completions_.fetch_add(1, std::memory_order_relaxed);
  completions_[turn % completions_.size()]->Add(
      {.ready =
           // Called only until complete runs.
       [queued, end_mark, polls = uint32_t{0}]() mutable {
         StreamSlot& slot = queued->lease.slot();
         if (end_mark) {
           if (WordReached(slot.ends.host()->load(std::memory_order_acquire),
                           *end_mark)) {
             return true;
           }
           // A stream that failed never writes the mark: ask it now and
           // then.
           if (++polls % kStreamQueryEvery == 0 &&
               cudaStreamQuery(slot.stream.get()) != cudaErrorNotReady) {
             return true;
           }
         } else if (cudaStreamQuery(slot.stream.get()) != cudaErrorNotReady) {
           return true;
         }
         if (queued->watch) queued->watch->Check(absl::Now());
         return false;
       },
       .complete =
           [owned = std::move(owned)]() mutable {
             QueuedProducts* queued = owned.get();
             StreamSlot& slot = queued->lease.slot();
             auto finish = [&]() -> absl::StatusOr<GemmRunInfo> {
               // A client given up on: its product ran, unasked for.
               if (queued->watch) RETURN_IF_ERROR(queued->watch->status());
               RETURN_IF_ERROR(slot.stream.Synchronize());  // its error
               RETURN_IF_ERROR(queued->operands->Release(slot.stream.get()));
               GemmRunInfo info;
               info.kernel = queued->kernel;
               info.launch_stages = std::move(queued->stages);
               ASSIGN_OR_RETURN(
                   info.kernel_seconds,
                   CudaEvent::ElapsedSeconds(slot.start, slot.stop));
               StoreClientSignals(queued->problems);
               return info;
             };
             absl::StatusOr<GemmRunInfo> info = finish();
             LaunchDone done = std::move(queued->done);
             // The slot is free before the answer goes out: the client's
             // next product may need it.
             owned.reset();
             std::move(done)(std::move(info));
           }});
}

absl::StatusOr<bool> CudaBackend::AwaitClientStream(const GemmProblem& p) {
  if (p.stream_order == nullptr) return false;
  // A stream-ordered product waits for its client's stream before it takes
  // a slot: that stream may wait for an earlier product of the client's
  // process, which needs a slot too, as does the background tuner (which
  // takes them all). On the CPU until the stream gets there, or, where the
  // wait may go to the GPU, only until every earlier product of that
  // process is launched, whichever comes first: decided once, a product taken
  // while its predecessor was still on its way would wait on the CPU, and so,
  // one after another, would every product behind it.
  const GemmProblem* one[] = {&p};
  const LaunchOrder::Ticket& launch = p.stream_order->launch;
  const bool may_wait_on_gpu = MayWaitOnGpu(p);
  std::function<bool()> earlier_launched;
  if (may_wait_on_gpu) {
    earlier_launched = [&launch] { return launch.EarlierLaunched(); };
  }
  RETURN_IF_ERROR(WaitForClientStreams(one, earlier_launched));
  return may_wait_on_gpu && launch.EarlierLaunched();
}

bool CudaBackend::MayWaitOnGpu(const GemmProblem& p) const {
  return p.stream_order != nullptr && options_.stream_order_waits_on_gpu &&
         driver_api_.ok();
}

absl::StatusOr<GemmRunInfo> CudaBackend::RunOneOnSlot(const GemmProblem& p,
                                                      StreamSlot& slot,
                                                      bool wait_on_gpu) {
  if (p.stream_order == nullptr) {
    return RunDeviceOnSlot(p, slot, /*after_slot_work=*/false);
  }
  const GemmProblem* one[] = {&p};
  const LaunchOrder::Ticket& launch = p.stream_order->launch;
  // The signal right behind the product on the GPU, where the driver has
  // stream memory operations; from here once it is complete otherwise.
  ProductSchedule::AfterProduct signal;
  if (driver_api_.ok()) {
    signal = [&](cudaStream_t stream) {
      return QueueClientSignals(*driver_api_, one, stream);
    };
  }
  // Queued first: the gathers of strided operands read them too.
  if (wait_on_gpu) {
    RETURN_IF_ERROR(QueueClientWaits(*driver_api_, one, slot.stream.get()));
  }
  ProductSchedule::QueuedWait wait;
  wait.await = [&](const std::function<bool()>& done) {
    return AwaitQueuedWaits(one, done);
  };
  // Launched once queued, either way: the next product of the client may
  // then queue its wait on the GPU without waiting for this one to end.
  absl::StatusOr<GemmRunInfo> info = RunDeviceOnSlot(
      p, slot, /*after_slot_work=*/false, signal, wait_on_gpu ? &wait : nullptr,
      [&launch] { launch.MarkLaunched(); });
  launch.MarkLaunched();  // a failure before the launch
  if (!info.ok()) {
    // The slot goes back to the pool: its stream must not keep waiting for
    // a client stream that may never get there.
    if (wait_on_gpu) ReleaseQueuedWaits(one);
    return info.status();
  }
  StoreClientSignals(one);
  return info;
}

absl::StatusOr<GemmRunInfo> CudaBackend::RunBatch(
    absl::Span<const GemmProblem* const> problems, bool on_device) {
  if (problems.size() == 1) {
    return on_device ? RunDevice(*problems[0]) : RunHost(*problems[0]);
  }
  if (!on_device) {
    // Staged products: one pointer-array product, whose arrays RunHost
    // reads from host memory and stages like any operand.
    absl::StatusOr<CombinedProblem> combined =
        CombinedProblem::Combine(problems);
    if (!combined.ok()) return combined.status();
    return RunHost(combined->problem());
  }
  // A product with a wave of 128x128 tiles of its own keeps the GPU busy
  // alone: batching buys nothing (one pointer-array launch of two such
  // products is slower than the two back to back), so each runs as it
  // would unbatched (with the kernel tuned for it, waiting for its
  // client's stream as it would alone), one after the other.
  if (FillsDevice(*problems.front())) {
    for (const GemmProblem* p : problems) RETURN_IF_ERROR(ValidateForCuda(*p));
    GemmRunInfo total;
    for (const GemmProblem* p : problems) {
      ASSIGN_OR_RETURN(GemmRunInfo one, RunDevice(*p));
      total.kernel = one.kernel;
      total.kernel_seconds += one.kernel_seconds;
    }
    return total;
  }
  RETURN_IF_ERROR(WaitForClientStreams(problems));
  ASSIGN_OR_RETURN(CombinedProblem combined,
                   CombinedProblem::Combine(problems));
  RETURN_IF_ERROR(ValidateForCuda(combined.problem()));
  ASSIGN_OR_RETURN(StreamSlotLease lease, slots_->Acquire());
  ASSIGN_OR_RETURN(GemmRunInfo info, RunCombined(combined, lease.slot()));
  StoreClientSignals(problems);
  return info;
}

absl::StatusOr<GemmRunInfo> CudaBackend::RunCombined(
    const CombinedProblem& combined, StreamSlot& slot) {
  ASSIGN_OR_RETURN(const GemmProblem p, CopyPointerArrays(combined, slot));
  const void* shared_b = StackedB(combined);
  if (shared_b == nullptr) {
    return RunDeviceOnSlot(p, slot, /*after_slot_work=*/true);  // the arrays
  }
  ASSIGN_OR_RETURN(const GemmProblem stacked, QueueStackIn(p, shared_b, slot));
  // The scatter follows the product on the slot's stream, and the outputs
  // are complete when we return, as the contract says.
  ASSIGN_OR_RETURN(GemmRunInfo info,
                   RunDeviceOnSlot(stacked, slot, /*after_slot_work=*/true,
                                   [&](cudaStream_t slot_stream) {
                                     return QueueStackOut(p, slot, slot_stream);
                                   }));
  info.kernel = absl::StrCat(info.kernel, "+stacked");
  return info;
}

absl::StatusOr<GemmProblem> CudaBackend::CopyPointerArrays(
    const CombinedProblem& combined, StreamSlot& slot) {
  // The kernels read the pointer arrays on the device: copy all three into
  // the slot's buffer (from pageable memory the copy has consumed the host
  // arrays when the call returns).
  const size_t entries = combined.a_pointers().size();
  const size_t array_bytes = entries * sizeof(void*);
  RETURN_IF_ERROR(slot.pointer_arrays.Reserve(3 * array_bytes));
  std::vector<const void*> host(3 * entries);
  std::copy(combined.a_pointers().begin(), combined.a_pointers().end(),
            host.begin());
  std::copy(combined.b_pointers().begin(), combined.b_pointers().end(),
            host.begin() + entries);
  std::copy(combined.c_pointers().begin(), combined.c_pointers().end(),
            host.begin() + 2 * entries);
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(slot.pointer_arrays.data(), host.data(), 3 * array_bytes,
                      cudaMemcpyHostToDevice, slot.stream.get()),
      "cudaMemcpyAsync(pointer arrays)"));
  const auto* arrays =
      static_cast<const void* const*>(slot.pointer_arrays.data());
  GemmProblem p = combined.problem();
  p.a.pointers = arrays;
  p.b.pointers = arrays + entries;
  p.c.pointers = const_cast<void* const*>(arrays + 2 * entries);
  return p;
}

const void* CudaBackend::StackedB(const CombinedProblem& combined) {
  const GemmProblem& p = combined.problem();
  const std::vector<const void*>& bs = combined.b_pointers();
  const bool shared_b = std::all_of(
      bs.begin(), bs.end(), [&](const void* b) { return b == bs.front(); });
  // Stacking moves A and C twice more (gather, scatter) to read B once.
  if (shared_b && 2 * p.m * (p.k + p.n) <= p.k * p.n) return bs.front();
  return nullptr;
}

namespace {

// Entries a stacked product is padded to: its M (entries x m) is part of
// the selector's key, and a key per batch size would keep the GPU busy
// tuning. Powers of two up to 8, then multiples of 8; padding rows are
// computed and thrown away (rows of a product are independent).
int64_t StackedEntries(int64_t entries) {
  if (entries > 8) return (entries + 7) / 8 * 8;
  int64_t padded = 1;
  while (padded < entries) padded *= 2;
  return padded;
}

}  // namespace

absl::StatusOr<GemmProblem> CudaBackend::QueueStackIn(const GemmProblem& p,
                                                      const void* shared_b,
                                                      StreamSlot& slot) {
  cudaStream_t stream = slot.stream.get();
  const int64_t entries = p.batch;
  const int64_t rows = StackedEntries(entries) * p.m;
  const int c_element = static_cast<int>(DTypeSize(p.c_dtype));
  // The slot's staging buffers (kept between calls: stream-ordered
  // allocations went back to the driver at every synchronize, and mapping
  // them again cost more than the gather).
  RETURN_IF_ERROR(slot.a_buffer.Reserve(rows * p.k * 2));
  RETURN_IF_ERROR(slot.c_buffer.Reserve(rows * p.n * c_element));
  // Entry e's A becomes rows [e * m, (e + 1) * m) of one row-major matrix.
  RETURN_IF_ERROR(
      CopyMatrix({nullptr, p.a.pointers, p.a.strides, p.a.pointer_alignment},
                 {slot.a_buffer.data(), nullptr, {p.m * p.k, p.k, 1}}, entries,
                 p.m, p.k, 2, stream));
  if (p.beta != 0.0f) {
    RETURN_IF_ERROR(
        CopyMatrix({nullptr, const_cast<const void* const*>(p.c.pointers),
                    p.c.strides, p.c.pointer_alignment},
                   {slot.c_buffer.data(), nullptr, {p.m * p.n, p.n, 1}},
                   entries, p.m, p.n, c_element, stream));
  }
  GemmProblem stacked = p;
  stacked.batch = 1;
  stacked.m = rows;
  stacked.a = {.data = slot.a_buffer.data(), .strides = {0, p.k, 1}};
  stacked.b = {.data = shared_b,
               .strides = {0, p.b.strides.row, p.b.strides.col}};
  stacked.c = {.data = slot.c_buffer.data(), .strides = {0, p.n, 1}};
  return stacked;
}

absl::Status CudaBackend::QueueStackOut(const GemmProblem& p, StreamSlot& slot,
                                        cudaStream_t stream) {
  const int c_element = static_cast<int>(DTypeSize(p.c_dtype));
  return CopyMatrix({slot.c_buffer.data(), nullptr, {p.m * p.n, p.n, 1}},
                    {nullptr, p.c.pointers, p.c.strides, p.c.pointer_alignment},
                    p.batch, p.m, p.n, c_element, stream);
}

absl::StatusOr<GemmRunInfo> CudaBackend::RunDeviceOnSlot(
    const GemmProblem& p, StreamSlot& slot, bool after_slot_work,
    const ProductSchedule::AfterProduct& then,
    const ProductSchedule::QueuedWait* wait,
    const ProductSchedule::Queued& queued) {
  cudaStream_t stream = slot.stream.get();
  ASSIGN_OR_RETURN(KernelOperands operands, KernelOperands::Gather(p, stream));
  // The scatter of a gathered C, then the caller's work, behind the product.
  const ProductSchedule::AfterProduct after =
      [&](cudaStream_t slot_stream) -> absl::Status {
    RETURN_IF_ERROR(operands.ScatterC(slot_stream));
    return then ? then(slot_stream) : absl::OkStatus();
  };
  ASSIGN_OR_RETURN(
      GemmRunInfo info,
      schedule_->RunTimed(
          operands.problem(), slot, after_slot_work || operands.gathered(),
          operands.scatters_c() || then ? after : nullptr, wait, queued));
  // RunTimed waited for the kernel and what follows it; the temporaries
  // are freed in stream order, and waited for too.
  RETURN_IF_ERROR(operands.Release(stream));
  return info;
}

absl::StatusOr<std::vector<GemmRunInfo>> CudaBackend::RunList(
    const GemmList& list, bool on_device) {
  // Staged operands: one product after another, as RunHost stages them.
  if (!on_device) return GemmBackend::RunList(list, on_device);
  // Checked before any wait, with scratch at a stand-in address: the
  // checks need pointers to be set, not where they point.
  {
    const std::vector<GemmProblem> checked = WithScratch(
        list, reinterpret_cast<void*>(uintptr_t{kScratchAlignment}));
    for (size_t i = 0; i < checked.size(); ++i) {
      if (absl::Status status = ValidateForCuda(checked[i]); !status.ok()) {
        return InProduct(i, status);
      }
    }
  }
  // The list's stream order is handled as one product's (RunDevice): `head`
  // carries it for the client-stream helpers.
  GemmProblem head;
  head.stream_order = list.stream_order;
  absl::StatusOr<bool> wait_on_gpu = AwaitClientStream(head);
  if (!wait_on_gpu.ok()) {
    if (list.stream_order != nullptr) list.stream_order->launch.MarkLaunched();
    return wait_on_gpu.status();
  }
  absl::StatusOr<StreamSlotLease> lease = slots_->Acquire();
  absl::Status reserved =
      lease.ok() ? lease->slot().scratch.Reserve(list.scratch_bytes)
                 : lease.status();
  if (!reserved.ok()) {
    if (list.stream_order != nullptr) list.stream_order->launch.MarkLaunched();
    return reserved;
  }
  StreamSlot& slot = lease->slot();
  return RunListOnSlot(WithScratch(list, slot.scratch.data()), head, slot,
                       *wait_on_gpu);
}

absl::StatusOr<std::vector<GemmRunInfo>> CudaBackend::RunListOnSlot(
    const std::vector<GemmProblem>& products, const GemmProblem& head,
    StreamSlot& slot, bool wait_on_gpu) {
  const GemmProblem* one[] = {&head};
  const bool ordered = head.stream_order != nullptr;
  cudaStream_t stream = slot.stream.get();
  std::vector<KernelOperands> gathered;
  gathered.reserve(products.size());
  std::vector<GemmRunInfo> runs(products.size());
  // Product i with its gathers before and the scatter of its C after.
  auto queue_one = [&](size_t i) -> absl::Status {
    ASSIGN_OR_RETURN(KernelOperands operands,
                     KernelOperands::Gather(products[i], stream));
    gathered.push_back(std::move(operands));
    ASSIGN_OR_RETURN(runs[i].kernel,
                     schedule_->Queue(gathered.back().problem(), slot));
    return gathered.back().ScatterC(stream);
  };
  // Everything queued, in stream order: the wait for the client's stream,
  // the start event, each product with its gathers and scatter, the stop
  // event, the signal.
  auto queue = [&]() -> absl::Status {
    if (wait_on_gpu) {
      RETURN_IF_ERROR(QueueClientWaits(*driver_api_, one, stream));
    }
    RETURN_IF_ERROR(slot.start.Record(stream));
    for (size_t i = 0; i < products.size(); ++i) {
      if (absl::Status status = queue_one(i); !status.ok()) {
        return InProduct(i, status);
      }
    }
    RETURN_IF_ERROR(slot.stop.Record(stream));
    if (ordered && driver_api_.ok()) {
      RETURN_IF_ERROR(QueueClientSignals(*driver_api_, one, stream));
    }
    return absl::OkStatus();
  };
  absl::Status queued = queue();
  if (ordered) head.stream_order->launch.MarkLaunched();
  if (queued.ok() && wait_on_gpu) {
    queued = AwaitQueuedWaits(
        one, [stream] { return cudaStreamQuery(stream) != cudaErrorNotReady; });
  } else if (!queued.ok() && wait_on_gpu) {
    // The slot goes back to the pool: its stream must not keep waiting
    // for a client stream that may never get there.
    ReleaseQueuedWaits(one);
  }
  // Waits for the stream, and frees the gathers' temporaries.
  absl::Status synchronized = slot.stream.Synchronize();
  for (KernelOperands& operands : gathered) {
    synchronized.Update(operands.Release(stream));
  }
  RETURN_IF_ERROR(queued);
  RETURN_IF_ERROR(synchronized);
  ASSIGN_OR_RETURN(const double seconds,
                   CudaEvent::ElapsedSeconds(slot.start, slot.stop));
  const std::vector<double> shares = ShareByFlops(products, seconds);
  for (size_t i = 0; i < runs.size(); ++i) runs[i].kernel_seconds = shares[i];
  if (ordered) StoreClientSignals(one);
  return runs;
}

BackendGauges CudaBackend::Gauges() const {
  BackendGauges gauges;
  // cudaMemGetInfo reports on the calling thread's current device.
  absl::StatusOr<ScopedDevice> scoped = ScopedDevice::Create(options_.device);
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  if (scoped.ok() && cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    gauges.memory_used_bytes = static_cast<int64_t>(total_bytes - free_bytes);
    gauges.memory_total_bytes = static_cast<int64_t>(total_bytes);
  }
  gauges.tuned_shapes = static_cast<int64_t>(selector_->tuned_count());
  const GemmSelector::TuningCounts tunings = selector_->tuning_counts();
  gauges.tunings_succeeded = tunings.succeeded;
  gauges.tunings_failed = tunings.failed;
  absl::Duration polling;
  absl::Duration completing;
  for (const std::unique_ptr<CompletionPoller>& poller : completions_) {
    const CompletionPoller::BusyTime busy = poller->busy();
    polling += busy.polling;
    completing += busy.completing;
  }
  gauges.completion_polling_seconds = absl::ToDoubleSeconds(polling);
  gauges.completion_completing_seconds = absl::ToDoubleSeconds(completing);
  return gauges;
}

absl::StatusOr<std::unique_ptr<GemmBackend>> CreateCudaBackend(
    const CudaBackendOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> backend,
                   CudaBackend::Create(options));
  return std::unique_ptr<GemmBackend>(std::move(backend));
}

}  // namespace matmul::cuda
