// Whether memory a client says is on one CUDA device is on the daemon's.
// Its own module so that each kind of CUDA region (ipc, vmm) checks it
// without including the opener that dispatches to them. A build without
// CUDA defines it in cuda_region_opener_unavailable.cc (never OK).
#ifndef MATMUL_SERVER_REGIONS_CUDA_REGION_DEVICE_H_
#define MATMUL_SERVER_REGIONS_CUDA_REGION_DEVICE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace matmul {

// Checks that a region meant for (ordinal, uuid) can be used on the
// daemon's device: the UUID decides when given, else the ordinal.
absl::Status CheckRegionDevice(int daemon_device, int32_t ordinal,
                               const std::string& uuid);

}  // namespace matmul

#endif  // MATMUL_SERVER_REGIONS_CUDA_REGION_DEVICE_H_
