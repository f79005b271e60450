// The soak's own parsing: Prometheus families, segment owners, scenario
// lists; and the raw view of a ring's mapping. (The soak itself runs as the
// soak_short test.)
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/regions/shared_memory_segment.h"
#include "gtest/gtest.h"
#include "tests/soak/daemon_probe.h"
#include "tests/soak/raw_ring.h"
#include "tests/soak/soak_report.h"
#include "tests/soak/soak_scenarios.h"

namespace matmul::soak {
namespace {

TEST(SumOfFamilyTest, SumsEveryLabelSetOfTheFamilyOnly) {
  const std::string scrape =
      "# HELP matmul_regions Regions registered\n"
      "# TYPE matmul_regions gauge\n"
      "matmul_regions{kind=\"shm\"} 3\n"
      "matmul_regions{kind=\"cuda_ipc\"} 2\n"
      "matmul_region_bytes{kind=\"shm\"} 4096\n"
      "matmul_sessions 7\n";
  EXPECT_EQ(SumOfFamily(scrape, "matmul_regions"), 5.0);
  EXPECT_EQ(SumOfFamily(scrape, "matmul_region_bytes"), 4096.0);
  EXPECT_EQ(SumOfFamily(scrape, "matmul_sessions"), 7.0);
  EXPECT_FALSE(SumOfFamily(scrape, "matmul_rings_attached").has_value());
  EXPECT_FALSE(SumOfFamily(scrape, "matmul_region").has_value());
}

TEST(SegmentOwnerPidTest, ReadsCxxAndPythonNames) {
  EXPECT_EQ(SegmentOwnerPid("soak-1234-4026531836-00ff00ff00ff00ff", "soak"),
            1234);
  EXPECT_EQ(SegmentOwnerPid("soak-1234-00ff00ff00ff00ff", "soak"), 1234);
  EXPECT_EQ(SegmentOwnerPid("soak-py77-3-abcdef", "soak"), 77);
  EXPECT_FALSE(SegmentOwnerPid("soak-x12-ab", "soak").has_value());
  EXPECT_FALSE(SegmentOwnerPid("other-12-ab", "soak").has_value());
  EXPECT_FALSE(SegmentOwnerPid("soak-12", "soak").has_value());
}

TEST(ParseScenariosTest, AllMinusOne) {
  absl::StatusOr<std::vector<Scenario>> all = ParseScenarios("all");
  ASSERT_TRUE(all.ok()) << all.status();
  absl::StatusOr<std::vector<Scenario>> some = ParseScenarios("all,-truncate");
  ASSERT_TRUE(some.ok()) << some.status();
  EXPECT_EQ(some->size() + 1, all->size());
  EXPECT_EQ(ScenarioNames(*some).find("truncate"), std::string::npos);
  EXPECT_NE(ScenarioNames(*all).find("truncate"), std::string::npos);
  EXPECT_EQ(ScenarioNames(*all).find("product_ipc"), std::string::npos);
}

TEST(ParseScenariosTest, RefusesUnknownNamesAndEmptySets) {
  EXPECT_EQ(ParseScenarios("product_inline,nonsense").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseScenarios("kill,-kill").status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::vector<Scenario>> one = ParseScenarios("kill,kill");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->size(), 1u);
}

// Answers each of `answers.size()` connections on 127.0.0.1 with the next
// canned HTTP response, and keeps the request heads it read.
class CannedHttpServer {
 public:
  explicit CannedHttpServer(std::vector<std::string> answers) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
        listen(fd_, 4) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      return;
    }
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this, answers = std::move(answers)] {
      for (const std::string& answer : answers) {
        const int client = accept(fd_, nullptr, nullptr);
        if (client < 0) return;
        std::string head;
        char buffer[1024];
        while (head.find("\r\n\r\n") == std::string::npos) {
          const ssize_t got = recv(client, buffer, sizeof(buffer), 0);
          if (got <= 0) break;
          head.append(buffer, static_cast<size_t>(got));
        }
        heads_.push_back(head);
        (void)send(client, answer.data(), answer.size(), MSG_NOSIGNAL);
        close(client);
      }
    });
  }
  ~CannedHttpServer() {
    if (thread_.joinable()) thread_.join();
    close(fd_);
  }
  std::string port() const { return absl::StrCat(port_); }
  // After the thread served every answer.
  std::vector<std::string> heads() {
    if (thread_.joinable()) thread_.join();
    return heads_;
  }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::vector<std::string> heads_;
};

TEST(ScrapeMetricsTest, GetsThePathItIsGivenAndTellsA404Apart) {
  CannedHttpServer server(
      {"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n"
       "request 17 stage=queued transport=ring\n",
       "HTTP/1.0 200 OK\r\n\r\n",
       "HTTP/1.0 404 Not Found\r\n\r\nnot found; metrics are at /metrics"});
  ASSERT_NE(server.port(), "0");
  absl::StatusOr<std::string> dump = ScrapeMetrics(
      "127.0.0.1", server.port(), absl::Seconds(5), "/debug/requests");
  ASSERT_TRUE(dump.ok()) << dump.status();
  EXPECT_EQ(*dump, "request 17 stage=queued transport=ring\n");
  absl::StatusOr<std::string> empty = ScrapeMetrics(
      "127.0.0.1", server.port(), absl::Seconds(5), "/debug/requests");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(*empty, "");
  absl::StatusOr<std::string> missing = ScrapeMetrics(
      "127.0.0.1", server.port(), absl::Seconds(5), "/debug/requests");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("404 Not Found"),
            std::string::npos);
  const std::vector<std::string> heads = server.heads();
  ASSERT_EQ(heads.size(), 3u);
  EXPECT_EQ(heads[0].substr(0, heads[0].find("\r\n")),
            "GET /debug/requests HTTP/1.0");
}

