#include "kernels/cuda/selector/gemm_selector.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/gemm/shape_name.h"
#include "common/status_macros.h"
#include "kernels/cuda/families/cublaslt_family.h"
#include "kernels/cuda/families/gemm_family_registry.h"
#include "kernels/cuda/families/run_choice.h"
#include "kernels/cuda/runtime/cuda_status.h"
#include "kernels/cuda/selector/internal/finalist_pick.h"
#include "kernels/cuda/selector/internal/timing_operands.h"

namespace matmul::cuda {

static_assert(SelectorOptions::kDefaultCublasLtTopK ==
              CublasLtGemm::kDefaultTopK);

absl::StatusOr<std::unique_ptr<GemmSelector>> GemmSelector::Create(
    int device, const SelectorOptions& options) {
  if (options.max_shape_choices < 1 || options.max_queued_tunings < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the selector keeps at least one shape and queues at least one "
        "tuning; max_shape_choices is ",
        options.max_shape_choices, ", max_queued_tunings ",
        options.max_queued_tunings));
  }
  ASSIGN_OR_RETURN(ScopedDevice scoped, ScopedDevice::Create(device));
  FamilySettings settings;
  settings.device = device;
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
  RETURN_IF_ERROR(CudaStatus(cudaGetDeviceProperties(&prop, device),
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
      HasBuiltInFamily("mma") ? "|mma" : "|nomma",
      HasBuiltInFamily("hopper") ? "|hopper" : "");
  auto selector = std::unique_ptr<GemmSelector>(
      new GemmSelector(device, options, max_shared, std::move(environment),
                       std::move(families)));
  if (!options.tuning_cache.empty()) {
    absl::Status loaded = selector->LoadCache();
    // A damaged or foreign cache costs a re-tune, not the service.
    if (!loaded.ok()) {
      std::fprintf(stderr, "GemmSelector: ignoring cache %s: %s\n",
                   options.tuning_cache.c_str(), loaded.ToString().c_str());
    }
  }
  if (options.background_tuning) {
    GemmSelector* raw = selector.get();
    selector->tuner_ = std::make_unique<BackgroundTuner>(
        device, options.max_queued_tunings,
        [raw](const GemmProblem& canonical) {
          return raw->Tune(canonical).status();
        });
  }
  return selector;
}

GemmSelector::GemmSelector(int device, const SelectorOptions& options,
                           int max_shared_bytes, std::string environment,
                           std::vector<std::unique_ptr<GemmFamily>> families)
    : device_(device),
      options_(options),
      max_shared_bytes_(max_shared_bytes),
      environment_(environment),
      families_(std::move(families)),
      cache_(options.tuning_cache, std::move(environment),
             options.max_shape_choices),
      choices_(options.max_shape_choices) {}

GemmSelector::~GemmSelector() {
  // Stop the worker before the families and choices it uses go.
  tuner_.reset();
}

bool GemmSelector::Enabled(const GemmFamily& family) const {
  if (family.name() == "mma" || family.name() == "hopper") {
    return options_.use_own_kernels;
  }
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

TimingEffort GemmSelector::Effort() const {
  TimingEffort effort;
  effort.warmup_iterations = options_.warmup_iterations;
  effort.min_iterations = options_.min_iterations;
  effort.max_iterations = options_.max_iterations;
  effort.target_seconds = options_.target_seconds;
  return effort;
}

size_t GemmSelector::tuned_count() const {
  absl::MutexLock lock(&mu_);
  size_t count = 0;
  choices_.ForEach([&count](const std::string&, const KernelChoice& choice) {
    count += choice.tuned;
  });
  return count;
}

GemmSelector::TuningCounts GemmSelector::tuning_counts() const {
  return tuner_ != nullptr ? tuner_->counts() : TuningCounts{};
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
  // cuBLASLt's own top heuristic pick is a good default for any shape: its
  // family is asked first, then the others in registry order.
  std::vector<GemmFamily*> order;
  for (const auto& family : families_) {
    if (family->name() == "cublaslt") order.push_back(family.get());
  }
  for (const auto& family : families_) {
    if (family->name() != "cublaslt") order.push_back(family.get());
  }
  std::string reasons;
  for (GemmFamily* family : order) {
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
    absl::MutexLock lock(&mu_);
    if (const KernelChoice* held = choices_.Find(key)) return *held;
  }
  ASSIGN_OR_RETURN(KernelChoice choice, Heuristic(problem));
  // Queued and stored under one lock, so that the tuned choice (stored
  // under it too) cannot come first and be overwritten.
  absl::MutexLock lock(&mu_);
  if (const KernelChoice* held = choices_.Find(key)) return *held;
  // While the tuning queue is full a new key keeps nothing: it asks the
  // heuristic again, and the queue again, when next met.
  if (tuner_ == nullptr || tuner_->Enqueue(key, CanonicalProblem(problem))) {
    choices_.Put(key, choice);
  }
  return choice;
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
  ASSIGN_OR_RETURN(ScopedDevice scoped, ScopedDevice::Create(device_));
  ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create());
  ASSIGN_OR_RETURN(TimingOperands data,
                   TimingOperands::Create(canonical, device_, stream.get()));
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
  CandidateTimer timer(stream.get());
  for (CandidateTiming& t : timings) {
    if (!t.status.ok()) continue;
    int round = 0;
    absl::StatusOr<std::vector<double>> seconds = timer.TimeAdaptive(
        [&](cudaStream_t s) {
          return RunChoice(t.choice, data.problem(round++), s, workspace);
        },
        Effort());
    if (!seconds.ok()) {
      t.status = seconds.status();
      // A launch error may be sticky; surface it rather than time garbage.
      RETURN_IF_ERROR(CudaStatus(cudaDeviceSynchronize(), "after candidate"));
      continue;
    }
    const RunTimes times = Summarize(*std::move(seconds));
    t.iterations = times.iterations;
    t.min_seconds = times.min_seconds;
    t.max_seconds = times.max_seconds;
    t.median_seconds = times.median_seconds;
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
  ASSIGN_OR_RETURN(ScopedDevice scoped, ScopedDevice::Create(device_));
  ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create());
  ASSIGN_OR_RETURN(TimingOperands data,
                   TimingOperands::Create(canonical, device_, stream.get()));
  DeviceBuffer workspace;
  CandidateTimer timer(stream.get());
  // One launch per choice, all rotating through the same operand copies.
  int round = 0;
  std::vector<TimedLaunch> launches;
  for (const KernelChoice& choice : choices) {
    launches.push_back([&, choice](cudaStream_t s) {
      return RunChoice(choice, data.problem(round++), s, workspace);
    });
  }
  // Warm every choice up and estimate the slowest one's time.
  double slowest = 1e-7;
  for (size_t c = 0; c < choices.size(); ++c) {
    timings[c].choice = choices[c];
    RETURN_IF_ERROR(CanRun(choices[c], data.problem(0)));
    ASSIGN_OR_RETURN(
        std::vector<double> probe,
        timer.TimeBurst(launches[c], options_.warmup_iterations, 1));
    slowest = std::max(slowest, probe[0]);
  }
  const int iterations = static_cast<int>(
      std::clamp<double>(std::ceil(options_.target_seconds / slowest),
                         options_.min_iterations, options_.max_iterations));
  std::mt19937 shuffler(12345);
  ASSIGN_OR_RETURN(std::vector<std::vector<double>> seconds,
                   timer.TimeInterleaved(launches, iterations, &shuffler));
  for (size_t c = 0; c < choices.size(); ++c) {
    const RunTimes times = Summarize(std::move(seconds[c]));
    CandidateTiming& t = timings[c];
    t.iterations = times.iterations;
    t.min_seconds = times.min_seconds;
    t.max_seconds = times.max_seconds;
    t.median_seconds = times.median_seconds;
  }
  return timings;
}

