// The one way back for a request that ProductAdmission took: whatever ends
// it (a refusal, the product's result, the shutdown's give-up), Send counts
// the outcome under the request's shape, gives back the client's quota
// share if the request holds one, and hands the status to the transport,
// which writes the answer. Made at admission, filled in as the request
// gets through its checks, and sent exactly once.
#ifndef MATMUL_SERVER_ADMISSION_REQUEST_ANSWER_H_
#define MATMUL_SERVER_ADMISSION_REQUEST_ANSWER_H_

#include <string>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "server/admission/client_quota.h"
#include "server/metrics/metrics.h"

namespace matmul {

class RequestAnswer {
 public:
  // `metrics` must outlive the answer; the request counts as started.
  RequestAnswer(ServerMetrics& metrics,
                absl::AnyInvocable<void(absl::Status) &&> transport)
      : metrics_(metrics), transport_(std::move(transport)) {
    metrics_.RequestStarted();
  }
  RequestAnswer(const RequestAnswer&) = delete;
  RequestAnswer& operator=(const RequestAnswer&) = delete;

  // The shape the outcome is counted under (none until validated).
  void set_shape(std::string shape) { shape_ = std::move(shape); }
  // The request holds a share of `client`'s quota (`quota` must outlive
  // the answer); Send gives it back.
  void HoldShare(ClientQuota& quota, std::string client) {
    quota_ = &quota;
    client_ = std::move(client);
  }

  void Send(absl::Status status) && {
    if (quota_ != nullptr) quota_->Release(client_);
    metrics_.CountRequest(shape_, status.code());
    metrics_.RequestFinished();
    std::move(transport_)(std::move(status));
  }

 private:
  ServerMetrics& metrics_;
  absl::AnyInvocable<void(absl::Status) &&> transport_;
  std::string shape_;
  ClientQuota* quota_ = nullptr;
  std::string client_;
};

}  // namespace matmul

#endif  // MATMUL_SERVER_ADMISSION_REQUEST_ANSWER_H_
