#include "client/python/native/connection.h"

#include <utility>

#include "client/python/native/matmul_error.h"
#include "client/python/native/without_gil.h"

namespace matmul::python {

absl::StatusOr<std::unique_ptr<Connection>> Connection::Open(
    const std::string& target, const std::string& client_name,
    absl::Duration connect_timeout, int64_t max_message_bytes) {
  ClientOptions options;
  options.max_message_bytes = max_message_bytes;
  // Like the Python client's OpenSession: a daemon that is still starting
  // is waited for (up to connect_timeout), not refused at once.
  options.wait_for_ready = true;
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Create(target, options);
  if (!client.ok()) return client.status();
  absl::StatusOr<std::unique_ptr<Session>> session =
      Session::Open(**client, client_name, connect_timeout);
  if (!session.ok()) return session.status();
  // The constructor is private, so std::make_unique cannot reach it.
  return std::unique_ptr<Connection>(
      new Connection(*std::move(client), *std::move(session)));
}

void BindConnection(pybind11::module_& module) {
  namespace py = pybind11;
  py::class_<Connection, std::shared_ptr<Connection>>(
      module, "Connection",
      "A channel to the daemon and a session on it (C++ matmul::Client and "
      "matmul::Session). The daemon releases the session's regions when it "
      "is garbage-collected or the process ends.")
      .def(
          py::init([](const std::string& target, const std::string& client_name,
                      double connect_timeout, int64_t max_message_bytes) {
            absl::StatusOr<std::unique_ptr<Connection>> connection;
            {
              // Opening waits on the daemon; other Python threads run.
              py::gil_scoped_release release;
              connection = Connection::Open(target, client_name,
                                            absl::Seconds(connect_timeout),
                                            max_message_bytes);
            }
            if (!connection.ok()) RaiseMatmulError(connection.status());
            // Python (and a Ring) hold it; whoever lets go last ends the
            // session, without the GIL.
            return std::shared_ptr<Connection>(
                connection->release(), [](Connection* raw) {
                  std::unique_ptr<Connection> owned(raw);
                  WithoutGil([&owned] { owned.reset(); });
                });
          }),
          py::arg("target"), py::arg("client_name"),
          py::arg("connect_timeout") = 30.0,
          py::arg("max_message_bytes") = int64_t{256} << 20)
      .def_property_readonly(
          "session_id",
          [](const Connection& self) { return self.session().session_id(); })
      .def_property_readonly(
          "alive",
          [](const Connection& self) { return self.session().alive(); },
          "False once the daemon ended the session (it shut down).");
}

}  // namespace matmul::python
