#include "server/ring/ring_pollers.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"
#include "common/request_ring_layout.h"

namespace matmul {

struct RingPollers::Entry {
  std::shared_ptr<AttachedRing> ring;
  Handlers handlers;
  // Set when the ring is taken off (or faulted): a pass that still holds
  // the entry in its copy of the list skips it.
  std::atomic<bool> removed{false};
};

// One thread and the rings it serves.
class RingPollers::Poller {
 public:
  explicit Poller(absl::Duration spin) : spin_(spin) {
    thread_ = std::thread([this] { Run(); });
  }

  ~Poller() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    Wake();
    thread_.join();
  }

  int ring_count() const {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(entries_.size());
  }

  void Add(std::shared_ptr<Entry> entry) {
    {
      absl::MutexLock lock(&mu_);
      entries_.push_back(std::move(entry));
      version_.fetch_add(1);
    }
    Wake();
  }

  void Remove(const std::shared_ptr<Entry>& entry) {
    entry->removed.store(true);
    absl::MutexLock lock(&mu_);
    entries_.erase(std::find(entries_.begin(), entries_.end(), entry));
    version_.fetch_add(1);
    // A handler of this poller is taking its own ring off: the pass goes on
    // past the entry without touching it again.
    if (std::this_thread::get_id() == thread_.get_id()) return;
    // Otherwise the pass under way may be in one of the entry's handlers;
    // the next one copies the list without it.
    const uint64_t pass = passes_;
    Wake();
    while (passes_ == pass) pass_ended_.Wait(&mu_);
  }

 private:
  void Wake() {
    wake_.fetch_add(1);
    ring::FutexWakeAll(wake_);
  }

  void Run() {
    std::vector<std::shared_ptr<Entry>> rings;
    uint64_t seen_version = ~uint64_t{0};
    absl::Time spin_until = absl::InfinitePast();
    for (;;) {
      if (version_.load() != seen_version) {
        absl::MutexLock lock(&mu_);
        rings = entries_;
        seen_version = version_.load();
      }
      bool took = false;
      for (const std::shared_ptr<Entry>& entry : rings) {
        if (entry->removed.load()) continue;
        std::optional<uint32_t> slot = entry->ring->Take();
        // Take is where a shrunk segment faults first.
        if (entry->ring->faulted()) {
          entry->removed.store(true);
          entry->handlers.faulted();
          continue;
        }
        if (slot.has_value()) {
          spin_.Arrived(absl::Now());
          entry->handlers.dispatch(*slot);
          took = true;
        }
      }
      {
        absl::MutexLock lock(&mu_);
        ++passes_;
        pass_ended_.SignalAll();
        if (stop_) return;
      }
      if (took) {
        spin_until = spin_.SpinUntil(absl::Now());
      } else if (absl::Now() < spin_until) {
        ring::CpuRelax();
      } else {
        Sleep(rings, seen_version);
      }
    }
  }

  // Sleeps on the doorbells of `rings` and the poller's own wake word, for
  // at most kSleep (a stale list is refreshed at least that often).
  // `version` is the list's version when `rings` was copied.
  void Sleep(const std::vector<std::shared_ptr<Entry>>& rings,
             uint64_t version) {
    static constexpr absl::Duration kSleep = absl::Milliseconds(20);
    std::vector<ring::FutexWaitTarget> targets;
    targets.reserve(rings.size() + 1);
    // Read before the version: Add and Remove bump the version, then this
    // word, so a change after the check below ends the wait at once.
    targets.push_back({&wake_, wake_.load()});
    if (version_.load() != version) return;
    std::vector<AttachedRing*> told;
    told.reserve(rings.size());
    bool submitted = false;
    for (const std::shared_ptr<Entry>& entry : rings) {
      if (entry->removed.load() || entry->ring->faulted()) continue;
      std::optional<ring::FutexWaitTarget> doorbell =
          entry->ring->PrepareToSleep();
      if (!doorbell.has_value()) {
        submitted = true;
        break;
      }
      told.push_back(entry->ring.get());
      targets.push_back(*doorbell);
    }
    // With no ring to watch, only Add, Remove or the end wake the poller.
    const absl::Duration sleep = told.empty() ? absl::Seconds(1) : kSleep;
    if (!submitted && !ring::FutexWaitAny(targets, sleep)) {
      absl::SleepFor(kFallbackPoll);
    }
    for (AttachedRing* ring : told) ring->Awake();
  }

  AdaptiveSpin spin_;
  // Bumped (and woken) by Add, Remove and the destructor: one of the words
  // a sleeping poller waits on. Private to the process, but waited on
  // through the shared futex calls like the doorbells.
  std::atomic<uint32_t> wake_{0};
  // Bumped under mu_ whenever entries_ changes; read without it by the
  // poller to see whether its copy is current.
  std::atomic<uint64_t> version_{0};
  mutable absl::Mutex mu_;
  std::vector<std::shared_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
  uint64_t passes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::CondVar pass_ended_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

RingPollers::Polled::Polled(Poller& poller, std::shared_ptr<Entry> entry)
    : poller_(poller), entry_(std::move(entry)) {}

RingPollers::Polled::~Polled() { poller_.Remove(entry_); }

RingPollers::RingPollers(int threads, absl::Duration spin) {
  for (int i = 0; i < std::max(1, threads); ++i) {
    pollers_.push_back(std::make_unique<Poller>(spin));
  }
}

RingPollers::~RingPollers() = default;

std::unique_ptr<RingPollers::Polled> RingPollers::Add(
    std::shared_ptr<AttachedRing> ring, Handlers handlers) {
  Poller* least = pollers_.front().get();
  for (const std::unique_ptr<Poller>& poller : pollers_) {
    if (poller->ring_count() < least->ring_count()) least = poller.get();
  }
  auto entry = std::make_shared<Entry>();
  entry->ring = std::move(ring);
  entry->handlers = std::move(handlers);
  least->Add(entry);
  return std::make_unique<Polled>(*least, std::move(entry));
}

}  // namespace matmul
