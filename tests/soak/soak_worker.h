// One soak client: a thread's own channel, session, shm region and request
// ring, and one method per scenario (checked products in soak_worker.cc,
// refused and abandoned calls in soak_refusals.cc, things taken away from
// products in flight in soak_disruptions.cc). Each step draws a scenario from
// the enabled mix, runs it, and tallies every call's outcome; products answered
// OK are checked against the FP64 reference.
#ifndef MATMUL_TESTS_SOAK_SOAK_WORKER_H_
#define MATMUL_TESTS_SOAK_SOAK_WORKER_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/regions/cuda_memory.h"
#include "client/regions/region_request_builder.h"
#include "client/regions/registered_region.h"
#include "client/regions/shared_memory_segment.h"
#include "client/request_builder.h"
#include "client/ring/request_ring.h"
#include "client/session.h"
#include "client/stream_order/stream_ordered_calls.h"
#include "matmul/v1/matmul.pb.h"
#include "tests/soak/soak_scenarios.h"
#include "tests/soak/soak_tally.h"

namespace matmul::soak {

struct WorkerOptions {
  std::string target;
  std::string shm_prefix = "matmul";
  // Checked products draw M, N and K from [1, max_dim]; cancel and
  // deadline use up to 3 * max_dim, so that they are still running when
  // the cancel or the deadline comes.
  int64_t max_dim = 96;
  // The daemon's --max_message_bytes (from GetServerInfo).
  int64_t server_max_message_bytes = 0;
  // Prebuilt request just over the daemon's limit; null: no oversized
  // requests (the oversized answer is still tried).
  std::shared_ptr<const v1::MatmulRequest> oversized_request;
  // The holder binary that kill spawns, and how many may run at once.
  std::string holder_path;
  int max_holders = 8;
  // Steps after which a worker drops its session (with its region and
  // ring) and opens a new one.
  int steps_per_session = 200;
  // Deadline of calls that should succeed: long, so only a daemon that
  // stops answering runs into it.
  absl::Duration call_timeout = absl::Seconds(60);
};

// What the workers share: the tally and the holder processes.
class SoakShared {
 public:
  SoakTally& tally() { return tally_; }

  // Holder slots: false when max are running already.
  bool TryStartHolder(int max);
  void HolderDone(int pid);
  std::vector<int> holder_pids() const;

 private:
  SoakTally tally_;
  mutable absl::Mutex mu_;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int> pids_ ABSL_GUARDED_BY(mu_);
};

// "exit status 3" or "signal 9", for a waitpid status.
std::string WaitStatusText(int wstatus);

class SoakWorker {
 public:
  // Opens the worker's channel (nothing is sent yet), a connection of its
  // own. `scenarios` is the enabled mix; `index` numbers the worker;
  // `seed` makes its draws reproducible.
  static absl::StatusOr<std::unique_ptr<SoakWorker>> Create(
      const WorkerOptions& options, std::vector<Scenario> scenarios,
      SoakShared& shared, int index, uint64_t seed);

  // Runs steps until `stop` is set.
  void Run(const std::atomic<bool>& stop);

  // One step of `scenario`.
  void Step(Scenario scenario);

 private:
  SoakWorker(const WorkerOptions& options, std::vector<Scenario> scenarios,
             SoakShared& shared, uint64_t seed, std::unique_ptr<Client> client);

  Scenario Draw();
  SoakTally& tally() { return shared_.tally(); }

  // The worker's session and shm region, opened when missing; false (the
  // failure tallied under "setup") when the daemon refused.
  bool EnsureSession();
  // The worker's ring, attached when missing; null when the daemon has no
  // ring left (RESOURCE_EXHAUSTED, tallied) or refused.
  RequestRing* EnsureRing();
  // A new ring of the session (which must be open); null when the daemon
  // has no ring left (RESOURCE_EXHAUSTED, tallied) or refused.
  std::unique_ptr<RequestRing> AttachNewRing();
  // The worker's GPU region of `kind`; null (tallied) when refused.
  struct GpuRegion;
  GpuRegion* EnsureGpuRegion(CudaMemory::Kind kind);
  void DropSession();

  ProblemSpec RandomSpec(int64_t low, int64_t high);
  RegionPlacement RandomPlacement();
  // Bytes one product of RandomSpec(., 3 * max_dim) can need in a region.
  uint64_t ProductBytes() const;
  absl::Duration RandomDelay(absl::Duration max);

