#include "kernels/cuda/gemm_selector.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/gemm/matrix_layout.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_ops.h"
#include "kernels/cuda/gemm_family_registry.h"
#include "kernels/gemm_batch.h"
#include "nlohmann/json.hpp"

namespace matmul::cuda {
namespace {

constexpr int kCacheFormat = 1;

// What a canonical problem's a/b/c.pointers point at to say "pointer-array
// mode" (the batcher's launches): the arrays themselves are built by
// TimingData. Never dereferenced.
void* const kPointerArrayMode[1] = {nullptr};

bool PointerArrays(const GemmProblem& p) { return p.a.pointers != nullptr; }

bool Broadcast(const GemmProblem& p, const InputMatrix& x) {
  return p.batch > 1 && x.pointers == nullptr && x.strides.batch == 0;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// Several copies of the key's operands on the device, filled with random
// non-zero values, so consecutive timed runs read different memory when one
// copy would stay resident in L2.
class TimingData {
 public:
  static absl::StatusOr<TimingData> Create(const GemmProblem& canonical,
                                           int device, cudaStream_t stream) {
    TimingData data;
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
    const int64_t wanted =
        (3 * int64_t{l2_bytes} + copy_bytes - 1) / copy_bytes;
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
      if (PointerArrays(canonical)) {
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
        RETURN_IF_ERROR(CudaStatus(
            cudaMemcpy(arrays.data(), host.data(), host.size() * sizeof(void*),
                       cudaMemcpyHostToDevice),
            "cudaMemcpy(pointer arrays)"));
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

  const GemmProblem& problem(int i) const {
    return problems_[i % problems_.size()];
  }

 private:
  std::vector<DeviceBuffer> buffers_;
  std::vector<GemmProblem> problems_;
};

absl::StatusOr<std::vector<CudaEvent>> MakeEvents(int count) {
  std::vector<CudaEvent> events;
  events.reserve(count);
  for (int i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(CudaEvent event, CudaEvent::Create());
    events.push_back(std::move(event));
  }
  return events;
}

// Batch sizes share a key by the power of two at or above them: the dynamic
// batcher produces every size up to its maximum, and tuning each one would
// keep the GPU busy with timing instead of serving.
int64_t BatchBucket(int64_t batch) {
  int64_t bucket = 1;
  while (bucket < batch) bucket *= 2;
  return bucket;
}

}  // namespace

GemmProblem CanonicalProblem(const GemmProblem& p) {
  GemmProblem c;
  c.batch = BatchBucket(p.batch);
  c.m = p.m;
  c.n = p.n;
  c.k = p.k;
  c.c_dtype = p.c_dtype;
  if (LayoutTagA(p) == 'T') {
    c.a.strides = {p.m * p.k, 1, p.m};
  } else {
    c.a.strides = {p.m * p.k, p.k, 1};
  }
  if (LayoutTagB(p) == 'T') {
    c.b.strides = {p.k * p.n, 1, p.k};
  } else {
    c.b.strides = {p.k * p.n, p.n, 1};
  }
  if (Broadcast(p, p.a)) c.a.strides.batch = 0;
  if (Broadcast(p, p.b)) c.b.strides.batch = 0;
  c.c.strides = {p.m * p.n, p.n, 1};
  // Pointer-array launches are tuned as such: kernels (cuBLASLt's above
  // all) differ between the two modes, and so do their candidate lists.
  if (PointerArrays(p)) {
    c.a.pointers = kPointerArrayMode;
    c.b.pointers = kPointerArrayMode;
    c.c.pointers = kPointerArrayMode;
  }
  return c;
}

std::string GemmSelector::Key(const GemmProblem& p) {
  std::string key =
      absl::StrCat(p.m, "x", p.n, "x", p.k, ":", std::string(1, LayoutTagA(p)),
                   std::string(1, LayoutTagB(p)), ":", DTypeName(p.c_dtype),
                   ":b", BatchBucket(p.batch));
  if (Broadcast(p, p.a)) absl::StrAppend(&key, ":bcastA");
  if (Broadcast(p, p.b)) absl::StrAppend(&key, ":bcastB");
  if (PointerArrays(p)) absl::StrAppend(&key, ":ptr");
  return key;
}

absl::StatusOr<std::unique_ptr<GemmSelector>> GemmSelector::Create(
    const SelectorOptions& options) {
  ASSIGN_OR_RETURN(ScopedDevice scoped, ScopedDevice::Create(options.device));
  FamilySettings settings;
  settings.device = options.device;
  settings.max_shared_bytes = options.max_shared_bytes;
  settings.cublaslt_top_k = options.cublaslt_top_k;
  ASSIGN_OR_RETURN(std::vector<std::unique_ptr<GemmFamily>> families,
                   CreateFamilies(settings));
  int max_shared = options.max_shared_bytes;
  if (max_shared <= 0) {
    for (const auto& family : families) {
      max_shared = std::max(max_shared, family->shared_bytes_limit());
    }
  }
  cudaDeviceProp prop;
  RETURN_IF_ERROR(CudaStatus(cudaGetDeviceProperties(&prop, options.device),
                             "cudaGetDeviceProperties"));
  int driver = 0, runtime = 0;
  RETURN_IF_ERROR(
      CudaStatus(cudaDriverGetVersion(&driver), "cudaDriverGetVersion"));
  RETURN_IF_ERROR(
      CudaStatus(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion"));
  std::string environment = absl::StrCat(
      prop.name, "|cc", prop.major, ".", prop.minor, "|driver", driver,
      "|cudart", runtime, "|cublaslt", CublasLtGemm::Version(),
      // The cache key says whether the own kernels were there, as it
      // always has: a cache tuned with them is not one tuned without.
      HasBuiltInFamily("mma") ? "|mma" : "|nomma");
  auto selector = std::unique_ptr<GemmSelector>(new GemmSelector(
      options, max_shared, std::move(environment), std::move(families)));
  if (!options.cache_path.empty()) {
    absl::Status loaded = selector->LoadCache();
    // A damaged or foreign cache costs a re-tune, not the service.
    if (!loaded.ok()) {
      std::fprintf(stderr, "GemmSelector: ignoring cache %s: %s\n",
                   options.cache_path.c_str(), loaded.ToString().c_str());
    }
  }
  if (options.background_tuning) {
    selector->worker_ = std::thread([s = selector.get()] { s->WorkerLoop(); });
  }
  return selector;
}

GemmSelector::GemmSelector(const SelectorOptions& options, int max_shared_bytes,
                           std::string environment,
                           std::vector<std::unique_ptr<GemmFamily>> families)
    : options_(options),
      max_shared_bytes_(max_shared_bytes),
      environment_(std::move(environment)),
      families_(std::move(families)) {}

bool GemmSelector::Enabled(const GemmFamily& family) const {
  if (family.name() == "mma") return options_.use_own_kernels;
  if (family.name() == "cublaslt") return options_.use_cublaslt;
  return true;
}

size_t GemmSelector::max_workspace_bytes() const {
  size_t bytes = 0;
  for (const auto& family : families_) {
    bytes = std::max(bytes, family->MaxWorkspaceBytes());
  }
  return bytes;
}

GemmSelector::~GemmSelector() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    queue_.clear();
  }
  work_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

size_t GemmSelector::tuned_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t count = 0;
  for (const auto& [key, choice] : choices_) count += choice.tuned;
  return count;
}

absl::StatusOr<KernelChoice> GemmSelector::ChoiceFromName(
    const std::string& name) const {
  for (const auto& family : families_) {
    absl::StatusOr<KernelChoice> choice = family->FromName(name);
    if (choice.ok() || !absl::IsNotFound(choice.status())) return choice;
  }
  return absl::NotFoundError(absl::StrCat("unknown kernel ", name));
}

absl::Status GemmSelector::CanRun(const KernelChoice& choice,
                                  const GemmProblem& problem) {
  if (!Enabled(*choice.family)) {
    return absl::FailedPreconditionError(
        absl::StrCat(choice.family->name(), " disabled"));
  }
  return choice.family->CanImplement(choice, problem);
}

absl::StatusOr<KernelChoice> GemmSelector::Heuristic(
    const GemmProblem& problem) {
  // The first family, in order of preference, that offers a pick.
  std::string reasons;
  for (const auto& family : families_) {
    absl::Status why = absl::FailedPreconditionError("disabled");
    if (Enabled(*family)) {
      absl::StatusOr<KernelChoice> choice = family->Heuristic(problem);
      if (choice.ok()) return choice;
      why = choice.status();
    }
    absl::StrAppend(&reasons, "; ", family->name(), ": ", why.message());
  }
  return absl::InvalidArgumentError(
      absl::StrCat("no kernel can run ", ShapeName(problem), reasons));
}

absl::StatusOr<KernelChoice> GemmSelector::Choose(const GemmProblem& problem) {
  const std::string key = Key(problem);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = choices_.find(key);
    if (it != choices_.end()) return it->second;
  }
  ASSIGN_OR_RETURN(KernelChoice choice, Heuristic(problem));
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = choices_.emplace(key, choice);
  if (inserted && options_.background_tuning && !stopping_ &&
      queued_keys_.insert(key).second) {
    queue_.push_back(CanonicalProblem(problem));
    work_cv_.notify_one();
  }
  return it->second;
}

absl::Status GemmSelector::RunChoice(const KernelChoice& choice,
                                     const GemmProblem& problem,
                                     cudaStream_t stream,
                                     DeviceBuffer& workspace) {
  GemmFamily& family = *choice.family;
  ASSIGN_OR_RETURN(size_t bytes, family.WorkspaceBytes(choice, problem));
  RETURN_IF_ERROR(workspace.Reserve(bytes));
  return family.Run(choice, problem, stream, workspace.data(),
                    workspace.size());
}

absl::StatusOr<KernelChoice> GemmSelector::Run(const GemmProblem& problem,
                                               cudaStream_t stream,
                                               DeviceBuffer& workspace) {
  ASSIGN_OR_RETURN(KernelChoice choice, Resolve(problem));
  RETURN_IF_ERROR(RunChoice(choice, problem, stream, workspace));
  return choice;
}

absl::StatusOr<KernelChoice> GemmSelector::Resolve(const GemmProblem& problem) {
  ASSIGN_OR_RETURN(KernelChoice choice, Choose(problem));
  // CanRun also builds (and caches) the cuBLASLt plan, so a launch right
  // after this does no host-side set-up.
  if (!CanRun(choice, problem).ok()) {
    ASSIGN_OR_RETURN(choice, Heuristic(problem));
  }
  return choice;
}

absl::StatusOr<std::vector<CandidateTiming>> GemmSelector::TimeCandidates(
    const GemmProblem& problem) {
  const GemmProblem canonical = CanonicalProblem(problem);
  ASSIGN_OR_RETURN(ScopedDevice scoped, ScopedDevice::Create(options_.device));
  ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create());
  ASSIGN_OR_RETURN(
      TimingData data,
      TimingData::Create(canonical, options_.device, stream.get()));
  // Candidates are checked against a real instance: kernels reject null
  // pointers, and alignment decides some of them.
  const GemmProblem& probe = data.problem(0);
  std::vector<CandidateTiming> timings;
  for (const auto& family : families_) {
    if (!Enabled(*family)) continue;
    for (GemmCandidate& c : family->Candidates(probe)) {
      CandidateTiming t;
      t.choice = std::move(c.choice);
      t.group = std::move(c.group);
      t.shared_bytes = c.shared_bytes;
      t.fits_spark = c.fits_spark;
      t.status = std::move(c.status);
      timings.push_back(std::move(t));
    }
  }
  DeviceBuffer workspace;
  ASSIGN_OR_RETURN(std::vector<CudaEvent> events,
                   MakeEvents(2 * options_.max_iterations + 2));
  for (CandidateTiming& t : timings) {
    if (!t.status.ok()) continue;
    // Warm-up, then a rough estimate that sets the iteration count.
    int round = 0;
    absl::Status status;
    for (int i = 0; i < options_.warmup_iterations && status.ok(); ++i) {
      status =
          RunChoice(t.choice, data.problem(round++), stream.get(), workspace);
    }
    if (status.ok()) status = events[0].Record(stream.get());
    for (int i = 0; i < 3 && status.ok(); ++i) {
      status =
          RunChoice(t.choice, data.problem(round++), stream.get(), workspace);
    }
    if (status.ok()) status = events[1].Record(stream.get());
    if (status.ok()) status = stream.Synchronize();
    if (!status.ok()) {
      t.status = status;
      // A launch error may be sticky; surface it rather than time garbage.
      RETURN_IF_ERROR(CudaStatus(cudaDeviceSynchronize(), "after candidate"));
      continue;
    }
    ASSIGN_OR_RETURN(double estimate,
                     CudaEvent::ElapsedSeconds(events[0], events[1]));
    estimate = std::max(estimate / 3, 1e-7);
    const int iterations = static_cast<int>(
        std::clamp<double>(std::ceil(options_.target_seconds / estimate),
                           options_.min_iterations, options_.max_iterations));
    for (int i = 0; i < iterations && status.ok(); ++i) {
      status = events[2 + 2 * i].Record(stream.get());
      if (status.ok()) {
        status =
            RunChoice(t.choice, data.problem(round++), stream.get(), workspace);
      }
      if (status.ok()) status = events[3 + 2 * i].Record(stream.get());
    }
    if (status.ok()) status = stream.Synchronize();
    if (!status.ok()) {
      t.status = status;
      continue;
    }
    std::vector<double> seconds(iterations);
    for (int i = 0; i < iterations; ++i) {
      ASSIGN_OR_RETURN(seconds[i], CudaEvent::ElapsedSeconds(
                                       events[2 + 2 * i], events[3 + 2 * i]));
    }
    t.iterations = iterations;
    t.min_seconds = *std::min_element(seconds.begin(), seconds.end());
    t.max_seconds = *std::max_element(seconds.begin(), seconds.end());
    t.median_seconds = Median(std::move(seconds));
    t.choice.tuned = true;
    t.choice.median_seconds = t.median_seconds;
  }
  return timings;
}

absl::StatusOr<std::vector<CandidateTiming>> GemmSelector::TimeChoices(
    const GemmProblem& problem, const std::vector<KernelChoice>& choices) {
  const GemmProblem canonical = CanonicalProblem(problem);
  std::vector<CandidateTiming> timings(choices.size());
  if (choices.empty()) return timings;
  ASSIGN_OR_RETURN(ScopedDevice scoped, ScopedDevice::Create(options_.device));
  ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create());
  ASSIGN_OR_RETURN(
      TimingData data,
      TimingData::Create(canonical, options_.device, stream.get()));
  DeviceBuffer workspace;
  int round = 0;
  // Warm every choice up and estimate the slowest one's time.
  ASSIGN_OR_RETURN(std::vector<CudaEvent> probe, MakeEvents(2));
  double slowest = 1e-7;
  for (size_t c = 0; c < choices.size(); ++c) {
    timings[c].choice = choices[c];
    RETURN_IF_ERROR(CanRun(choices[c], data.problem(0)));
    for (int i = 0; i < options_.warmup_iterations; ++i) {
      RETURN_IF_ERROR(RunChoice(choices[c], data.problem(round++), stream.get(),
                                workspace));
    }
    RETURN_IF_ERROR(probe[0].Record(stream.get()));
    RETURN_IF_ERROR(
        RunChoice(choices[c], data.problem(round++), stream.get(), workspace));
    RETURN_IF_ERROR(probe[1].Record(stream.get()));
    RETURN_IF_ERROR(stream.Synchronize());
    ASSIGN_OR_RETURN(double t, CudaEvent::ElapsedSeconds(probe[0], probe[1]));
    slowest = std::max(slowest, t);
  }
  const int iterations = static_cast<int>(
      std::clamp<double>(std::ceil(options_.target_seconds / slowest),
                         options_.min_iterations, options_.max_iterations));
  std::vector<std::vector<CudaEvent>> events;
  for (size_t c = 0; c < choices.size(); ++c) {
    ASSIGN_OR_RETURN(std::vector<CudaEvent> e, MakeEvents(2 * iterations));
    events.push_back(std::move(e));
  }
  std::vector<size_t> order(choices.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::mt19937 shuffler(12345);
  for (int i = 0; i < iterations; ++i) {
    // A fresh random order each round: a kernel's time depends a little
    // (0.5-2% on an H200) on what ran just before it (clocks, power), and
    // any fixed or cyclic order hands that bias to some choice.
    std::shuffle(order.begin(), order.end(), shuffler);
    for (const size_t c : order) {
      RETURN_IF_ERROR(events[c][2 * i].Record(stream.get()));
      RETURN_IF_ERROR(RunChoice(choices[c], data.problem(round++), stream.get(),
                                workspace));
      RETURN_IF_ERROR(events[c][2 * i + 1].Record(stream.get()));
    }
  }
  RETURN_IF_ERROR(stream.Synchronize());
  for (size_t c = 0; c < choices.size(); ++c) {
    std::vector<double> seconds(iterations);
    for (int i = 0; i < iterations; ++i) {
      ASSIGN_OR_RETURN(seconds[i], CudaEvent::ElapsedSeconds(
                                       events[c][2 * i], events[c][2 * i + 1]));
    }
    CandidateTiming& t = timings[c];
    t.iterations = iterations;
    t.min_seconds = *std::min_element(seconds.begin(), seconds.end());
    t.max_seconds = *std::max_element(seconds.begin(), seconds.end());
    t.median_seconds = Median(std::move(seconds));
  }
  return timings;
}

absl::StatusOr<KernelChoice> GemmSelector::Tune(
    const GemmProblem& problem, std::vector<CandidateTiming>* all_timings) {
  std::vector<CandidateTiming> timings;
  {
    std::lock_guard<std::mutex> tune_lock(tune_mu_);
    ASSIGN_OR_RETURN(timings, TimeCandidates(problem));
  }
  if (all_timings != nullptr) *all_timings = timings;
  const CandidateTiming* best = nullptr;
  for (const CandidateTiming& t : timings) {
    if (!t.status.ok() || t.iterations == 0) continue;
    if (best == nullptr || t.median_seconds < best->median_seconds) best = &t;
  }
  if (best == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("no kernel could run ", Key(problem)));
  }
  KernelChoice choice = best->choice;
  {
    std::lock_guard<std::mutex> lock(mu_);
    choices_[Key(problem)] = choice;
  }
  if (!options_.cache_path.empty()) RETURN_IF_ERROR(SaveCache());
  return choice;
}

void GemmSelector::SetTuningGuard(
    std::function<std::shared_ptr<void>()> guard) {
  std::lock_guard<std::mutex> lock(mu_);
  tuning_guard_ = std::move(guard);
}

void GemmSelector::WorkerLoop() {
  if (!CudaStatus(cudaSetDevice(options_.device), "cudaSetDevice").ok()) {
    return;
  }
  while (true) {
    GemmProblem problem;
    std::function<std::shared_ptr<void>()> guard;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) break;
      problem = queue_.front();
      queue_.pop_front();
      worker_busy_ = true;
      guard = tuning_guard_;
    }
    absl::StatusOr<KernelChoice> tuned;
    {
      std::shared_ptr<void> held = guard ? guard() : nullptr;
      tuned = Tune(problem);
    }
    (tuned.ok() ? tunings_succeeded_ : tunings_failed_)
        .fetch_add(1, std::memory_order_relaxed);
    if (!tuned.ok()) {
      std::fprintf(stderr, "GemmSelector: background tuning of %s failed: %s\n",
                   Key(problem).c_str(), tuned.status().ToString().c_str());
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      worker_busy_ = false;
      queued_keys_.erase(Key(problem));
    }
    idle_cv_.notify_all();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    worker_busy_ = false;
  }
  idle_cv_.notify_all();
}

