#include "tests/soak/daemon_probe.h"

#include <dirent.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/unique_fd.h"

namespace matmul::soak {
namespace {

std::optional<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct ProcStat {
  char state = '?';
  uint64_t start_ticks = 0;
};

// Fields 3 (state) and 22 (starttime) of /proc/<pid>/stat, counted after
// the command name's closing parenthesis, which may itself hold spaces.
std::optional<ProcStat> ReadProcStat(int pid) {
  std::optional<std::string> stat =
      ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  if (!stat.has_value()) return std::nullopt;
  const size_t paren = stat->rfind(')');
  if (paren == std::string::npos) return std::nullopt;
  std::vector<absl::string_view> fields = absl::StrSplit(
      absl::string_view(*stat).substr(paren + 1), ' ', absl::SkipEmpty());
  ProcStat parsed;
  if (fields.size() < 20 || fields[0].empty() ||
      !absl::SimpleAtoi(fields[19], &parsed.start_ticks)) {
    return std::nullopt;
  }
  parsed.state = fields[0][0];
  return parsed;
}

std::optional<int64_t> RssBytes(int pid) {
  std::optional<std::string> status =
      ReadFile(absl::StrCat("/proc/", pid, "/status"));
  if (!status.has_value()) return std::nullopt;
  for (absl::string_view line : absl::StrSplit(*status, '\n')) {
    if (!absl::ConsumePrefix(&line, "VmRSS:")) continue;
    line = absl::StripAsciiWhitespace(line);
    absl::ConsumeSuffix(&line, " kB");
    int64_t kib = 0;
    if (absl::SimpleAtoi(line, &kib)) return kib * 1024;
  }
  return std::nullopt;
}

std::optional<int64_t> CountDirEntries(const std::string& path) {
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return std::nullopt;
  int64_t count = 0;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count;
}

std::optional<int64_t> ShmMappings(int pid, const std::string& prefix) {
  std::ifstream maps(absl::StrCat("/proc/", pid, "/maps"));
  if (!maps) return std::nullopt;
  const std::string needle = "/dev/shm/" + prefix;
  int64_t count = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.find(needle) != std::string::npos) ++count;
  }
  return count;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DaemonProbe>> DaemonProbe::Create(
    int pid, std::string metrics_address, std::string shm_prefix) {
  std::string host, port;
  if (!metrics_address.empty()) {
    const size_t colon = metrics_address.rfind(':');
    if (colon == std::string::npos || colon + 1 == metrics_address.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("metrics address '", metrics_address,
                       "' has no port; expected host:port"));
    }
    host = metrics_address.substr(0, colon);
    port = metrics_address.substr(colon + 1);
    if (host.empty()) host = "127.0.0.1";
  }
  return std::unique_ptr<DaemonProbe>(new DaemonProbe(
      pid, std::move(host), std::move(port), std::move(shm_prefix)));
}

DaemonSnapshot DaemonProbe::Sample() const {
  DaemonSnapshot snapshot;
  if (pid_ > 0) {
    // A daemon that died stays a zombie until its parent reaps it.
    const std::optional<ProcStat> stat = ReadProcStat(pid_);
    snapshot.alive =
        stat.has_value() && stat->state != 'Z' && stat->state != 'X';
    if (!snapshot.alive) return snapshot;
    snapshot.start_ticks = stat->start_ticks;
    snapshot.rss_bytes = RssBytes(pid_);
    snapshot.open_fds = CountDirEntries(absl::StrCat("/proc/", pid_, "/fd"));
    snapshot.shm_mappings = ShmMappings(pid_, shm_prefix_);
  }
  if (!port_.empty()) {
    absl::StatusOr<std::string> scrape =
        ScrapeMetrics(host_, port_, absl::Seconds(10));
    if (!scrape.ok()) {
      snapshot.metrics_error = scrape.status().ToString();
    } else {
      snapshot.sessions = SumOfFamily(*scrape, "matmul_sessions");
      snapshot.regions = SumOfFamily(*scrape, "matmul_regions");
      snapshot.region_bytes = SumOfFamily(*scrape, "matmul_region_bytes");
      snapshot.rings = SumOfFamily(*scrape, "matmul_rings_attached");
      snapshot.in_flight = SumOfFamily(*scrape, "matmul_requests_in_flight");
    }
  }
  return snapshot;
}

