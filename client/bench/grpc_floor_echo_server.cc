#include "client/bench/grpc_floor_echo_server.h"

#include <unistd.h>

#include <cstdint>
#include <limits>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/bench/grpc_floor_echo.grpc.pb.h"

namespace matmul::bench {
namespace {

// Replies by size, built on first use and shared by every later call.
class ReplyCache {
 public:
  std::shared_ptr<const grpc_floor::EchoResponse> Get(uint64_t bytes) {
    absl::MutexLock lock(&mu_);
    std::shared_ptr<const grpc_floor::EchoResponse>& reply = replies_[bytes];
    if (reply == nullptr) {
      auto built = std::make_shared<grpc_floor::EchoResponse>();
      built->set_payload(std::string(bytes, '\x5a'));
      reply = std::move(built);
    }
    return reply;
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<const grpc_floor::EchoResponse>>
      replies_ ABSL_GUARDED_BY(mu_);
};

class SyncEcho final : public grpc_floor::EchoService::Service {
 public:
  grpc::Status Echo(grpc::ServerContext* /*context*/,
                    const grpc_floor::EchoRequest* request,
                    grpc_floor::EchoResponse* response) override {
    if (request->reply_bytes() > 0) {
      *response = *replies_.Get(request->reply_bytes());
    }
    return grpc::Status::OK;
  }

 private:
  ReplyCache replies_;
};

class CallbackEcho final : public grpc_floor::EchoService::CallbackService {
 public:
  grpc::ServerUnaryReactor* Echo(grpc::CallbackServerContext* context,
                                 const grpc_floor::EchoRequest* request,
                                 grpc_floor::EchoResponse* response) override {
    if (request->reply_bytes() > 0) {
      *response = *replies_.Get(request->reply_bytes());
    }
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  ReplyCache replies_;
};

}  // namespace

const char* EchoApiName(EchoApi api) {
  return api == EchoApi::kSync ? "sync" : "callback";
}

absl::StatusOr<std::unique_ptr<EchoServer>> EchoServer::Start(
    EchoApi api, const std::string& socket_path,
    const GrpcTransportArgs& transport) {
  std::unique_ptr<EchoServer> server(new EchoServer());
  server->socket_path_ = socket_path;
  server->target_ = absl::StrCat("unix:", socket_path);
  unlink(socket_path.c_str());
  if (api == EchoApi::kSync) {
    server->service_ = std::make_unique<SyncEcho>();
  } else {
    server->service_ = std::make_unique<CallbackEcho>();
  }
  grpc::ServerBuilder builder;
  builder.AddListeningPort(server->target_, grpc::InsecureServerCredentials());
  builder.SetMaxReceiveMessageSize(std::numeric_limits<int>::max());
  builder.SetMaxSendMessageSize(std::numeric_limits<int>::max());
  ApplyGrpcTransportArgs(transport, builder);
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("the echo server cannot listen on ", server->target_));
  }
  return server;
}

EchoServer::~EchoServer() {
  if (server_ != nullptr) {
    server_->Shutdown();
    server_->Wait();
  }
  unlink(socket_path_.c_str());
}

}  // namespace matmul::bench
