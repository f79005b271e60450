#include "kernels/cuda/runtime/cuda_status.h"

#include "absl/strings/str_cat.h"
#include "kernels/device_lost.h"

namespace matmul::cuda {

bool IsStickyCudaError(cudaError_t error) {
  switch (error) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorECCUncorrectable:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorContained:
    case cudaErrorNvlinkUncorrectable:
    // Under MPS: the server ended this client (another client's fault
    // reaches every client of the GPU) or is gone; only a new process
    // gets a context again.
    case cudaErrorMpsClientTerminated:
    case cudaErrorMpsServerNotReady:
    case cudaErrorMpsRpcFailure:
    case cudaErrorMpsConnectionFailed:
      return true;
    default:
      return false;
  }
}

absl::Status CudaStatus(cudaError_t error, absl::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  std::string message = absl::StrCat(what, " failed: ", cudaGetErrorName(error),
                                     " (", cudaGetErrorString(error), ")");
  if (IsStickyCudaError(error)) {
    return DeviceLostError(
        absl::StrCat(message, "; the CUDA context is unusable from now on"));
  }
  // A failed call (a cudaMalloc out of memory, say) also leaves its error
  // as the thread's last error, which the next launch's check would report
  // as its own: take it now that it is reported here.
  cudaGetLastError();
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
    case cudaErrorInvalidDevice:
      return absl::UnavailableError(message);
    case cudaErrorInvalidValue:
    case cudaErrorInvalidPitchValue:
    case cudaErrorInvalidDevicePointer:
      return absl::InvalidArgumentError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status CublasStatus(cublasStatus_t status, absl::string_view what) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  std::string message =
      absl::StrCat(what, " failed: ", cublasLtGetStatusName(status), " (",
                   cublasLtGetStatusString(status), ")");
  switch (status) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      return absl::ResourceExhaustedError(message);
    case CUBLAS_STATUS_INVALID_VALUE:
      return absl::InvalidArgumentError(message);
    case CUBLAS_STATUS_NOT_SUPPORTED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return absl::UnimplementedError(message);
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace matmul::cuda
