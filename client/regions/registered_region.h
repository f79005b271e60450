// matmul::RegisteredRegion: a region registered with the daemon under a
// session, unregistered when this object goes away.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<RegisteredRegion> region,
//                    RegisteredRegion::RegisterShm(*client, *session,
//                                                  *segment));
//   tensor.mutable_region()->set_region_id(region->id());
//
// The client and the session must outlive the region. If the session ends
// first (the daemon dropped it), the destructor's UnregisterRegion meets
// NOT_FOUND, which is ignored: the region is gone either way.
#ifndef MATMUL_CLIENT_REGIONS_REGISTERED_REGION_H_
#define MATMUL_CLIENT_REGIONS_REGISTERED_REGION_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/regions/shared_memory_segment.h"
#include "client/session.h"
#include "matmul/v1/matmul.pb.h"

namespace matmul {

class RegisteredRegion {
 public:
  // Registers whatever `request` describes (any kind) under `session`; the
  // request's session_id is set here. The daemon's status otherwise.
  static absl::StatusOr<std::unique_ptr<RegisteredRegion>> Register(
      Client& client, const Session& session, v1::RegisterRegionRequest request,
      absl::Duration timeout = absl::Seconds(30));

  // Registers bytes [offset_bytes, offset_bytes + size_bytes) of `segment`;
  // size_bytes 0 means up to the segment's end. The segment itself may be
  // destroyed (unmapped, unlinked) afterwards: the daemon keeps its own
  // mapping until the region is released.
  static absl::StatusOr<std::unique_ptr<RegisteredRegion>> RegisterShm(
      Client& client, const Session& session,
      const SharedMemorySegment& segment, uint64_t offset_bytes = 0,
      uint64_t size_bytes = 0, absl::Duration timeout = absl::Seconds(30));

  // Registers the region another process's session shares under `token`
  // (its RegisteredRegion::Share): the same memory, for A and B only.
  static absl::StatusOr<std::unique_ptr<RegisteredRegion>> RegisterShared(
      Client& client, const Session& session, const std::string& token,
      absl::Duration timeout = absl::Seconds(30));

  // Lets other processes' sessions that `access` admits register this
  // region to read from (RegisterShared, with the token returned); each
  // call gives a new token. Unregistering the region (or the session's
  // end) withdraws every share of it.
  absl::StatusOr<std::string> Share(
      v1::ShareAccess access = v1::SHARE_ACCESS_SAME_USER,
      absl::Duration timeout = absl::Seconds(30));

  // Unregisters unless Unregister ran already; errors are dropped (a
  // destructor cannot report them, and the session's end releases the
  // region anyway).
  ~RegisteredRegion();

  RegisteredRegion(const RegisteredRegion&) = delete;
  RegisteredRegion& operator=(const RegisteredRegion&) = delete;

  // The daemon's id: unguessable, valid only with session_id().
  const std::string& id() const { return id_; }
  const std::string& session_id() const { return session_id_; }
  uint64_t size_bytes() const { return size_bytes_; }

  // Unregisters now and reports the daemon's answer: true when requests in
  // flight defer the release until they finish. Later calls (and the
  // destructor) do nothing; a second call returns FAILED_PRECONDITION.
  absl::StatusOr<bool> Unregister(absl::Duration timeout = absl::Seconds(30));

 private:
  RegisteredRegion(Client& client, std::string session_id, std::string id,
                   uint64_t size_bytes)
      : client_(client),
        session_id_(std::move(session_id)),
        id_(std::move(id)),
        size_bytes_(size_bytes) {}

  Client& client_;
  const std::string session_id_;
  const std::string id_;
  const uint64_t size_bytes_;
  bool registered_ = true;
};

}  // namespace matmul

#endif  // MATMUL_CLIENT_REGIONS_REGISTERED_REGION_H_