std::optional<int64_t> DaemonProbe::SampleRss() const {
  if (pid_ <= 0) return std::nullopt;
  return RssBytes(pid_);
}

absl::StatusOr<std::string> DaemonProbe::Fetch(const std::string& path,
                                               absl::Duration timeout) const {
  if (port_.empty()) {
    return absl::FailedPreconditionError(
        "no metrics address (--metrics) to fetch from");
  }
  return ScrapeMetrics(host_, port_, timeout, path);
}

absl::StatusOr<std::string> ScrapeMetrics(const std::string& host,
                                          const std::string& port,
                                          absl::Duration timeout,
                                          const std::string& path) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
      rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("resolving ", host, ":", port, ": ", gai_strerror(rc)));
  }
  UniqueFd fd;
  std::string last_error = "no address";
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    UniqueFd candidate(
        socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!candidate.valid()) continue;
    timeval tv = absl::ToTimeval(timeout);
    setsockopt(candidate.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(candidate.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(candidate.get(), ai->ai_addr, ai->ai_addrlen) == 0) {
      fd = std::move(candidate);
      break;
    }
    last_error = std::strerror(errno);
  }
  freeaddrinfo(found);
  if (!fd.valid()) {
    return absl::UnavailableError(
        absl::StrCat("connecting to ", host, ":", port, ": ", last_error));
  }
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", host, "\r\n\r\n");
  if (send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    return absl::UnavailableError(absl::StrCat("sending to ", host, ":", port,
                                               ": ", std::strerror(errno)));
  }
  std::string response;
  char buffer[16384];
  for (;;) {
    const ssize_t got = recv(fd.get(), buffer, sizeof(buffer), 0);
    if (got == 0) break;
    if (got < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(absl::StrCat("reading ", path, " from ",
                                                 host, ":", port, ": ",
                                                 std::strerror(errno)));
    }
    response.append(buffer, static_cast<size_t>(got));
  }
  const size_t body = response.find("\r\n\r\n");
  const std::string status_line = response.substr(0, response.find('\r'));
  if (!absl::StartsWith(response, "HTTP/1.") || body == std::string::npos ||
      response.find(" 200 ") > body) {
    const std::string message =
        absl::StrCat("GET ", path, " from ", host, ":", port,
                     " did not answer 200: '", status_line, "'");
    if (absl::StrContains(status_line, " 404 ")) {
      return absl::NotFoundError(message);
    }
    return absl::UnavailableError(message);
  }
  return response.substr(body + 4);
}

std::optional<double> SumOfFamily(absl::string_view scrape,
                                  absl::string_view name) {
  std::optional<double> sum;
  for (absl::string_view line : absl::StrSplit(scrape, '\n')) {
    if (!absl::ConsumePrefix(&line, name)) continue;
    if (line.empty() || (line[0] != ' ' && line[0] != '{')) continue;
    const size_t space = line.rfind(' ');
    double value = 0;
    if (space == absl::string_view::npos ||
        !absl::SimpleAtod(line.substr(space + 1), &value)) {
      continue;
    }
    sum = sum.value_or(0) + value;
  }
  return sum;
}

std::vector<std::string> ShmEntries(absl::string_view prefix) {
  std::vector<std::string> names;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return names;
  while (dirent* entry = readdir(dir)) {
    if (absl::StartsWith(entry->d_name, prefix)) {
      names.emplace_back(entry->d_name);
    }
  }
  closedir(dir);
  return names;
}

std::optional<int> SegmentOwnerPid(absl::string_view name,
                                   absl::string_view prefix) {
  if (!absl::ConsumePrefix(&name, prefix) || !absl::ConsumePrefix(&name, "-")) {
    return std::nullopt;
  }
  absl::ConsumePrefix(&name, "py");
  const size_t end = name.find_first_not_of("0123456789");
  int pid = 0;
  if (end == 0 || end == absl::string_view::npos ||
      !absl::SimpleAtoi(name.substr(0, end), &pid)) {
    return std::nullopt;
  }
  return pid;
}

}  // namespace matmul::soak