  // Tallies an OK inline answer's check.
  void CheckInline(const char* scenario, const v1::MatmulRequest& request,
                   const v1::MatmulResponse& response);
  void CheckRegion(const char* scenario, const RegionRequest& placed,
                   const v1::MatmulResponse& response,
                   absl::Span<const char> memory);
  // Tallies one answer of a MatmulStream that sent `requests` (request_id
  // i + 1 for requests[i]) and checks it when OK.
  void CheckStreamAnswer(const char* scenario,
                         const std::vector<v1::MatmulRequest>& requests,
                         const v1::MatmulResponse& response);

  void ProductInline();
  void ProductShm(bool ring);
  void ProductStream();
  void ProductGpu(CudaMemory::Kind kind);
  // Stream-ordered products of one shape queued at once on a CUDA stream
  // (soak_stream_batch.cc): its stream, region, ring and calls, made when
  // missing (null, tallied, when refused) and dropped with the session.
  void StreamBatch();
  // Its stream, region (cuda_ipc), ring and calls, destroyed calls first
  // (they wait for their answers) and the stream last.
  struct StreamBatchState {
    ~StreamBatchState();  // soak_stream_batch.cc, or its stand-in
    CUstream_st* stream = nullptr;
    std::unique_ptr<CudaMemory> memory;
    std::vector<char> staging;  // host image of `memory`
    std::unique_ptr<RegisteredRegion> region;
    std::unique_ptr<RequestRing> ring;
    std::unique_ptr<StreamOrderedCalls> calls;
  };
  StreamBatchState* EnsureStreamBatch();
  void DropStreamBatch();
  void Malformed();
  void Unparseable();
  void Oversized();
  void Cancel();
  void Deadline();
  // A fresh shm region with products in flight on it (soak_disruptions.cc);
  // null (tallied under `scenario`) when it could not be set up.
  struct RacedRegion;
  std::unique_ptr<RacedRegion> StartRace(const char* scenario);
  void Unregister();
  void Truncate();
  // A holder that truncates its own ring's segment (part of truncate).
  void TruncateRing();
  void StreamDrop();
  void RingDrop();
  // A raw-written ring of its own (soak_ring_chaos.cc).
  void RingChaos();
  // A holder killed 0-800 ms after it starts: `scenario` kill (products
  // in flight) or ring_kill (its ring busy and written out of sequence).
  void Kill(const char* scenario);
  // How soak_holder runs (see soak_holder.cc).
  enum class HolderMode { kProducts, kTruncateRing, kRingBusy, kShareWeight };
  // Starts soak_holder with `seed`, its stdout on `stdout_fd` (-1: this
  // process's); its pid, or 0 (tallied under `scenario`).
  pid_t SpawnHolder(HolderMode mode, const char* scenario, uint64_t seed,
                    int stdout_fd = -1);
  // Products over another session's shared weight (soak_shared_weights.cc):
  // its owner in this process withdraws it (shared_weight), or is a holder
  // killed under load (shared_kill).
  void SharedWeight();
  void SharedKill();
  // Sends `reads` (products over the opened weight, `products` their inline
  // form) at once and tallies each answer: OK and checked, or (where the
  // weight may be withdrawn) NOT_FOUND. How many were NOT_FOUND.
  int SendOverWeight(const char* scenario,
                     const std::vector<v1::MatmulRequest>& products,
                     const std::vector<v1::MatmulRequest>& reads,
                     bool may_be_withdrawn);
  // Sends products over a withdrawn (or withdrawing) weight until one is
  // NOT_FOUND; fails the scenario when none is within a few seconds.
  void ExpectWithdrawn(const char* scenario,
                       const std::vector<v1::MatmulRequest>& products,
                       const std::vector<v1::MatmulRequest>& reads);

  const WorkerOptions options_;
  const std::vector<Scenario> scenarios_;
  int total_weight_ = 0;
  SoakShared& shared_;
  std::mt19937_64 rng_;
  int steps_in_session_ = 0;

  // Destroyed bottom-up: ring, regions, segment, session, then the client
  // whose channel they use.
  std::unique_ptr<Client> client_;
  std::unique_ptr<Session> session_;
  std::unique_ptr<SharedMemorySegment> segment_;
  std::unique_ptr<RegisteredRegion> region_;
  struct GpuRegion {
    std::unique_ptr<CudaMemory> memory;
    std::vector<char> staging;  // host image of `memory`
    std::unique_ptr<RegisteredRegion> region;
  };
  std::unique_ptr<GpuRegion> gpu_[2];  // by CudaMemory::Kind
  std::unique_ptr<RequestRing> ring_;
  std::unique_ptr<StreamBatchState> stream_batch_;
};

}  // namespace matmul::soak

#endif  // MATMUL_TESTS_SOAK_SOAK_WORKER_H_
