#include "server/regions/region_registry.h"

#include <sys/random.h>

#include <cstdint>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/regions/shared_region.h"

namespace matmul {

std::string RandomId() {
  uint8_t bytes[16];
  size_t filled = 0;
  while (filled < sizeof(bytes)) {
    ssize_t n = getrandom(bytes + filled, sizeof(bytes) - filled, 0);
    if (n > 0) filled += static_cast<size_t>(n);
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

std::string RegionRegistry::OpenSession(const std::string& client_name,
                                        const PeerCredentials& owner) {
  auto session = std::make_unique<Session>();
  session->client_name = client_name;
  session->owner = owner;
  session->owner.pidfd = -1;  // borrowed for the call only
  std::string id = RandomId();
  absl::MutexLock lock(&mu_);
  for (const auto& [other_id, other] : sessions_) {
    if (other->owner.same_process(owner)) {
      session->launch_order = other->launch_order;
      break;
    }
  }
  if (session->launch_order == nullptr) {
    session->launch_order =
        std::make_shared<LaunchOrder>(options_.stream_order_lapse);
  }
  sessions_.emplace(id, std::move(session));
  return id;
}

void RegionRegistry::CloseSession(const std::string& session_id) {
  // Released outside the lock.
  std::unique_ptr<Session> closed;
  std::vector<std::shared_ptr<Region>> released;
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return;
  closed = std::move(it->second);
  sessions_.erase(it);
  for (const auto& [region_id, tokens] : closed->shares) {
    for (const std::string& token : tokens) WithdrawShare(token, released);
  }
}

void RegionRegistry::Stop() {
  absl::MutexLock lock(&mu_);
  stopped_ = true;
}

void RegionRegistry::WithdrawShare(
    const std::string& token, std::vector<std::shared_ptr<Region>>& released) {
  auto share = shares_.find(token);
  if (share == shares_.end()) return;
  for (const auto& [session_id, region_id] : share->second.opened) {
    auto session = sessions_.find(session_id);
    if (session == sessions_.end()) continue;  // closed since
    Session& s = *session->second;
    auto entry = s.regions.find(region_id);
    if (entry == s.regions.end()) continue;  // unregistered since
    released.push_back(std::move(entry->second));
    s.regions.erase(entry);
    if (static_cast<int>(s.withdrawn.size()) <
        options_.max_regions_per_session) {
      s.withdrawn.insert(region_id);
    }
  }
  released.push_back(std::move(share->second.region));
  shares_.erase(share);
}

void RegionRegistry::WithdrawSharesOf(
    Session& session, const std::string& region_id,
    std::vector<std::shared_ptr<Region>>& released) {
  auto tokens = session.shares.find(region_id);
  if (tokens == session.shares.end()) return;
  for (const std::string& token : tokens->second) {
    WithdrawShare(token, released);
  }
  session.shares.erase(tokens);
}

absl::StatusOr<RegionRegistry::Session*> RegionRegistry::FindSession(
    const std::string& session_id) const {
  auto it = sessions_.find(session_id);
  if (it == sessions_.end() && stopped_) {
    return absl::UnavailableError(absl::StrCat(
        "session '", session_id,
        "' was closed because the daemon is shutting down; retry on the "
        "daemon that replaces it"));
  }
  if (it == sessions_.end()) {
    return absl::NotFoundError(
        absl::StrCat("unknown session '", session_id,
                     "'; open one with OpenSession and keep its stream open"));
  }
  return it->second.get();
}

absl::StatusOr<RegionRegistry::Session*> RegionRegistry::FindOwnSession(
    const std::string& session_id, const PeerCredentials& caller) const {
  ASSIGN_OR_RETURN(Session * session, FindSession(session_id));
  if (!session->owner.same_process(caller)) {
    return absl::PermissionDeniedError(
        absl::StrCat("session '", session_id, "' belongs to another process (",
                     session->owner.DebugString(), "; this call came from ",
                     caller.DebugString(), "); open a session of your own"));
  }
  return session;
}

absl::Status RegionRegistry::CheckOwner(const std::string& session_id,
                                        const PeerCredentials& caller) const {
  absl::ReaderMutexLock lock(&mu_);
  return FindOwnSession(session_id, caller).status();
}

absl::StatusOr<std::string> RegionRegistry::Add(
    const std::string& session_id, const PeerCredentials& caller,
    std::shared_ptr<Region> region) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Session * session, FindOwnSession(session_id, caller));
  Session& s = *session;
  if (static_cast<int>(s.regions.size()) >= options_.max_regions_per_session) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the session already has ", s.regions.size(),
                     " regions, the most one session may register"));
  }
  if (s.bytes + region->size_bytes() > options_.max_region_bytes_per_session) {
    return absl::ResourceExhaustedError(
        absl::StrCat("registering ", region->size_bytes(),
                     " more bytes would exceed the "
                     "session's quota of ",
                     options_.max_region_bytes_per_session, " bytes (", s.bytes,
                     " registered)"));
  }
  std::string id = RandomId();
  s.bytes += region->size_bytes();
  s.regions.emplace(id, std::move(region));
  return id;
}

