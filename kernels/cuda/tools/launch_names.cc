#include "kernels/cuda/tools/launch_names.h"

#include <cupti.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace matmul::cuda {
namespace {

absl::Status CuptiStatus(CUptiResult result, const char* what) {
  if (result == CUPTI_SUCCESS) return absl::OkStatus();
  const char* text = nullptr;
  cuptiGetResultString(result, &text);
  return absl::UnavailableError(
      absl::StrCat(what, ": ", text != nullptr ? text : "unknown CUPTI error"));
}

// The driver entry points a kernel launch goes through (the runtime's
// launches included: CUPTI reports the driver calls they make).
constexpr CUpti_CallbackId kLaunchCallbacks[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
};

void CUPTIAPI OnCallback(void* userdata, CUpti_CallbackDomain domain,
                         CUpti_CallbackId /*callback_id*/, const void* data) {
  LaunchNames::Callback(userdata, domain, data);
}

}  // namespace

absl::StatusOr<std::unique_ptr<LaunchNames>> LaunchNames::Create() {
  auto names = std::unique_ptr<LaunchNames>(new LaunchNames());
  CUpti_SubscriberHandle subscriber = nullptr;
  absl::Status status = CuptiStatus(
      cuptiSubscribe(&subscriber, &OnCallback, names.get()), "cuptiSubscribe");
  if (!status.ok()) return status;
  names->subscriber_ = subscriber;
  for (CUpti_CallbackId id : kLaunchCallbacks) {
    status = CuptiStatus(
        cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id),
        "cuptiEnableCallback");
    if (!status.ok()) return status;  // the destructor unsubscribes
  }
  return names;
}

LaunchNames::~LaunchNames() {
  if (subscriber_ != nullptr) {
    cuptiUnsubscribe(static_cast<CUpti_SubscriberHandle>(subscriber_));
  }
}

std::vector<std::string> LaunchNames::Take() {
  absl::MutexLock lock(&mu_);
  return std::exchange(names_, {});
}

void LaunchNames::Callback(void* self, int domain, const void* data) {
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
  const auto* info = static_cast<const CUpti_CallbackData*>(data);
  if (info->callbackSite != CUPTI_API_ENTER) return;
  auto* names = static_cast<LaunchNames*>(self);
  absl::MutexLock lock(&names->mu_);
  names->names_.emplace_back(info->symbolName != nullptr ? info->symbolName
                                                         : "?");
}

}  // namespace matmul::cuda
