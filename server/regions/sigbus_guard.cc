#include "server/regions/sigbus_guard.h"

#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace matmul {
namespace {

// An entry is kFree, kClaimed (being filled in or torn down: the handler
// ignores it) or kLive.
enum : uint32_t { kFree = 0, kClaimed = 1, kLive = 2 };

struct Entry {
  std::atomic<uint32_t> state{kFree};
  // Handlers looking at this entry right now: Create and ~SigbusGuard wait
  // for none before they change [start, end), so that a handler never
  // reads half of one registration and half of another.
  std::atomic<uint32_t> handlers{0};
  std::atomic<uintptr_t> start{0};
  std::atomic<uintptr_t> end{0};
  std::atomic<bool> faulted{false};
};
static_assert(std::atomic<uintptr_t>::is_always_lock_free &&
              std::atomic<uint32_t>::is_always_lock_free &&
              std::atomic<bool>::is_always_lock_free);

// The guarded ranges, global because a signal handler can reach nothing
// else, fixed-size and lock-free because it may take no lock (the thread
// it interrupts may hold any) and allocate nothing. This and the metrics
// registry are the daemon's only global mutable state. Zero-initialised:
// the pages of entries never used are never touched.
Entry g_entries[SigbusGuard::kCapacity];
// Where Create starts looking for a free entry.
std::atomic<size_t> g_next{0};
// The SIGBUS action before ours (faults outside every guarded range go
// there); written once, before our handler is installed.
struct sigaction g_previous;

// Replaces the guarded range that holds `address` with private zero pages;
// false when no live entry holds it.
bool RemapIfGuarded(uintptr_t address) {
  for (Entry& entry : g_entries) {
    if (entry.state.load() != kLive) continue;
    entry.handlers.fetch_add(1);
    // Checked again once counted: from here on the entry cannot change.
    if (entry.state.load() == kLive) {
      const uintptr_t start = entry.start.load();
      const uintptr_t end = entry.end.load();
      if (address >= start && address < end) {
        // Set before the zero pages appear: whoever reads them and then
        // checks the flag finds it set.
        entry.faulted.store(true);
        void* replaced = mmap(reinterpret_cast<void*>(start), end - start,
                              PROT_READ | PROT_WRITE,
                              MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        entry.handlers.fetch_sub(1);
        return replaced != MAP_FAILED;
      }
    }
    entry.handlers.fetch_sub(1);
  }
  return false;
}

// What the process would have done without us.
void ForwardToPrevious(int signal, siginfo_t* info, void* context) {
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 &&
      g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(signal, info, context);
    return;
  }
  const bool sent_by_kernel = info != nullptr && info->si_code > 0;
  if (g_previous.sa_handler == SIG_IGN && !sent_by_kernel) return;
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(signal);
    return;
  }
  // Die of SIGBUS: restore the default action and raise the signal again;
  // it is blocked while this handler runs and arrives when it returns.
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  sigaction(SIGBUS, &default_action, nullptr);
  raise(SIGBUS);
}

void HandleSigbus(int signal, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  // Only an access to a page the object no longer has (BUS_ADRERR) is
  // cured by zero pages; an alignment fault would recur forever, and a
  // hardware memory error or kill(SIGBUS) is not a client's doing.
  const bool ours = info != nullptr && info->si_code == BUS_ADRERR &&
                    RemapIfGuarded(reinterpret_cast<uintptr_t>(info->si_addr));
  if (!ours) ForwardToPrevious(signal, info, context);
  errno = saved_errno;
}

absl::Status InstallHandler() {
  // Read the previous action first, so that g_previous is complete before
  // a fault can reach our handler.
  if (sigaction(SIGBUS, nullptr, &g_previous) != 0) {
    return absl::InternalError(
        absl::StrCat("sigaction(SIGBUS) query: ", strerror(errno)));
  }
  struct sigaction action {};
  action.sa_sigaction = &HandleSigbus;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
  sigemptyset(&action.sa_mask);
  if (sigaction(SIGBUS, &action, nullptr) != 0) {
    return absl::InternalError(
        absl::StrCat("sigaction(SIGBUS) install: ", strerror(errno)));
  }
  return absl::OkStatus();
}

void WaitForNoHandlers(const Entry& entry) {
  while (entry.handlers.load() != 0) sched_yield();
}

}  // namespace

absl::StatusOr<std::unique_ptr<SigbusGuard>> SigbusGuard::Create(
    void* start, size_t length) {
  static const absl::Status installed = InstallHandler();
  if (!installed.ok()) return installed;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(start);
  if (begin % page != 0 || length == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("SigbusGuard needs a page-aligned, non-empty range; got ",
                     begin, " + ", length));
  }
  const uintptr_t end = begin + (length + page - 1) / page * page;
  const size_t first = g_next.load();
  for (size_t i = 0; i < kCapacity; ++i) {
    const size_t slot = (first + i) % kCapacity;
    Entry& entry = g_entries[slot];
    uint32_t expected = kFree;
    if (!entry.state.compare_exchange_strong(expected, kClaimed)) continue;
    WaitForNoHandlers(entry);
    entry.start.store(begin);
    entry.end.store(end);
    entry.faulted.store(false);
    entry.state.store(kLive);
    g_next.store((slot + 1) % kCapacity);
    return std::unique_ptr<SigbusGuard>(new SigbusGuard(slot));
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("the daemon maps at most ", kCapacity,
                   " shared-memory segments at once; unregister regions or "
                   "detach rings first"));
}

SigbusGuard::~SigbusGuard() {
  Entry& entry = g_entries[slot_];
  // Claimed, not free, while we wait: no Create may reuse it yet.
  entry.state.store(kClaimed);
  WaitForNoHandlers(entry);
  entry.state.store(kFree);
}

bool SigbusGuard::faulted() const {
  // Callers read the mapping, then ask whether those reads saw zero pages.
  // A weakly ordered CPU (arm64) may satisfy the flag's load before those
  // reads, so that a read of the zero pages still finds the flag clear:
  // the fence keeps every earlier load before it. (The handler sets the
  // flag before its mmap, whose TLB shootdown publishes the store before
  // any thread can read the new pages.)
  std::atomic_thread_fence(std::memory_order_acquire);
  return g_entries[slot_].faulted.load();
}

}  // namespace matmul
