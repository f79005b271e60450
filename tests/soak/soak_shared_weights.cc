// The shared-weight scenarios: products of the worker's session over a
// weight that another session owns and shares (ShareRegion), read through a
// region opened from the share, while the owner withdraws it (shared_weight)
// or its process is killed (shared_kill). Every product must be right while
// the share stands and NOT_FOUND once it is gone, soon after; nothing may
// write the weight through the opened region.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/unique_fd.h"
#include "tests/soak/soak_worker.h"
#include "tests/soak/weight_products.h"

namespace matmul::soak {
namespace {

using absl::StatusCode;

// Products over the weight in flight at once: with one shape, they may run
// as one stacked launch.
constexpr int kReaders = 4;

// How long products over a withdrawn weight may still run: the daemon
// learns of a killed owner when its session's stream breaks.
constexpr absl::Duration kWithdrawalGrace = absl::Seconds(5);

constexpr v1::ShareAccess kAccesses[] = {v1::SHARE_ACCESS_SAME_USER,
                                         v1::SHARE_ACCESS_SAME_GROUP,
                                         v1::SHARE_ACCESS_ANY_LOCAL};

// `products` reading their B from the opened region `region_id`.
absl::StatusOr<std::vector<v1::MatmulRequest>> ReadsOf(
    const std::vector<v1::MatmulRequest>& products,
    const std::string& region_id, const std::string& session_id) {
  std::vector<v1::MatmulRequest> reads;
  for (const v1::MatmulRequest& product : products) {
    absl::StatusOr<uint64_t> bytes = RegionBytes(product);
    if (!bytes.ok()) return bytes.status();
    std::vector<char> scratch(*bytes);  // the reader has no copy to write
    absl::StatusOr<v1::MatmulRequest> read = ReadingTheWeightFrom(
        product, absl::MakeSpan(scratch), region_id, session_id);
    if (!read.ok()) return read.status();
    reads.push_back(*std::move(read));
  }
  return reads;
}

// The token line a share holder prints, or why there is none.
absl::StatusOr<std::string> ReadToken(int fd, absl::Duration timeout) {
  std::string line;
  const absl::Time deadline = absl::Now() + timeout;
  while (line.find('\n') == std::string::npos) {
    const absl::Duration left = deadline - absl::Now();
    pollfd ready{.fd = fd, .events = POLLIN, .revents = 0};
    const int polled =
        left > absl::ZeroDuration()
            ? poll(&ready, 1, static_cast<int>(absl::ToInt64Milliseconds(left)))
            : 0;
    if (polled == 0) {
      return absl::DeadlineExceededError("no token from the holder in time");
    }
    if (polled < 0 && errno == EINTR) continue;
    char chunk[256];
    const ssize_t n = polled > 0 ? read(fd, chunk, sizeof(chunk)) : -1;
    if (n <= 0) {
      return absl::UnavailableError(
          n == 0 ? "the holder ended without a token"
                 : absl::StrCat("reading the token: ", std::strerror(errno)));
    }
    line.append(chunk, static_cast<size_t>(n));
  }
  return std::string(absl::StripAsciiWhitespace(line));
}

}  // namespace

int SoakWorker::SendOverWeight(const char* scenario,
                               const std::vector<v1::MatmulRequest>& products,
                               const std::vector<v1::MatmulRequest>& reads,
                               bool may_be_withdrawn) {
  std::vector<std::future<absl::StatusOr<v1::MatmulResponse>>> answers;
  for (const v1::MatmulRequest& read : reads) {
    answers.push_back(client_->MatmulFuture(read, options_.call_timeout));
  }
  int not_found = 0;
  for (size_t i = 0; i < answers.size(); ++i) {
    absl::StatusOr<v1::MatmulResponse> response = answers[i].get();
    const bool expected =
        may_be_withdrawn
            ? tally().Record(scenario, "Matmul(shared)", response.status(),
                             {StatusCode::kOk, StatusCode::kNotFound})
            : tally().Record(scenario, "Matmul(shared)", response.status(),
                             {StatusCode::kOk});
    if (!expected) {
      continue;
    }
    if (response.ok()) {
      CheckInline(scenario, products[i], *response);
    } else if (absl::IsNotFound(response.status())) {
      ++not_found;
    }
  }
  return not_found;
}

void SoakWorker::ExpectWithdrawn(const char* scenario,
                                 const std::vector<v1::MatmulRequest>& products,
                                 const std::vector<v1::MatmulRequest>& reads) {
  const absl::Time deadline = absl::Now() + kWithdrawalGrace;
  while (SendOverWeight(scenario, products, reads, /*may_be_withdrawn=*/true) ==
         0) {
    if (absl::Now() > deadline) {
      return tally().Fail(
          scenario, absl::StrCat("products over a withdrawn shared weight "
                                 "still ran ",
                                 absl::FormatDuration(kWithdrawalGrace),
                                 " after its owner withdrew it or died"));
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  // Gone for good.
  tally().Record(scenario, "Matmul(shared, withdrawn)",
                 client_->Matmul(reads.front(), options_.call_timeout).status(),
                 {StatusCode::kNotFound});
  tally().Count(scenario, "withdrawn");
}

void SoakWorker::SharedWeight() {
  const char* kScenario = "shared_weight";
  if (!EnsureSession()) return;
  absl::StatusOr<std::vector<v1::MatmulRequest>> products =
      ProductsOverOneWeight(rng_(), options_.max_dim, kReaders);
  absl::StatusOr<uint64_t> bytes =
      products.ok() ? RegionBytes(products->front()) : products.status();
  if (!bytes.ok()) return tally().Fail(kScenario, bytes.status().ToString());

  // The owner: a session of its own, the weight in a fresh segment.
  absl::StatusOr<std::unique_ptr<Session>> owner =
      Session::Open(*client_, "matmul-soak owner", options_.call_timeout);
  if (!tally().Record("setup", "OpenSession", owner.status(),
                      {StatusCode::kOk})) {
    return;
  }
  absl::StatusOr<std::unique_ptr<SharedMemorySegment>> segment =
      SharedMemorySegment::Create(static_cast<int64_t>(*bytes),
                                  options_.shm_prefix);
  if (!segment.ok()) {
    return tally().Fail("setup", segment.status().ToString());
  }
  if (absl::StatusOr<v1::MatmulRequest> written =
          ReadingTheWeightFrom(products->front(), (*segment)->bytes(), "", "");
      !written.ok()) {
    return tally().Fail(kScenario, written.status().ToString());
  }
  absl::StatusOr<std::unique_ptr<RegisteredRegion>> weight =
      RegisteredRegion::RegisterShm(*client_, **owner, **segment, 0, 0,
                                    options_.call_timeout);
  (*segment)->Unlink();
  if (!tally().Record("setup", "RegisterRegion(shm)", weight.status(),
                      {StatusCode::kOk})) {
    return;
  }
  absl::StatusOr<std::string> token = (*weight)->Share(
      kAccesses[rng_() % std::size(kAccesses)], options_.call_timeout);
  if (!tally().Record(kScenario, "ShareRegion", token.status(),
                      {StatusCode::kOk})) {
    return;
  }

  // The reader: the worker's own session.
  absl::StatusOr<std::unique_ptr<RegisteredRegion>> opened =
      RegisteredRegion::RegisterShared(*client_, *session_, *token,
                                       options_.call_timeout);
  if (!tally().Record(kScenario, "RegisterRegion(shared)", opened.status(),
                      {StatusCode::kOk})) {
    return;
  }
  absl::StatusOr<std::vector<v1::MatmulRequest>> reads =
      ReadsOf(*products, (*opened)->id(), session_->session_id());
  if (!reads.ok()) return tally().Fail(kScenario, reads.status().ToString());
  SendOverWeight(kScenario, *products, *reads, /*may_be_withdrawn=*/false);

  // Nothing writes the weight through the opened region.
  absl::StatusOr<uint64_t> write_bytes =
      RegionBytes(products->front(), /*output_there=*/true);
  std::vector<char> scratch(write_bytes.ok() ? *write_bytes : 0);
  absl::StatusOr<v1::MatmulRequest> write =
      ReadingTheWeightFrom(products->front(), absl::MakeSpan(scratch),
                           (*opened)->id(), session_->session_id(),
                           /*output_there=*/true);
  if (!write.ok()) return tally().Fail(kScenario, write.status().ToString());
  tally().Record(kScenario, "Matmul(write shared)",
                 client_->Matmul(*write, options_.call_timeout).status(),
                 {StatusCode::kPermissionDenied});

  // Withdrawn while products are in flight: unregistered, or the owner's
  // session closed.
  std::vector<std::future<absl::StatusOr<v1::MatmulResponse>>> racing;
  for (const v1::MatmulRequest& read : *reads) {
    racing.push_back(client_->MatmulFuture(read, options_.call_timeout));
  }
  absl::SleepFor(RandomDelay(absl::Microseconds(500)));
  if (rng_() % 2 == 0) {
    tally().Record(kScenario, "UnregisterRegion",
                   (*weight)->Unregister(options_.call_timeout).status(),
                   {StatusCode::kOk});
  } else {
    weight->reset();
    owner->reset();
  }
  for (size_t i = 0; i < racing.size(); ++i) {
    absl::StatusOr<v1::MatmulResponse> response = racing[i].get();
    if (tally().Record(kScenario, "Matmul(shared, withdrawn)",
                       response.status(),
                       {StatusCode::kOk, StatusCode::kNotFound}) &&
        response.ok()) {
      CheckInline(kScenario, (*products)[i], *response);
    }
  }
  ExpectWithdrawn(kScenario, *products, *reads);
}

void SoakWorker::SharedKill() {
  const char* kScenario = "shared_kill";
  if (options_.holder_path.empty() ||
      !shared_.TryStartHolder(options_.max_holders)) {
    return tally().Count(kScenario, "skipped");
  }
  if (!EnsureSession()) return shared_.HolderDone(0);
  const uint64_t seed = rng_();
  absl::StatusOr<std::vector<v1::MatmulRequest>> products =
      ProductsOverOneWeight(seed, options_.max_dim, kReaders);
  if (!products.ok()) {
    tally().Fail(kScenario, products.status().ToString());
    return shared_.HolderDone(0);
  }
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    tally().Fail(kScenario, absl::StrCat("pipe2: ", std::strerror(errno)));
    return shared_.HolderDone(0);
  }
  UniqueFd from_holder(pipe_fds[0]);
  UniqueFd holders_end(pipe_fds[1]);
  const pid_t pid =
      SpawnHolder(HolderMode::kShareWeight, kScenario, seed, holders_end.get());
  holders_end.reset();  // so that its exit ends the pipe
  if (pid <= 0) return shared_.HolderDone(0);
  // Ends the holder however this step ends.
  auto end_holder = [&] {
    int wstatus = 0;
    if (waitpid(pid, &wstatus, WNOHANG) == pid) {
      tally().Fail(kScenario,
                   absl::StrCat("share holder ", pid, " ended by itself (",
                                WaitStatusText(wstatus), ")"));
    } else {
      kill(pid, SIGKILL);
      waitpid(pid, &wstatus, 0);
      tally().Count(kScenario, "killed");
    }
    shared_.HolderDone(pid);
  };

  absl::StatusOr<std::string> token =
      ReadToken(from_holder.get(), absl::Seconds(20));
  if (!token.ok()) {
    tally().Fail(kScenario, token.status().ToString());
    return end_holder();
  }
  absl::StatusOr<std::unique_ptr<RegisteredRegion>> opened =
      RegisteredRegion::RegisterShared(*client_, *session_, *token,
                                       options_.call_timeout);
  if (!tally().Record(kScenario, "RegisterRegion(shared)", opened.status(),
                      {StatusCode::kOk})) {
    return end_holder();
  }
  absl::StatusOr<std::vector<v1::MatmulRequest>> reads =
      ReadsOf(*products, (*opened)->id(), session_->session_id());
  if (!reads.ok()) {
    tally().Fail(kScenario, reads.status().ToString());
    return end_holder();
  }
  // Products in flight, burst after burst, until the kill comes 0-300 ms
  // in; then they may be NOT_FOUND, and soon must be.
  const absl::Time kill_at = absl::Now() + RandomDelay(absl::Milliseconds(300));
  do {
    SendOverWeight(kScenario, *products, *reads, /*may_be_withdrawn=*/false);
  } while (absl::Now() < kill_at);
  std::future<void> racing = std::async(std::launch::async, [&] {
    SendOverWeight(kScenario, *products, *reads, /*may_be_withdrawn=*/true);
  });
  end_holder();
  racing.get();
  ExpectWithdrawn(kScenario, *products, *reads);
}

}  // namespace matmul::soak
