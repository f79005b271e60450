// A client in a process of its own, for tests that need a caller other
// than the test process: another pid (session ownership, per-client
// quotas) or another user (the socket's mode and group). It optionally
// drops to a uid and groups first, then runs one command and prints one
// result line per call: the status code's name.
//
//   transport_probe [--as_uid=N --as_gid=N --groups=G1,G2] TARGET COMMAND
//   COMMAND: info                       GetServerInfo
//            use_session SESSION_ID     ListRegions and AttachRing in it
//            flood SECONDS CONCURRENCY  inline 64x64x64 products, counted
//                                       by outcome ("OK 812", ...)
//            register_shm NAME          RegisterRegion of its first 4 KiB
//                                       in a session of its own
#include <grp.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "client/regions/registered_region.h"
#include "client/request_builder.h"
#include "client/session.h"

namespace {

std::string CodeName(const absl::Status& status) {
  return absl::StatusCodeToString(status.code());
}

bool DropPrivileges(int argc, char** argv, int* first) {
  int uid = -1, gid = -1;
  std::vector<gid_t> groups;
  bool set_groups = false;
  for (; *first < argc; ++*first) {
    absl::string_view arg = argv[*first];
    if (absl::ConsumePrefix(&arg, "--as_uid=")) {
      if (!absl::SimpleAtoi(arg, &uid)) return false;
    } else if (absl::ConsumePrefix(&arg, "--as_gid=")) {
      if (!absl::SimpleAtoi(arg, &gid)) return false;
    } else if (absl::ConsumePrefix(&arg, "--groups=")) {
      set_groups = true;
      for (absl::string_view g : absl::StrSplit(arg, ',', absl::SkipEmpty())) {
        uint32_t value = 0;
        if (!absl::SimpleAtoi(g, &value)) return false;
        groups.push_back(value);
      }
    } else {
      break;
    }
  }
  if (set_groups && setgroups(groups.size(), groups.data()) != 0) return false;
  if (gid >= 0 && setgid(static_cast<gid_t>(gid)) != 0) return false;
  if (uid >= 0 && setuid(static_cast<uid_t>(uid)) != 0) return false;
  return true;
}

matmul::v1::MatmulRequest SmallProduct() {
  std::mt19937_64 rng(std::random_device{}());
  absl::StatusOr<matmul::v1::MatmulRequest> request =
      matmul::MakeRandomRequest({.m = 64, .n = 64, .k = 64}, rng);
  return request.ok() ? *std::move(request) : matmul::v1::MatmulRequest();
}

int Flood(matmul::Client& client, double seconds, int concurrency) {
  const matmul::v1::MatmulRequest request = SmallProduct();
  const absl::Time end = absl::Now() + absl::Seconds(seconds);
  absl::Mutex mu;
  std::map<std::string, int> outcomes;
  std::vector<std::thread> threads;
  for (int t = 0; t < concurrency; ++t) {
    threads.emplace_back([&] {
      while (absl::Now() < end) {
        absl::Status status =
            client.Matmul(request, absl::Seconds(30)).status();
        absl::MutexLock lock(&mu);
        ++outcomes[CodeName(status)];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const auto& [code, count] : outcomes) {
    std::printf("%s %d\n", code.c_str(), count);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int next = 1;
  if (!DropPrivileges(argc, argv, &next) || argc - next < 2) {
    std::fprintf(stderr,
                 "usage: transport_probe [--as_uid=N --as_gid=N "
                 "--groups=G,...] TARGET info|use_session ID|flood S C|"
                 "register_shm NAME\n");
    return 2;
  }
  const std::string target = argv[next];
  const std::string command = argv[next + 1];
  absl::StatusOr<std::unique_ptr<matmul::Client>> client =
      matmul::Client::Create(target);
  if (!client.ok()) {
    std::printf("%s\n", CodeName(client.status()).c_str());
    return 1;
  }
  if (command == "info") {
    std::printf(
        "%s\n",
        CodeName((*client)->GetServerInfo(absl::Seconds(5)).status()).c_str());
    return 0;
  }
  if (command == "use_session" && argc - next == 3) {
    const std::string session = argv[next + 2];
    std::printf(
        "%s\n",
        CodeName((*client)->ListRegions(session, absl::Seconds(5)).status())
            .c_str());
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    matmul::v1::AttachRingRequest attach;
    attach.set_session_id(session);
    attach.set_shm_name("matmul-probe-ring");
    std::unique_ptr<grpc::ClientReader<matmul::v1::RingEvent>> reader =
        (*client)->stub().AttachRing(&context, attach);
    matmul::v1::RingEvent event;
    while (reader->Read(&event)) {
    }
    std::printf("%s\n",
                CodeName(matmul::FromGrpcStatus(reader->Finish())).c_str());
    return 0;
  }
  if (command == "register_shm" && argc - next == 3) {
    absl::StatusOr<std::unique_ptr<matmul::Session>> session =
        matmul::Session::Open(**client, "transport_probe", absl::Seconds(10));
    if (!session.ok()) {
      std::printf("%s\n", CodeName(session.status()).c_str());
      return 0;
    }
    matmul::v1::RegisterRegionRequest request;
    request.mutable_shm()->set_name(argv[next + 2]);
    request.mutable_shm()->set_size_bytes(4096);
    std::printf("%s\n",
                CodeName(matmul::RegisteredRegion::Register(
                             **client, **session, request, absl::Seconds(10))
                             .status())
                    .c_str());
    return 0;
  }
  double seconds = 0;
  int concurrency = 0;
  if (command == "flood" && argc - next == 4 &&
      absl::SimpleAtod(argv[next + 2], &seconds) &&
      absl::SimpleAtoi(argv[next + 3], &concurrency) && concurrency > 0) {
    return Flood(**client, seconds, concurrency);
  }
  std::fprintf(stderr, "transport_probe: unknown command '%s'\n",
               command.c_str());
  return 2;
}