void GemmSelector::WaitForBackgroundTuning() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] {
    return stopping_ || !worker_.joinable() ||
           (queue_.empty() && !worker_busy_);
  });
}

absl::Status GemmSelector::LoadCache() {
  std::ifstream in(options_.cache_path);
  if (!in) return absl::OkStatus();  // no file yet
  nlohmann::json root = nlohmann::json::parse(in, nullptr, false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::DataLossError("not a JSON object");
  }
  if (root.value("format", 0) != kCacheFormat) {
    return absl::FailedPreconditionError("unknown cache format");
  }
  const auto& envs = root.value("environments", nlohmann::json::object());
  auto env = envs.find(environment_);
  if (env == envs.end() || !env->is_object()) return absl::OkStatus();
  const auto& entries = env->value("choices", nlohmann::json::object());
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = entries.begin(); it != entries.end(); ++it) {
    if (!it->is_object()) continue;
    auto choice = ChoiceFromName(it->value("kernel", std::string()));
    // Kernels that this build no longer has are re-tuned when next seen.
    if (!choice.ok()) continue;
    choice->tuned = true;
    choice->median_seconds = it->value("median_seconds", 0.0);
    choices_[it.key()] = *choice;
  }
  return absl::OkStatus();
}

absl::Status GemmSelector::SaveCache() {
  if (options_.cache_path.empty()) return absl::OkStatus();
  std::lock_guard<std::mutex> file_lock(file_mu_);
  nlohmann::json root = nlohmann::json::object();
  {
    // Keep other environments' sections (another GPU, another driver).
    std::ifstream in(options_.cache_path);
    if (in) {
      nlohmann::json existing = nlohmann::json::parse(in, nullptr, false);
      if (!existing.is_discarded() && existing.is_object() &&
          existing.value("format", 0) == kCacheFormat) {
        root = std::move(existing);
      }
    }
  }
  root["format"] = kCacheFormat;
  if (!root.contains("environments") || !root["environments"].is_object()) {
    root["environments"] = nlohmann::json::object();
  }
  nlohmann::json& env = root["environments"][environment_];
  if (!env.is_object()) env = nlohmann::json::object();
  if (!env.contains("choices") || !env["choices"].is_object()) {
    env["choices"] = nlohmann::json::object();
  }
  env["max_shared_bytes"] = max_shared_bytes_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, choice] : choices_) {
      if (!choice.tuned) continue;
      nlohmann::json& entry = env["choices"][key];
      // Keep the date of an unchanged entry: it says when it was measured.
      if (entry.is_object() && entry.value("kernel", "") == choice.name &&
          entry.value("median_seconds", 0.0) == choice.median_seconds) {
        continue;
      }
      entry = {
          {"kernel", choice.name},
          {"median_seconds", choice.median_seconds},
          {"tuned_at", absl::FormatTime(absl::Now())},
      };
    }
  }
  // Write a sibling file and rename it over the cache, so a reader (or a
  // crash) never sees half a file.
  const std::string tmp =
      absl::StrCat(options_.cache_path, ".tmp.", static_cast<long>(getpid()));
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot write tuning cache ", tmp));
    }
    out << root.dump(2) << "\n";
    if (!out.good()) {
      return absl::DataLossError(absl::StrCat("write failed: ", tmp));
    }
  }
  std::error_code error;
  std::filesystem::rename(tmp, options_.cache_path, error);
  if (error) {
    return absl::PermissionDeniedError(absl::StrCat("cannot rename ", tmp,
                                                    " to ", options_.cache_path,
                                                    ": ", error.message()));
  }
  return absl::OkStatus();
}

}  // namespace matmul::cuda
