// A minimal HTTP/1.1 endpoint that serves the Prometheus text exposition at
// GET /metrics (and 404 for anything else), one short connection at a time.
//
// Why not prometheus-cpp's civetweb Exposer: in a process that also loads
// cuBLASLt (as the daemon does), civetweb's mg_start fails on Debian 12
// ("null context when constructing CivetServer") with the port free; a
// scrape endpoint needs no more than this.
#ifndef MATMUL_SERVER_METRICS_HTTP_SERVER_H_
#define MATMUL_SERVER_METRICS_HTTP_SERVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace matmul {

class MetricsHttpServer {
 public:
  // Listens on `address` ("host:port"; port 0 picks one) and answers every
  // GET /metrics with `render()`.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Create(
      const std::string& address, std::function<std::string()> render);
  ~MetricsHttpServer();  // stops the thread, closes the socket

  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }

 private:
  MetricsHttpServer(int listen_fd, int port,
                    std::function<std::string()> render);
  void ServeLoop();
  void ServeConnection(int fd);

  const int listen_fd_;
  const int port_;
  const std::function<std::string()> render_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace matmul

#endif  // MATMUL_SERVER_METRICS_HTTP_SERVER_H_
