// A minimal HTTP/1.1 endpoint that serves the Prometheus text exposition at
// GET /metrics: one thread running a poll() loop over every connection, so
// that no client (idle, trickling a byte at a time, or never reading its
// answer) holds up anyone else's scrape. Each connection gets one request
// and one answer, then is closed:
//   * the whole request head must arrive within `request_timeout` of the
//     connection being accepted (not per byte), or the connection is
//     closed; the answer must be taken within the same time again;
//   * a head over `max_request_bytes` gets 431, a malformed one 400, a
//     method other than GET 405, a path other than /metrics (or
//     /debug/requests, where served) 404;
//   * past `max_connections` open connections, new ones get a 503 (when
//     the socket takes it at once) and are closed at once.
//
// Why not prometheus-cpp's civetweb Exposer: in a process that also loads
// cuBLASLt (as the daemon does), civetweb's mg_start fails on Debian 12
// ("null context when constructing CivetServer") with the port free; a
// scrape endpoint needs no more than this.
#ifndef MATMUL_SERVER_METRICS_METRICS_HTTP_SERVER_H_
#define MATMUL_SERVER_METRICS_METRICS_HTTP_SERVER_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/unique_fd.h"

namespace matmul {

struct MetricsHttpOptions {
  int max_connections = 64;
  absl::Duration request_timeout = absl::Seconds(5);
  size_t max_request_bytes = 8192;  // the request head, request line included
};

class MetricsHttpServer {
 public:
  // Listens on `address` ("host:port"; port 0 picks one) and answers every
  // GET /metrics with `render()`, and GET /debug/requests with
  // `render_requests()` where given (both called on the server's thread).
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Create(
      const std::string& address, std::function<std::string()> render,
      const MetricsHttpOptions& options = {},
      std::function<std::string()> render_requests = nullptr);
  ~MetricsHttpServer();  // stops the thread, closes every socket

  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }

 private:
  struct Connection;

  MetricsHttpServer(UniqueFd listener, UniqueFd wake, int port,
                    std::function<std::string()> render,
                    std::function<std::string()> render_requests,
                    const MetricsHttpOptions& options);
  void ServeLoop();
  // Takes every pending connection (or refuses it when at the cap).
  void AcceptAll(std::vector<std::unique_ptr<Connection>>& connections);
  // Reads what `connection` sent; queues the answer once the head is in.
  // False when the connection is done with.
  bool OnReadable(Connection& connection);
  // Sends what the socket takes of the answer; false when done with.
  bool OnWritable(Connection& connection);
  // The answer to a complete request head.
  std::string Answer(const std::string& head);

  const UniqueFd listener_;
  const UniqueFd wake_;  // an eventfd: the destructor's nudge to the loop
  const int port_;
  const std::function<std::string()> render_;
  const std::function<std::string()> render_requests_;
  const MetricsHttpOptions options_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace matmul

#endif  // MATMUL_SERVER_METRICS_METRICS_HTTP_SERVER_H_
