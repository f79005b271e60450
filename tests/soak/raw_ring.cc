#include "tests/soak/raw_ring.h"

#include <algorithm>
#include <cstring>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/client.h"

namespace matmul::soak {

absl::StatusOr<Mapping> FindMapping(const std::string& shm_name) {
  std::ifstream maps("/proc/self/maps");
  if (!maps) return absl::UnavailableError("cannot read /proc/self/maps");
  const std::string path = "/dev/shm/" + shm_name;
  for (std::string line; std::getline(maps, line);) {
    // "start-end perms offset dev inode   /dev/shm/name (deleted)"
    const size_t at = line.find(path);
    if (at == std::string::npos) continue;
    const size_t after = at + path.size();
    if (after != line.size() && line[after] != ' ') continue;  // a longer name
    const size_t dash = line.find('-');
    const size_t space = line.find(' ');
    uint64_t start = 0, end = 0;
    if (dash == std::string::npos || space == std::string::npos ||
        dash > space || !absl::SimpleHexAtoi(line.substr(0, dash), &start) ||
        !absl::SimpleHexAtoi(line.substr(dash + 1, space - dash - 1), &end) ||
        end <= start) {
      return absl::InternalError(
          absl::StrCat("unreadable /proc/self/maps line '", line, "'"));
    }
    return Mapping{.data = reinterpret_cast<char*>(start),
                   .bytes = static_cast<size_t>(end - start)};
  }
  return absl::NotFoundError(absl::StrCat("this process does not map ", path));
}

absl::StatusOr<RawRing> RawRing::Open(Mapping mapping, uint32_t slot_count,
                                      uint32_t slot_bytes) {
  if (slot_count < 1 || slot_bytes < sizeof(ring::SlotHeader) ||
      mapping.bytes < ring::RingBytes(slot_count, slot_bytes)) {
    return absl::FailedPreconditionError(
        absl::StrCat("a mapping of ", mapping.bytes, " bytes cannot hold ",
                     slot_count, " slots of ", slot_bytes, " bytes"));
  }
  return RawRing(ring::RingView(mapping.data, slot_count, slot_bytes));
}

void RawRing::WriteSlot(uint32_t index, absl::string_view payload,
                        uint32_t request_bytes, int64_t timeout_ns, bool notify,
                        uint32_t state) {
  std::memcpy(view_.payload(index), payload.data(),
              std::min<size_t>(payload.size(), payload_bytes()));
  view_.WriteRequestFields(index, request_bytes, timeout_ns, notify);
  view_.PublishState(index, state);
}

bool RawRing::WriteRequest(uint32_t index, const v1::MatmulRequest& request,
                           int64_t timeout_ns, bool notify) {
  const std::string bytes = request.SerializeAsString();
  if (bytes.size() > payload_bytes()) return false;
  WriteSlot(index, bytes, static_cast<uint32_t>(bytes.size()), timeout_ns,
            notify);
  return true;
}

uint64_t RawRing::Reserve(uint64_t count) {
  return view_.ReserveSubmissions(count);
}

void RawRing::Publish(uint64_t position, uint32_t slot_index,
                      uint64_t sequence) {
  view_.PublishSubmission(position, slot_index, sequence);
  view_.RingDoorbell();
}

bool RawRing::WaitDone(uint32_t index, absl::Time deadline) const {
  while (view_.State(index) != ring::kDone) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Microseconds(100));
  }
  return true;
}

absl::Status RawRing::ReadAnswer(uint32_t index,
                                 v1::MatmulResponse* response) const {
  const uint32_t bytes = view_.ResponseBytes(index);
  if (bytes > payload_bytes() ||
      !response->ParseFromArray(view_.payload(index),
                                static_cast<int>(bytes))) {
    return absl::InternalError(absl::StrCat("the daemon's answer in ring slot ",
                                            index, " (", bytes,
                                            " bytes) is not a MatmulResponse"));
  }
  return ResponseStatus(*response);
}

int RawRing::CompletionsOf(uint32_t index, uint64_t from, uint64_t to) const {
  int count = 0;
  for (uint64_t position = from; position < to; ++position) {
    if (view_.CompletionPublished(position) &&
        view_.CompletedSlot(position) == index) {
      ++count;
    }
  }
  return count;
}

}  // namespace matmul::soak
