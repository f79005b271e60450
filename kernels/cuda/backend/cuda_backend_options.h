// What a CudaBackend is made with: one struct per concern, nested, so that
// a setting keeps one name from the daemon's flag to where it is used
// (--tuning_cache is BackendOptions::cuda.selector.tuning_cache). CUDA-free,
// for server/backends.
#ifndef MATMUL_KERNELS_CUDA_BACKEND_CUDA_BACKEND_OPTIONS_H_
#define MATMUL_KERNELS_CUDA_BACKEND_CUDA_BACKEND_OPTIONS_H_

#include <cstdint>

#include "absl/time/time.h"
#include "kernels/cuda/selector/selector_options.h"

namespace matmul::cuda {

struct CudaBackendOptions {
  int device = 0;
  // Which kernel runs each shape, and how it is tuned.
  SelectorOptions selector;
  // Products of at least this many GFLOP per SM run one after another on
  // a stream all slots share (they fill the device alone and gain nothing
  // from overlapping); > 0.
  double serial_min_gflop_per_sm = 1.0;
  // Products in flight at once (stream slots); >= 1.
  int streams = 2;
  // Stream-ordered products wait for their client's stream with a wait
  // queued on the GPU instead of on a worker's CPU (client_stream_order.h
  // weighs the two); needs the driver's stream memory operations.
  bool stream_order_waits_on_gpu = false;
  // Single products on the device are queued and their ends noticed by a
  // thread of the backend's, so that the caller (a worker) launches the
  // next meanwhile (StartBatch); false: every launch waits on its caller.
  bool launch_pipeline = true;
  // How long that thread polls for new launches before it sleeps, at most
  // (adaptive_spin.h). The daemon sets it from --worker_spin_us, as it
  // does the workers' own spin.
  absl::Duration completion_idle_spin = absl::Milliseconds(1);
  // How that thread notices a launch's end: false, cudaStreamQuery on its
  // stream at each poll; true, the stream writes a word of pinned host
  // memory after the launch (needs the driver's stream memory operations),
  // and the thread reads it, asking the stream itself only now and then
  // (a failed stream never writes it): polling then makes no CUDA call
  // that launches would contend with.
  bool completion_by_word = false;
  // Threads that notice launches' ends and complete them (answers
  // included), each for every n-th launch: more than one where one thread
  // cannot keep up with the GPU's ends; each polls while it has launches
  // out. >= 1.
  int completion_threads = 1;
  // TEST ONLY, for the out-of-memory path: once set up, the backend takes
  // all but this many bytes of the device's free memory and holds them, so
  // that a product whose staging needs more really fails in cudaMalloc.
  // 0: off.
  int64_t test_only_memory_headroom_bytes = 0;
  // TEST ONLY, for the device-lost path: the Nth product launch (from 1)
  // runs a kernel that writes out of range instead, which poisons the CUDA
  // context. 0: never.
  int64_t test_only_inject_fault_after = 0;
};

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_BACKEND_CUDA_BACKEND_OPTIONS_H_