absl::StatusOr<KernelChoice> GemmSelector::Tune(
    const GemmProblem& problem, std::vector<CandidateTiming>* all_timings) {
  std::vector<CandidateTiming> timings;
  std::vector<CandidateTiming> final_timings;
  {
    absl::MutexLock tune_lock(&tune_mu_);
    ASSIGN_OR_RETURN(timings, TimeCandidates(problem));
    // Candidates timed one after another meet the GPU in different states
    // (a cold GPU runs faster until its power cap bites), which can favour
    // whichever went first. The best of each group runs again, interleaved,
    // and the pick is made on those times.
    std::map<std::string, const CandidateTiming*> group_best;
    for (const CandidateTiming& t : timings) {
      if (!t.status.ok() || t.iterations == 0) continue;
      const CandidateTiming*& best = group_best[t.group];
      if (best == nullptr || t.median_seconds < best->median_seconds) best = &t;
    }
    if (group_best.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("no kernel could run ", Key(problem)));
    }
    std::vector<KernelChoice> finalists;
    for (const auto& [group, best] : group_best) {
      finalists.push_back(best->choice);
    }
    ASSIGN_OR_RETURN(final_timings, TimeChoices(problem, finalists));
  }
  if (all_timings != nullptr) *all_timings = timings;
  std::vector<FinalistTime> finalist_times;
  for (const CandidateTiming& t : final_timings) {
    finalist_times.push_back(
        {.cublaslt = t.choice.family->name() == CublasLtFamily::kName,
         .median_seconds = t.median_seconds});
  }
  const CandidateTiming* best =
      &final_timings[PickFinalist(finalist_times, options_.own_kernel_margin)];
  KernelChoice choice = best->choice;
  choice.tuned = true;
  choice.median_seconds = best->median_seconds;
  {
    absl::MutexLock lock(&mu_);
    choices_.Put(Key(problem), choice);
  }
  if (!options_.tuning_cache.empty()) RETURN_IF_ERROR(SaveCache());
  return choice;
}

void GemmSelector::SetTuningGuard(
    std::function<std::shared_ptr<void>()> guard) {
  if (tuner_ != nullptr) tuner_->SetGuard(std::move(guard));
}

void GemmSelector::WaitForBackgroundTuning() {
  if (tuner_ != nullptr) tuner_->WaitUntilIdle();
}

absl::Status GemmSelector::LoadCache() {
  ASSIGN_OR_RETURN(std::vector<TunedEntry> entries, cache_.Load());
  absl::MutexLock lock(&mu_);
  for (const TunedEntry& entry : entries) {
    absl::StatusOr<KernelChoice> choice = ChoiceFromName(entry.kernel);
    // Kernels that this build no longer has are re-tuned when next seen.
    if (!choice.ok()) continue;
    choice->tuned = true;
    choice->median_seconds = entry.median_seconds;
    choices_.Put(entry.key, *choice);
  }
  return absl::OkStatus();
}

absl::Status GemmSelector::SaveCache() {
  if (options_.tuning_cache.empty()) return absl::OkStatus();
  std::vector<TunedEntry> entries;
  {
    absl::MutexLock lock(&mu_);
    choices_.ForEach(
        [&entries](const std::string& key, const KernelChoice& choice) {
          if (choice.tuned) {
            entries.push_back({key, choice.name, choice.median_seconds});
          }
        });
  }
  return cache_.Save(max_shared_bytes_, entries);
}

}  // namespace matmul::cuda