TEST(SoakReportTest, PrintsTheRequestsDumpAndTheMemoryFigures) {
  SoakReport report;
  report.requests_dump_fetched = true;
  report.requests_dump =
      "request 17 stage=queued transport=ring session=ab12 ring=3 slot=5\n"
      "request 18 stage=running transport=grpc\n";
  report.rss.start = 100'000'000;
  report.rss.after_load = 150'000'000;
  report.rss.after_load_ratio = 1.5;
  report.rss.growth = 0.071;
  report.rss_series = {{absl::Seconds(5), 120'000'000}};
  std::ostringstream text;
  PrintReport(report, text);
  EXPECT_NE(text.str().find("(GET /debug/requests): 2 lines\n  request 17 "
                            "stage=queued"),
            std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find("after load           150.0 MB (1.500 x start)"),
            std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find("growth               7.1%"), std::string::npos)
      << text.str();
  const std::string json = ReportJson(report);
  EXPECT_NE(json.find("\"requests_in_flight_dump\":\"request 17 stage=queued "
                      "transport=ring session=ab12 ring=3 slot=5\\u000arequest "
                      "18"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"after_load_ratio\":1.5,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"series\":[[5.000,120000000]]"), std::string::npos)
      << json;

  report.requests_dump.clear();
  report.requests_dump_error = "NOT_FOUND: GET /debug/requests ... 404";
  std::ostringstream missing;
  PrintReport(report, missing);
  EXPECT_NE(missing.str().find("not fetched: NOT_FOUND"), std::string::npos);
  EXPECT_NE(ReportJson(report).find("\"requests_in_flight_dump\":null"),
            std::string::npos);
}

TEST(ParseScenariosTest, RingScenariosAreInAll) {
  absl::StatusOr<std::vector<Scenario>> all = ParseScenarios("all");
  ASSERT_TRUE(all.ok()) << all.status();
  const std::string names = ScenarioNames(*all);
  EXPECT_NE(names.find("ring_chaos"), std::string::npos);
  EXPECT_NE(names.find("ring_kill"), std::string::npos);
}

TEST(RawRingTest, FindsTheMappingAndWritesTheLayout) {
  constexpr uint32_t kSlots = 4, kSlotBytes = 512;
  const std::string prefix = absl::StrCat("soaktest", getpid());
  absl::StatusOr<std::unique_ptr<SharedMemorySegment>> segment =
      SharedMemorySegment::Create(ring::RingBytes(kSlots, kSlotBytes), prefix);
  ASSERT_TRUE(segment.ok()) << segment.status();
  (*segment)->Unlink();  // as a ring is once attached: "(deleted)"
  absl::StatusOr<Mapping> mapping = FindMapping((*segment)->name());
  ASSERT_TRUE(mapping.ok()) << mapping.status();
  EXPECT_EQ(mapping->data, (*segment)->data());
  EXPECT_GE(mapping->bytes, ring::RingBytes(kSlots, kSlotBytes));
  // A name that only starts like it is another object.
  EXPECT_EQ(
      FindMapping((*segment)->name().substr(0, (*segment)->name().size() - 1))
          .status()
          .code(),
      absl::StatusCode::kNotFound);
  EXPECT_EQ(RawRing::Open(*mapping, kSlots, 1 << 20).status().code(),
            absl::StatusCode::kFailedPrecondition);

  absl::StatusOr<RawRing> raw = RawRing::Open(*mapping, kSlots, kSlotBytes);
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(raw->payload_bytes(), kSlotBytes - sizeof(ring::SlotHeader));
  raw->WriteSlot(2, "abc", 100000, -5, /*notify=*/true, 7);
  char* base = (*segment)->data();
  ring::SlotHeader* slot = ring::Slot(base, kSlots, kSlotBytes, 2);
  EXPECT_EQ(slot->state.load(), 7u);
  EXPECT_EQ(slot->request_bytes, 100000u);
  EXPECT_EQ(slot->timeout_ns, -5);
  EXPECT_EQ(slot->notify, 1u);
  EXPECT_EQ(std::string(ring::Payload(slot), 3), "abc");

  EXPECT_EQ(raw->Reserve(2), 0u);
  EXPECT_EQ(raw->Reserve(), 2u);
  raw->Publish(5, 3);  // position 5: entry 1, sequence 6
  raw->Publish(2, 9, 77);
  EXPECT_EQ(ring::SubmitQueue(base)[1].sequence.load(), 6u);
  EXPECT_EQ(ring::SubmitQueue(base)[1].slot, 3u);
  EXPECT_EQ(ring::SubmitQueue(base)[2].sequence.load(), 77u);
  EXPECT_EQ(ring::Header(base)->doorbell.load(), 2u);

  // Completions of slot 1 at positions 0 and 2; position 1 unpublished.
  ring::QueueEntry* done = ring::CompleteQueue(base, kSlots);
  done[0].slot = 1;
  done[0].sequence.store(1);
  done[1].slot = 1;
  done[2].slot = 1;
  done[2].sequence.store(3);
  EXPECT_EQ(raw->CompletionsOf(1, 0, 3), 2);
  EXPECT_EQ(raw->CompletionsOf(1, 1, 3), 1);
  EXPECT_EQ(raw->CompletionsOf(0, 0, 3), 0);
}

}  // namespace
}  // namespace matmul::soak
