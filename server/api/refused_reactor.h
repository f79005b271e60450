// A server-streaming call refused before it started: finishes at once with
// the refusal's status.
#ifndef MATMUL_SERVER_API_REFUSED_REACTOR_H_
#define MATMUL_SERVER_API_REFUSED_REACTOR_H_

#include <grpcpp/grpcpp.h>

namespace matmul {

template <typename Event>
class RefusedWriteReactor final : public grpc::ServerWriteReactor<Event> {
 public:
  explicit RefusedWriteReactor(const grpc::Status& status) {
    this->Finish(status);
  }
  // gRPC owns reactors by raw pointer; the reactor deletes itself here.
  void OnDone() override { delete this; }
};

}  // namespace matmul

#endif  // MATMUL_SERVER_API_REFUSED_REACTOR_H_
