// Sessions and the regions registered in them. A session is one client
// process (it holds an OpenSession stream open for its lifetime) and belongs
// to that process: calls from any other process (by the kernel's account of
// the caller, PeerCredentials) are refused. A region belongs to exactly one
// session and is visible to no other, unless that session shares it: Share
// gives a token, and another session whose process the share's access
// admits (and that knows the token) opens it under an id of its own, to
// read from only (weights that many clients use, read once when their
// products share a launch). Removing the region or closing its session
// withdraws the share and every id opened from it. Ids and tokens are 128
// random bits from the kernel, so they cannot be guessed. Lookups hand out
// shared ownership: a region removed while requests use it is released
// when the last of them lets go.
#ifndef MATMUL_SERVER_REGIONS_REGION_REGISTRY_H_
#define MATMUL_SERVER_REGIONS_REGION_REGISTRY_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/gemm/launch_order.h"
#include "server/regions/region.h"
#include "server/transport/peer_credentials.h"

namespace matmul {

struct RegionRegistryOptions {
  int max_regions_per_session = 4096;
  int64_t max_region_bytes_per_session = int64_t{1} << 40;
  int max_rings_per_session = 4;
  // How long a stream-ordered product's number may be missing before the
  // products numbered after it stop waiting for it (launch_order.h).
  absl::Duration stream_order_lapse = absl::Seconds(2);
};

// Which processes may open a shared region, by the kernel's account of the
// caller (the socket's own mode and group decide who may connect at all).
enum class ShareAccess {
  kSameUser,   // the owner's uid
  kSameGroup,  // the owner's uid, or a caller whose primary gid is the owner's
  kAnyLocal,   // any process on the daemon's host that can reach the socket
};

struct RegionSummary {
  std::string region_id;
  std::string kind;
  int64_t size_bytes = 0;
  int requests_in_flight = 0;
};

class RegionRegistry {
 public:
  explicit RegionRegistry(const RegionRegistryOptions& options)
      : options_(options) {}

  std::string OpenSession(const std::string& client_name,
                          const PeerCredentials& owner);
  // Drops every region of the session (each freed once unused).
  void CloseSession(const std::string& session_id);
  // Called when the daemon starts to drain, before it closes the sessions:
  // from then on a session id it does not know is one it closed, and calls
  // naming it are answered UNAVAILABLE (retry on the daemon that replaces
  // this one) rather than NOT_FOUND.
  void Stop();

  // OK when `caller` is the process that opened the session; NOT_FOUND for
  // an unknown session (UNAVAILABLE once stopped), PERMISSION_DENIED for any
  // other process. Every call below that takes a caller checks this first.
  absl::Status CheckOwner(const std::string& session_id,
                          const PeerCredentials& caller) const;

  // RESOURCE_EXHAUSTED over the quota.
  absl::StatusOr<std::string> Add(const std::string& session_id,
                                  const PeerCredentials& caller,
                                  std::shared_ptr<Region> region);
  // Returns whether requests in flight defer the release.
  absl::StatusOr<bool> Remove(const std::string& session_id,
                              const PeerCredentials& caller,
                              const std::string& region_id);
  absl::StatusOr<std::vector<RegionSummary>> List(
      const std::string& session_id, const PeerCredentials& caller) const;
  // Counts a request ring against the session's quota (RESOURCE_EXHAUSTED
  // beyond max_rings_per_session); RemoveRing gives the place back.
  absl::Status AddRing(const std::string& session_id,
                       const PeerCredentials& caller);
  void RemoveRing(const std::string& session_id);

  // Shares region `region_id` of the caller's session with the processes
  // `access` admits; returns the token they open it with. A region may be
  // shared several times (one token each).
  absl::StatusOr<std::string> Share(const std::string& session_id,
                                    const PeerCredentials& caller,
                                    const std::string& region_id,
                                    ShareAccess access);
  // Gives the caller's session an id for the region `token` shares, which
  // products may read A and B from but not write C to. NOT_FOUND for an
  // unknown token or one withdrawn, PERMISSION_DENIED when the share's
  // access does not admit the caller, RESOURCE_EXHAUSTED over the
  // session's region count (an opened region counts no bytes: they are
  // the owner's).
  absl::StatusOr<std::string> OpenShared(const std::string& session_id,
                                         const PeerCredentials& caller,
                                         const std::string& token);

  // NOT_FOUND unless the region is registered in this very session. The
  // caller was checked with CheckOwner when the request was accepted.
  absl::StatusOr<std::shared_ptr<Region>> Find(
      const std::string& session_id, const std::string& region_id) const;

  // The place of a stream-ordered product of the session, by the number
  // its client gave it, among those of every session of the same process:
  // a process's clients may queue products on one CUDA stream, so a
  // product of one may wait for another's (launch_order.h). NOT_FOUND for
  // an unknown session; LaunchOrder::Take's errors.
  absl::StatusOr<LaunchOrder::Ticket> TakeLaunchTicket(
      const std::string& session_id, uint64_t number,
      uint64_t answered_below) const;

  int session_count() const;
  int region_count() const;
  // Regions registered now and their bytes, by kind (for the metrics).
  struct KindTotals {
    int regions = 0;
    int64_t bytes = 0;
  };
  absl::flat_hash_map<std::string, KindTotals> TotalsByKind() const;

 private:
  using RegionMap = absl::flat_hash_map<std::string, std::shared_ptr<Region>>;
  struct Session {
    std::string client_name;
    PeerCredentials owner;
    int64_t bytes = 0;
    int rings = 0;
    RegionMap regions;
    // Shared by the sessions of one process.
    std::shared_ptr<LaunchOrder> launch_order;
    // Tokens of this session's shares, by region id.
    absl::flat_hash_map<std::string, std::vector<std::string>> shares;
    // Ids opened from shares since withdrawn, kept (up to the region
    // limit) to say so when a product names one.
    absl::flat_hash_set<std::string> withdrawn;
  };
  struct ShareEntry {
    std::string owner_session;
    PeerCredentials owner;
    ShareAccess access = ShareAccess::kSameUser;
    std::shared_ptr<Region> region;
    // (session, id) of every opening.
    std::vector<std::pair<std::string, std::string>> opened;
  };
  // Ends the share under `token`: its openings leave their sessions.
  void WithdrawShare(const std::string& token,
                     std::vector<std::shared_ptr<Region>>& released)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every share of `region_id` in `session`.
  void WithdrawSharesOf(Session& session, const std::string& region_id,
                        std::vector<std::shared_ptr<Region>>& released)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::StatusOr<Session*> FindSession(const std::string& session_id) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // FindSession, then PERMISSION_DENIED unless `caller` owns it.
  absl::StatusOr<Session*> FindOwnSession(const std::string& session_id,
                                          const PeerCredentials& caller) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The region's entry in `session`; NOT_FOUND when it has none.
  static absl::StatusOr<RegionMap::iterator> FindRegionIn(
      Session& session, const std::string& region_id);

  const RegionRegistryOptions options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Session>> sessions_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, ShareEntry> shares_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

// 32 hex characters from getrandom(2).
std::string RandomId();

}  // namespace matmul

#endif  // MATMUL_SERVER_REGIONS_REGION_REGISTRY_H_
