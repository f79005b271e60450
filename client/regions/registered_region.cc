#include "client/regions/registered_region.h"

#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"

namespace matmul {

absl::StatusOr<std::unique_ptr<RegisteredRegion>> RegisteredRegion::Register(
    Client& client, const Session& session, v1::RegisterRegionRequest request,
    absl::Duration timeout) {
  request.set_session_id(session.session_id());
  absl::StatusOr<v1::RegisterRegionResponse> response =
      client.RegisterRegion(request, timeout);
  if (!response.ok()) return response.status();
  // The constructor is private, so std::make_unique cannot reach it.
  return absl::WrapUnique(new RegisteredRegion(client, session.session_id(),
                                               response->region_id(),
                                               response->size_bytes()));
}

absl::StatusOr<std::unique_ptr<RegisteredRegion>>
RegisteredRegion::RegisterShared(Client& client, const Session& session,
                                 const std::string& token,
                                 absl::Duration timeout) {
  v1::RegisterRegionRequest request;
  request.mutable_shared()->set_token(token);
  return Register(client, session, std::move(request), timeout);
}

absl::StatusOr<std::string> RegisteredRegion::Share(v1::ShareAccess access,
                                                    absl::Duration timeout) {
  v1::ShareRegionRequest request;
  request.set_session_id(session_id_);
  request.set_region_id(id_);
  request.set_access(access);
  absl::StatusOr<v1::ShareRegionResponse> response =
      client_.ShareRegion(request, timeout);
  if (!response.ok()) return response.status();
  return response->token();
}

absl::StatusOr<std::unique_ptr<RegisteredRegion>> RegisteredRegion::RegisterShm(
    Client& client, const Session& session, const SharedMemorySegment& segment,
    uint64_t offset_bytes, uint64_t size_bytes, absl::Duration timeout) {
  const uint64_t segment_bytes = static_cast<uint64_t>(segment.size_bytes());
  if (offset_bytes >= segment_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("offset ", offset_bytes, " is not inside segment '",
                     segment.name(), "' of ", segment_bytes, " bytes"));
  }
  if (size_bytes == 0) size_bytes = segment_bytes - offset_bytes;
  v1::RegisterRegionRequest request;
  v1::ShmRegion* shm = request.mutable_shm();
  shm->set_name(segment.name());
  shm->set_offset_bytes(offset_bytes);
  shm->set_size_bytes(size_bytes);
  // The daemon checks the range against the object's size itself.
  return Register(client, session, std::move(request), timeout);
}

absl::StatusOr<bool> RegisteredRegion::Unregister(absl::Duration timeout) {
  if (!registered_) {
    return absl::FailedPreconditionError(
        absl::StrCat("region '", id_, "' was unregistered already"));
  }
  registered_ = false;
  v1::UnregisterRegionRequest request;
  request.set_session_id(session_id_);
  request.set_region_id(id_);
  absl::StatusOr<v1::UnregisterRegionResponse> response =
      client_.UnregisterRegion(request, timeout);
  if (!response.ok()) return response.status();
  return response->deferred();
}

RegisteredRegion::~RegisteredRegion() {
  if (registered_) Unregister(absl::Seconds(5)).IgnoreError();
}

}  // namespace matmul
