#include "client/regions/segment_names.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <set>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"

namespace matmul {
namespace {

constexpr char kShmDirectory[] = "/dev/shm";
constexpr size_t kRandomHexDigits = 16;

// 8 random bytes as 16 hex digits: names are unpredictable, so another
// process cannot create one first to have us write into its object (and
// O_EXCL would refuse it anyway).
std::string RandomHex() {
  char bytes[kRandomHexDigits / 2];
  size_t filled = 0;
  while (filled < sizeof(bytes)) {
    const ssize_t n = getrandom(bytes + filled, sizeof(bytes) - filled, 0);
    if (n > 0) filled += static_cast<size_t>(n);
  }
  return absl::BytesToHexString(absl::string_view(bytes, sizeof(bytes)));
}

// Decimal digits only, none of them a leading zero: the one spelling
// SegmentName writes, so no other text maps to the same number.
bool CanonicalNumber(absl::string_view text) {
  if (text.empty() || (text[0] == '0' && text.size() > 1)) return false;
  for (char ch : text) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(ch))) return false;
  }
  return true;
}

bool RandomPart(absl::string_view text) {
  if (text.size() != kRandomHexDigits) return false;
  for (char ch : text) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(ch)) &&
        !(ch >= 'a' && ch <= 'f')) {
      return false;
    }
  }
  return true;
}

struct DirCloser {
  void operator()(DIR* dir) const { closedir(dir); }
};

// Whether the process `pid` of this namespace is gone. EPERM (a process of
// another user) counts as alive: only ESRCH says nobody has the pid.
bool ProcessIsDead(pid_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

}  // namespace

std::optional<uint64_t> PidNamespace() {
  struct stat info;
  if (stat("/proc/self/ns/pid", &info) != 0) return std::nullopt;
  return static_cast<uint64_t>(info.st_ino);
}

std::string SegmentName(absl::string_view prefix, const SegmentOwner& owner,
                        absl::string_view random_hex) {
  return absl::StrCat(prefix, "-", owner.pid, "-", owner.pid_namespace, "-",
                      random_hex);
}

std::string NewSegmentName(absl::string_view prefix) {
  return SegmentName(prefix, SegmentOwner{getpid(), PidNamespace().value_or(0)},
                     RandomHex());
}

std::optional<SegmentOwner> ParseSegmentOwner(absl::string_view name,
                                              absl::string_view prefix) {
  if (!absl::ConsumePrefix(&name, prefix) || !absl::ConsumePrefix(&name, "-")) {
    return std::nullopt;
  }
  // Exactly three parts, so a name of a longer prefix that starts with this
  // one ("<prefix>-x-...", "<prefix>-1-<pid>-...") is not read as ours.
  const std::vector<absl::string_view> parts = absl::StrSplit(name, '-');
  if (parts.size() != 3 || !CanonicalNumber(parts[0]) ||
      !CanonicalNumber(parts[1]) || !RandomPart(parts[2])) {
    return std::nullopt;
  }
  SegmentOwner owner;
  if (!absl::SimpleAtoi(parts[0], &owner.pid) || owner.pid <= 0 ||
      !absl::SimpleAtoi(parts[1], &owner.pid_namespace)) {
    return std::nullopt;
  }
  return owner;
}

absl::StatusOr<std::vector<std::string>> ReapOrphanedSegments(
    absl::string_view prefix) {
  std::vector<std::string> removed;
  // Without our namespace no pid in a name can be told to be one of ours.
  const std::optional<uint64_t> namespace_inode = PidNamespace();
  if (!namespace_inode.has_value()) return removed;
  const std::unique_ptr<DIR, DirCloser> dir(opendir(kShmDirectory));
  if (dir == nullptr) {
    if (errno == ENOENT) return removed;
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("opendir('", kShmDirectory, "')"));
  }
  const pid_t self = getpid();
  const uid_t user = getuid();
  while (const dirent* entry = readdir(dir.get())) {
    const std::optional<SegmentOwner> owner =
        ParseSegmentOwner(entry->d_name, prefix);
    if (!owner.has_value() || owner->pid_namespace != *namespace_inode ||
        owner->pid == self) {
      continue;
    }
    // Not followed: a link someone else put there names nothing of ours.
    struct stat info;
    if (fstatat(dirfd(dir.get()), entry->d_name, &info, AT_SYMLINK_NOFOLLOW) !=
            0 ||
        !S_ISREG(info.st_mode) || info.st_uid != user) {
      continue;
    }
    if (!ProcessIsDead(owner->pid)) continue;
    // Fails where another client reaped it first: nothing to do then.
    if (shm_unlink(absl::StrCat("/", entry->d_name).c_str()) == 0) {
      removed.emplace_back(entry->d_name);
    }
  }
  return removed;
}

absl::StatusOr<std::vector<std::string>> ReapOrphanedSegmentsOnce(
    absl::string_view prefix) {
  // The prefixes this process has reaped. The house style keeps mutable
  // state out of globals; this is the exception the Python client makes too
  // (_reaped_prefixes): what it records, that this process scanned /dev/shm
  // for a prefix, is a fact about the whole process, and it is reached only
  // through this function. Never destroyed, so a thread still creating
  // segments while the process exits cannot meet a destroyed mutex.
  struct Reaped {
    absl::Mutex mutex;
    std::set<std::string, std::less<>> prefixes ABSL_GUARDED_BY(mutex);
  };
  static Reaped* const reaped = new Reaped();
  // Held while reaping, so a second thread's first segment of the prefix
  // waits for the scan, as the first thread's does.
  absl::MutexLock lock(&reaped->mutex);
  if (!reaped->prefixes.emplace(prefix).second) {
    return std::vector<std::string>();
  }
  return ReapOrphanedSegments(prefix);
}

}  // namespace matmul
