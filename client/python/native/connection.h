// matmul::python::Connection: the native client's channel to a daemon and
// one session on it (matmul::Client + matmul::Session), for the
// matmul_client._native extension. The Python package registers regions
// under session_id() (through its own gRPC stub) and sends products through
// a Ring attached to this session.
#ifndef MATMUL_CLIENT_PYTHON_NATIVE_CONNECTION_H_
#define MATMUL_CLIENT_PYTHON_NATIVE_CONNECTION_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/session.h"
#include "pybind11/pybind11.h"

namespace matmul::python {

class Connection {
 public:
  // Opens a channel to `target` and a session on it, waiting up to
  // `connect_timeout` for the daemon (the channel waits for readiness, as
  // the Python client's OpenSession does).
  static absl::StatusOr<std::unique_ptr<Connection>> Open(
      const std::string& target, const std::string& client_name,
      absl::Duration connect_timeout, int64_t max_message_bytes);

  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  Client& client() { return *client_; }
  const Session& session() const { return *session_; }

 private:
  Connection(std::unique_ptr<Client> client, std::unique_ptr<Session> session)
      : client_(std::move(client)), session_(std::move(session)) {}

  // Declared in this order so that the session (whose stream runs on the
  // client's channel) is destroyed first.
  std::unique_ptr<Client> client_;
  std::unique_ptr<Session> session_;
};

// Adds the Connection class to the module.
void BindConnection(pybind11::module_& module);

}  // namespace matmul::python

#endif  // MATMUL_CLIENT_PYTHON_NATIVE_CONNECTION_H_