absl::StatusOr<RegionRegistry::RegionMap::iterator>
RegionRegistry::FindRegionIn(Session& session, const std::string& region_id) {
  auto it = session.regions.find(region_id);
  if (it == session.regions.end()) {
    if (session.withdrawn.contains(region_id)) {
      return absl::NotFoundError(absl::StrCat(
          "region '", region_id,
          "' was opened from another session's share, which its owner has "
          "withdrawn (it unregistered the region or went away)"));
    }
    return absl::NotFoundError(absl::StrCat(
        "region '", region_id, "' is not registered in this session"));
  }
  return it;
}

absl::StatusOr<bool> RegionRegistry::Remove(const std::string& session_id,
                                            const PeerCredentials& caller,
                                            const std::string& region_id) {
  std::shared_ptr<Region> removed;
  {
    // Released outside the lock: the region's shares and their openings.
    std::vector<std::shared_ptr<Region>> released;
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(Session * session, FindOwnSession(session_id, caller));
    ASSIGN_OR_RETURN(RegionMap::iterator entry,
                     FindRegionIn(*session, region_id));
    removed = std::move(entry->second);
    session->regions.erase(entry);
    if (removed->writable()) session->bytes -= removed->size_bytes();
    WithdrawSharesOf(*session, region_id, released);
  }
  // What holds it now are requests using it, directly or through a share.
  return removed.use_count() > 1;
}

absl::StatusOr<std::string> RegionRegistry::Share(const std::string& session_id,
                                                  const PeerCredentials& caller,
                                                  const std::string& region_id,
                                                  ShareAccess access) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Session * session, FindOwnSession(session_id, caller));
  ASSIGN_OR_RETURN(RegionMap::iterator entry,
                   FindRegionIn(*session, region_id));
  if (!entry->second->writable()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "region '", region_id,
        "' was opened from another session's share; only its owner may "
        "share it"));
  }
  std::string token = RandomId();
  shares_.emplace(token, ShareEntry{.owner_session = session_id,
                                    .owner = session->owner,
                                    .access = access,
                                    .region = entry->second});
  session->shares[region_id].push_back(token);
  return token;
}

