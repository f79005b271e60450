// The names the C++ client gives its shm segments, and the removal of those
// that clients killed before they could unlink them.
//
// The daemon opens a segment by name at RegisterRegion (or AttachRing), so
// the client can unlink the name only once that answers; a client killed
// inside that window (SIGKILL, a crash) leaves the name in /dev/shm. Names
// therefore carry the pid and the pid namespace of their maker,
//
//   <prefix>-<pid>-<pid namespace>-<16 random hex digits>
//
// and the first segment of a prefix that a later client of the same user
// creates removes such names whose maker is dead (SharedMemorySegment::Create
// calls ReapOrphanedSegmentsOnce). The Python client's pure-Python path does
// the same with its own names, "<prefix>-py<pid>-<pid namespace>-<random>"
// (client/python/matmul_client/_shm_segment.py); the rules here are its.
#ifndef MATMUL_CLIENT_REGIONS_SEGMENT_NAMES_H_
#define MATMUL_CLIENT_REGIONS_SEGMENT_NAMES_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace matmul {

// Who made a segment: a pid names a process only within its pid namespace,
// and /dev/shm may be shared by several (containers run with --ipc=host).
struct SegmentOwner {
  pid_t pid = 0;
  // The inode number of the maker's /proc/self/ns/pid; 0 where it could not
  // be read (no real namespace has it, so such names are never reaped).
  uint64_t pid_namespace = 0;

  friend bool operator==(const SegmentOwner&, const SegmentOwner&) = default;
};

// The inode number of this process's pid namespace; nullopt where
// /proc/self/ns/pid cannot be read.
std::optional<uint64_t> PidNamespace();

// `prefix` + "-<pid>-<pid namespace>-<random_hex>".
std::string SegmentName(absl::string_view prefix, const SegmentOwner& owner,
                        absl::string_view random_hex);

// A fresh name for a segment of this process: its pid, its pid namespace (0
// where unknown) and 16 random hex digits, which nobody can predict to
// create the object first.
std::string NewSegmentName(absl::string_view prefix);

// The owner `name` carries if it is `prefix` + "-<pid>-<pid namespace>-
// <16 lowercase hex digits>" (pid > 0, without leading zeros); nullopt for any
// other name. That includes the format before this one, "<prefix>-<pid>-
// <hex>": its namespace is unknown, so its pid may be anybody's.
std::optional<SegmentOwner> ParseSegmentOwner(absl::string_view name,
                                              absl::string_view prefix);

// Unlinks the objects in /dev/shm whose names ParseSegmentOwner reads for
// `prefix`, that belong to this user (st_uid == getuid()), that come from
// this pid namespace and not from this process, and whose maker is dead
// (kill(pid, 0) fails with ESRCH). A name whose pid is alive, or reused by
// another process, or that this process may not signal, is left alone, as
// is every name where this process's namespace is unknown. Returns the
// names removed; a missing /dev/shm removes nothing and is no error.
absl::StatusOr<std::vector<std::string>> ReapOrphanedSegments(
    absl::string_view prefix);

// ReapOrphanedSegments(prefix) the first time this process asks for
// `prefix`, and an empty list every later time: names are left behind only
// by a kill, and a process that lives on need not scan /dev/shm for every
// segment it makes. Thread-safe; calls for the same prefix wait for the
// first one's reaping to end.
absl::StatusOr<std::vector<std::string>> ReapOrphanedSegmentsOnce(
    absl::string_view prefix);

}  // namespace matmul

#endif  // MATMUL_CLIENT_REGIONS_SEGMENT_NAMES_H_
