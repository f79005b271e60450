// Preloaded into the ThreadSanitizer tests (tsan.sh): tells TSan about
// absl::Mutex, absl::CondVar and absl::Notification. Debian's abseil is a
// shared library built without TSan, so the lock and unlock of every
// absl::Mutex are invisible to it, and it would report every
// ABSL_GUARDED_BY member touched by two threads as a race. Each function
// here replaces the library's (symbols of a preloaded library come first),
// calls the library's own through dlsym(RTLD_NEXT) and adds the
// happens-before edge: release before an unlock (or a wait that unlocks),
// acquire after a lock. gRPC's mutexes are absl::Mutex too, so edges
// through gRPC's locks are seen as well; its lock-free paths are not.
#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

extern "C" {
// Weak: a process without the TSan runtime that inherits the preload gets
// the plain library behaviour.
void __tsan_acquire(void* addr) __attribute__((weak));
void __tsan_release(void* addr) __attribute__((weak));
}

namespace {

#define MATMUL_STR2(x) #x
#define MATMUL_STR(x) MATMUL_STR2(x)

void Acquire(const void* addr) {
  if (__tsan_acquire != nullptr) __tsan_acquire(const_cast<void*>(addr));
}
void Release(const void* addr) {
  if (__tsan_release != nullptr) __tsan_release(const_cast<void*>(addr));
}

// The library's definition of `name`, mangled in absl's inline namespace
// without the "_ZN4absl<namespace>" (or "_ZNK...") head, which `head` gives.
template <typename Fn>
Fn Real(const char* head, const char* tail) {
  const std::string ns = MATMUL_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  const std::string name =
      std::string(head) + "4absl" + std::to_string(ns.size()) + ns + tail;
  void* fn = dlsym(RTLD_NEXT, name.c_str());
  if (fn == nullptr) {
    std::fprintf(stderr, "tsan_absl_sync: %s not found\n", name.c_str());
    std::abort();
  }
  return reinterpret_cast<Fn>(fn);
}

#define REAL(type, head, tail) static const auto real = Real<type>(head, tail)

// A Condition that acquires `mu` before it evaluates `cond` and releases
// it after: abseil evaluates conditions with the mutex held, taken and
// dropped inside the library where the functions below do not see it.
struct AcquiringCondition {
  AcquiringCondition(const absl::Condition& cond, absl::Mutex* mu)
      : cond(&cond), mu(mu), wrapped(&Eval, this) {}
  static bool Eval(AcquiringCondition* self) {
    Acquire(self->mu);
    const bool met = self->cond->Eval();
    Release(self->mu);  // abseil may release the lock inside, unseen
    return met;
  }
  const absl::Condition* cond;
  absl::Mutex* mu;
  absl::Condition wrapped;
};

// absl's deadlock detector keeps a graph of lock order under its own spin
// lock, inside the library, which TSan sees only as racing memmoves; TSan
// has its own detector.
__attribute__((constructor)) void IgnoreAbslDeadlockDetection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

using MutexFn = void (*)(Mutex*);
using MutexTryFn = bool (*)(Mutex*);
using WhenFn = void (*)(Mutex*, const Condition&);
using WhenTimeoutFn = bool (*)(Mutex*, const Condition&, Duration);
using WhenDeadlineFn = bool (*)(Mutex*, const Condition&, Time);

void Mutex::Lock() {
  REAL(MutexFn, "_ZN", "5Mutex4LockEv");
  real(this);
  Acquire(this);
}
void Mutex::ReaderLock() {
  REAL(MutexFn, "_ZN", "5Mutex10ReaderLockEv");
  real(this);
  Acquire(this);
}
bool Mutex::TryLock() {
  REAL(MutexTryFn, "_ZN", "5Mutex7TryLockEv");
  const bool locked = real(this);
  if (locked) Acquire(this);
  return locked;
}
bool Mutex::ReaderTryLock() {
  REAL(MutexTryFn, "_ZN", "5Mutex13ReaderTryLockEv");
  const bool locked = real(this);
  if (locked) Acquire(this);
  return locked;
}
void Mutex::Unlock() {
  REAL(MutexFn, "_ZN", "5Mutex6UnlockEv");
  Release(this);
  real(this);
}
void Mutex::ReaderUnlock() {
  REAL(MutexFn, "_ZN", "5Mutex12ReaderUnlockEv");
  Release(this);
  real(this);
}
void Mutex::LockWhen(const Condition& cond) {
  REAL(WhenFn, "_ZN", "5Mutex8LockWhenERKNS0_9ConditionE");
  real(this, AcquiringCondition(cond, this).wrapped);
  Acquire(this);
}
void Mutex::ReaderLockWhen(const Condition& cond) {
  REAL(WhenFn, "_ZN", "5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  real(this, AcquiringCondition(cond, this).wrapped);
  Acquire(this);
}
bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  REAL(WhenTimeoutFn, "_ZN",
       "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  const bool met = real(this, AcquiringCondition(cond, this).wrapped, timeout);
  Acquire(this);
  return met;
}
bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, Duration timeout) {
  REAL(WhenTimeoutFn, "_ZN",
       "5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  const bool met = real(this, AcquiringCondition(cond, this).wrapped, timeout);
  Acquire(this);
  return met;
}
bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  REAL(WhenDeadlineFn, "_ZN",
       "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  const bool met = real(this, AcquiringCondition(cond, this).wrapped, deadline);
  Acquire(this);
  return met;
}
bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, Time deadline) {
  REAL(WhenDeadlineFn, "_ZN",
       "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  const bool met = real(this, AcquiringCondition(cond, this).wrapped, deadline);
  Acquire(this);
  return met;
}
void Mutex::Await(const Condition& cond) {
  REAL(WhenFn, "_ZN", "5Mutex5AwaitERKNS0_9ConditionE");
  Release(this);
  real(this, AcquiringCondition(cond, this).wrapped);
  Acquire(this);
}
bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  REAL(WhenTimeoutFn, "_ZN",
       "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Release(this);
  const bool met = real(this, AcquiringCondition(cond, this).wrapped, timeout);
  Acquire(this);
  return met;
}
bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  REAL(WhenDeadlineFn, "_ZN",
       "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Release(this);
  const bool met = real(this, AcquiringCondition(cond, this).wrapped, deadline);
  Acquire(this);
  return met;
}

void CondVar::Wait(Mutex* mu) {
  REAL(void (*)(CondVar*, Mutex*), "_ZN", "7CondVar4WaitEPNS0_5MutexE");
  Release(mu);
  real(this, mu);
  Acquire(mu);
}
bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  REAL(bool (*)(CondVar*, Mutex*, Duration), "_ZN",
       "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  Release(mu);
  const bool timed_out = real(this, mu, timeout);
  Acquire(mu);
  return timed_out;
}
bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  REAL(bool (*)(CondVar*, Mutex*, Time), "_ZN",
       "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  Release(mu);
  const bool timed_out = real(this, mu, deadline);
  Acquire(mu);
  return timed_out;
}

// HasBeenNotified() is inline (an acquire load, instrumented in the
// caller); the release on the flag's own address pairs with it. The flag
// follows the mutex in abseil 20220623's Notification.
static_assert(sizeof(Notification) ==
                  sizeof(Mutex) + sizeof(std::atomic<bool>) ||
              sizeof(Notification) == 2 * sizeof(Mutex));
void Notification::Notify() {
  REAL(void (*)(Notification*), "_ZN", "12Notification6NotifyEv");
  Release(this);
  Release(reinterpret_cast<const char*>(this) + sizeof(Mutex));
  real(this);
}
void Notification::WaitForNotification() const {
  REAL(void (*)(const Notification*), "_ZNK",
       "12Notification19WaitForNotificationEv");
  real(this);
  Acquire(this);
}
bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  REAL(bool (*)(const Notification*, Duration), "_ZNK",
       "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
  const bool notified = real(this, timeout);
  Acquire(this);
  return notified;
}
bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  REAL(bool (*)(const Notification*, Time), "_ZNK",
       "12Notification31WaitForNotificationWithDeadlineENS0_4TimeE");
  const bool notified = real(this, deadline);
  Acquire(this);
  return notified;
}

ABSL_NAMESPACE_END
}  // namespace absl