namespace {

bool Admits(ShareAccess access, const PeerCredentials& owner,
            const PeerCredentials& caller) {
  switch (access) {
    case ShareAccess::kAnyLocal:
      return true;
    case ShareAccess::kSameGroup:
      return caller.uid == owner.uid || caller.gid == owner.gid;
    case ShareAccess::kSameUser:
      return caller.uid == owner.uid;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::string> RegionRegistry::OpenShared(
    const std::string& session_id, const PeerCredentials& caller,
    const std::string& token) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Session * session, FindOwnSession(session_id, caller));
  auto share = shares_.find(token);
  if (share == shares_.end()) {
    return absl::NotFoundError(
        "no region is shared under that token (it was never given, or its "
        "owner has withdrawn it: unregistered the region or went away)");
  }
  ShareEntry& s = share->second;
  if (!Admits(s.access, s.owner, caller)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the region is shared with ",
        s.access == ShareAccess::kSameGroup ? "its owner's user and group"
                                            : "its owner's user",
        " (owner uid ", s.owner.uid, ", gid ", s.owner.gid,
        "); this call came from uid ", caller.uid, ", gid ", caller.gid));
  }
  if (static_cast<int>(session->regions.size()) >=
      options_.max_regions_per_session) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the session already has ", session->regions.size(),
                     " regions, the most one session may register"));
  }
  std::string id = RandomId();
  session->regions.emplace(id, std::make_shared<SharedRegion>(s.region));
  // Openings whose session has closed go first.
  std::vector<std::pair<std::string, std::string>> open;
  for (auto& opening : s.opened) {
    if (sessions_.contains(opening.first)) open.push_back(std::move(opening));
  }
  s.opened = std::move(open);
  s.opened.emplace_back(session_id, id);
  return id;
}

absl::StatusOr<std::shared_ptr<Region>> RegionRegistry::Find(
    const std::string& session_id, const std::string& region_id) const {
  absl::ReaderMutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Session * session, FindSession(session_id));
  ASSIGN_OR_RETURN(RegionMap::iterator entry,
                   FindRegionIn(*session, region_id));
  return entry->second;
}

absl::StatusOr<LaunchOrder::Ticket> RegionRegistry::TakeLaunchTicket(
    const std::string& session_id, uint64_t number,
    uint64_t answered_below) const {
  std::shared_ptr<LaunchOrder> order;
  {
    absl::ReaderMutexLock lock(&mu_);
    ASSIGN_OR_RETURN(Session * session, FindSession(session_id));
    order = session->launch_order;
  }
  return order->Take(number, answered_below);
}

absl::StatusOr<std::vector<RegionSummary>> RegionRegistry::List(
    const std::string& session_id, const PeerCredentials& caller) const {
  absl::ReaderMutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Session * session, FindOwnSession(session_id, caller));
  std::vector<RegionSummary> out;
  for (const auto& [id, region] : session->regions) {
    out.push_back({id, region->kind(), region->size_bytes(),
                   static_cast<int>(region.use_count() - 1)});
  }
  return out;
}

absl::Status RegionRegistry::AddRing(const std::string& session_id,
                                     const PeerCredentials& caller) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Session * session, FindOwnSession(session_id, caller));
  if (session->rings >= options_.max_rings_per_session) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the session has ", session->rings,
        " request rings attached already, the most one session may "
        "(--max_rings_per_session); detach one first"));
  }
  ++session->rings;
  return absl::OkStatus();
}

void RegionRegistry::RemoveRing(const std::string& session_id) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(session_id);
  if (it != sessions_.end() && it->second->rings > 0) --it->second->rings;
}

int RegionRegistry::session_count() const {
  absl::ReaderMutexLock lock(&mu_);
  return static_cast<int>(sessions_.size());
}

int RegionRegistry::region_count() const {
  absl::ReaderMutexLock lock(&mu_);
  int count = 0;
  for (const auto& [id, session] : sessions_) count += session->regions.size();
  return count;
}

absl::flat_hash_map<std::string, RegionRegistry::KindTotals>
RegionRegistry::TotalsByKind() const {
  absl::ReaderMutexLock lock(&mu_);
  absl::flat_hash_map<std::string, KindTotals> totals;
  for (const auto& [id, session] : sessions_) {
    for (const auto& [region_id, region] : session->regions) {
      KindTotals& total = totals[region->kind()];
      ++total.regions;
      total.bytes += region->size_bytes();
    }
  }
  return totals;
}

}  // namespace matmul
