// The floor under stream-ordered products through a daemon: how long one
// hand-off between two CUDA streams takes on the GPU, each stream waiting
// for the other, two ways:
//   words   each waits for a word the other writes (cuStreamWaitValue32 /
//           cuStreamWriteValue32 on mapped host memory), as the daemon and
//           its clients do, with no CPU in the loop;
//   events  each waits for an event the other records (cudaStreamWaitEvent;
//           between processes interprocess events, cudaIpcGetEventHandle),
//           the other way a product could be ordered. A wait binds to the
//           event's last record issued before it, so between processes the
//           two CPUs take turns issuing (through shared memory); neither
//           waits for the GPU, so they run ahead of it.
// A stream-ordered product costs at least two hand-offs (the client's
// stream to the daemon's and back); between two processes the streams live
// in two CUDA contexts.
//
//   handoff-probe one|two|one-events|two-events|local [round_trips]
//                 [kernel_us] [ask_kernel_us] [blocks]
//
// Prints the round-trip time with both streams in one process (one) or
// each in a process of its own (two: fork before any CUDA call), with no
// kernel and with a kernel of `kernel_us` between the wait and the
// answer on the answering stream (a stand-in for the product). With
// `ask_kernel_us`, the asking stream runs a kernel of its own before each
// ask (the client's work between its products, as in a training step);
// `blocks` spreads both kernels over that many blocks of 128 threads (1
// by default; a few per SM make them fill the GPU as real kernels do).
// `local` is the same sequence with no hand-off: both kernels of each
// round on one stream of one process, the figure a hand-off adds to.
#include <cuda.h>
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "absl/status/statusor.h"
#include "common/cuda_driver_api.h"

namespace matmul {
namespace {

#define CHECK(x)                                                          \
  do {                                                                    \
    if (!(x)) {                                                           \
      std::fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #x); \
      std::exit(1);                                                       \
    }                                                                     \
  } while (0)

// The stream memory operations, from the driver through the runtime (no
// link against libcuda), as the daemon takes them.
CudaDriverApi DriverApi() {
  absl::StatusOr<CudaDriverApi> api = LoadCudaDriverApi();
  if (!api.ok()) {
    std::fprintf(stderr, "%s\n", std::string(api.status().message()).c_str());
    std::exit(1);
  }
  return *api;
}

__global__ void Spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

// A kernel of `cycles` on `blocks` blocks of 128 threads.
struct Kernel {
  long long cycles = 0;
  int blocks = 1;
  void Queue(cudaStream_t stream) const {
    if (cycles > 0) Spin<<<blocks, 128, 0, stream>>>(cycles);
  }
};

// The two words, a cache line apart, in a shared anonymous mapping that
// both processes register with CUDA after the fork.
struct Words {
  uint32_t ping;
  uint32_t pad[15];
  uint32_t pong;
};

// The events way between processes, in the same mapping past the words:
// each side's interprocess event, and how far each side has issued.
struct EventExchange {
  cudaIpcEventHandle_t ask, answer;
  std::atomic<int> ask_published, answer_published;  // handles written
  std::atomic<int> asked, answered;                  // rounds issued
};
constexpr size_t kExchangeOffset = 1024;
static_assert(sizeof(Words) <= kExchangeOffset &&
              kExchangeOffset + sizeof(EventExchange) <= 4096);

EventExchange* ExchangeIn(void* mapping) {
  return reinterpret_cast<EventExchange*>(static_cast<char*>(mapping) +
                                          kExchangeOffset);
}

// Spins until `value` reaches `at_least`; exits after 30 s (the other side
// failed), so that no process is left spinning.
void WaitUntil(const std::atomic<int>& value, int at_least) {
  const auto give_up =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (value.load(std::memory_order_acquire) < at_least) {
    CHECK(std::chrono::steady_clock::now() < give_up);
  }
}

// Creates this side's interprocess event and publishes its handle, then
// opens the other side's once that is published.
void ShareEvents(cudaEvent_t& mine, cudaIpcEventHandle_t& my_handle,
                 std::atomic<int>& my_published, cudaEvent_t& theirs,
                 cudaIpcEventHandle_t& their_handle,
                 const std::atomic<int>& their_published) {
  CHECK(cudaEventCreateWithFlags(
            &mine, cudaEventDisableTiming | cudaEventInterprocess) ==
        cudaSuccess);
  CHECK(cudaIpcGetEventHandle(&my_handle, mine) == cudaSuccess);
  my_published.store(1, std::memory_order_release);
  WaitUntil(their_published, 1);
  CHECK(cudaIpcOpenEventHandle(&theirs, their_handle) == cudaSuccess);
}

struct Mapped {
  CUdeviceptr ping, pong;
};

Mapped Register(Words* words) {
  CHECK(cudaHostRegister(words, 4096, cudaHostRegisterMapped) == cudaSuccess);
  void* device = nullptr;
  CHECK(cudaHostGetDevicePointer(&device, words, 0) == cudaSuccess);
  const CUdeviceptr base = reinterpret_cast<CUdeviceptr>(device);
  return {base + offsetof(Words, ping), base + offsetof(Words, pong)};
}

// The answering side: for each i, wait ping >= i, (spin), write pong = i.
void QueueAnswers(cudaStream_t stream, const Mapped& m, int n,
                  const Kernel& answer) {
  const CudaDriverApi api = DriverApi();
  for (int i = 1; i <= n; ++i) {
    CHECK(api.stream_wait_value32(stream, m.ping, i,
                                  CU_STREAM_WAIT_VALUE_GEQ) == CUDA_SUCCESS);
    answer.Queue(stream);
    CHECK(api.stream_write_value32(stream, m.pong, i, 0) == CUDA_SUCCESS);
  }
}

// Queues round trips 1..n (`queue_round(i)`, ending on `ask`) and returns
// the microseconds a round trip of the second half takes on `ask` (the
// first half warms up and lets the other side queue).
template <typename QueueRound>
double TimeRoundTrips(cudaStream_t ask, int n, QueueRound queue_round) {
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start) == cudaSuccess);
  CHECK(cudaEventCreate(&stop) == cudaSuccess);
  for (int i = 1; i <= n; ++i) {
    if (i == n / 2 + 1) CHECK(cudaEventRecord(start, ask) == cudaSuccess);
    queue_round(i);
  }
  CHECK(cudaEventRecord(stop, ask) == cudaSuccess);
  CHECK(cudaEventSynchronize(stop) == cudaSuccess);
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, start, stop) == cudaSuccess);
  return ms * 1e3 / (n - n / 2);
}

// The asking side: for each i, (its own kernel), write ping = i, wait
// pong >= i.
double QueueAsksAndTime(cudaStream_t stream, const Mapped& m, int n,
                        const Kernel& ask) {
  const CudaDriverApi api = DriverApi();
  return TimeRoundTrips(stream, n, [&](int i) {
    ask.Queue(stream);
    CHECK(api.stream_write_value32(stream, m.ping, i, 0) == CUDA_SUCCESS);
    CHECK(api.stream_wait_value32(stream, m.pong, i,
                                  CU_STREAM_WAIT_VALUE_GEQ) == CUDA_SUCCESS);
  });
}

long long CyclesFor(double us) {
  int khz = 0;
  CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0) == cudaSuccess);
  return static_cast<long long>(us * khz / 1e3);
}

// What each side runs per round, in microseconds and blocks.
struct Work {
  double answer_us = 0;
  double ask_us = 0;
  int blocks = 1;
  Kernel Answer() const { return {CyclesFor(answer_us), blocks}; }
  Kernel Ask() const { return {CyclesFor(ask_us), blocks}; }
};

Words* FreshWords() {
  void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(p != MAP_FAILED);
  std::memset(p, 0, 4096);
  return static_cast<Words*>(p);
}

// One thread queues both sides, a round trip at a time: queued all at once,
// the answers' waits would fill the stream's queue before an ask is queued.
double OneProcess(int n, const Work& work) {
  Words* words = FreshWords();
  const Mapped m = Register(words);
  cudaStream_t ask, answer;
  CHECK(cudaStreamCreateWithFlags(&ask, cudaStreamNonBlocking) == cudaSuccess);
  CHECK(cudaStreamCreateWithFlags(&answer, cudaStreamNonBlocking) ==
        cudaSuccess);
  const CudaDriverApi api = DriverApi();
  const Kernel ask_kernel = work.Ask(), answer_kernel = work.Answer();
  const double us = TimeRoundTrips(ask, n, [&](int i) {
    ask_kernel.Queue(ask);
    CHECK(api.stream_write_value32(ask, m.ping, i, 0) == CUDA_SUCCESS);
    CHECK(api.stream_wait_value32(answer, m.ping, i,
                                  CU_STREAM_WAIT_VALUE_GEQ) == CUDA_SUCCESS);
    answer_kernel.Queue(answer);
    CHECK(api.stream_write_value32(answer, m.pong, i, 0) == CUDA_SUCCESS);
    CHECK(api.stream_wait_value32(ask, m.pong, i, CU_STREAM_WAIT_VALUE_GEQ) ==
          CUDA_SUCCESS);
  });
  CHECK(cudaHostUnregister(words) == cudaSuccess);
  munmap(words, 4096);
  return us;
}

// Forks before this process touches CUDA: the child answers, the parent
// asks and times. Returns the round trip in microseconds.
double TwoProcesses(int n, const Work& work) {
  Words* words = FreshWords();
  const pid_t child = fork();
  CHECK(child >= 0);
  if (child == 0) {
    const Mapped m = Register(words);
    cudaStream_t answer;
    CHECK(cudaStreamCreateWithFlags(&answer, cudaStreamNonBlocking) ==
          cudaSuccess);
    QueueAnswers(answer, m, n, work.Answer());
    CHECK(cudaStreamSynchronize(answer) == cudaSuccess);
    std::_Exit(0);
  }
  const Mapped m = Register(words);
  cudaStream_t ask;
  CHECK(cudaStreamCreateWithFlags(&ask, cudaStreamNonBlocking) == cudaSuccess);
  const double us = QueueAsksAndTime(ask, m, n, work.Ask());
  int status = 0;
  CHECK(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(cudaHostUnregister(words) == cudaSuccess);
  munmap(words, 4096);
  return us;
}

// The events way in one process: plain events, one thread issuing both
// sides in order.
double OneProcessEvents(int n, const Work& work) {
  cudaStream_t ask, answer;
  CHECK(cudaStreamCreateWithFlags(&ask, cudaStreamNonBlocking) == cudaSuccess);
  CHECK(cudaStreamCreateWithFlags(&answer, cudaStreamNonBlocking) ==
        cudaSuccess);
  cudaEvent_t asked, answered;
  CHECK(cudaEventCreateWithFlags(&asked, cudaEventDisableTiming) ==
        cudaSuccess);
  CHECK(cudaEventCreateWithFlags(&answered, cudaEventDisableTiming) ==
        cudaSuccess);
  const Kernel ask_kernel = work.Ask(), answer_kernel = work.Answer();
  return TimeRoundTrips(ask, n, [&](int) {
    ask_kernel.Queue(ask);
    CHECK(cudaEventRecord(asked, ask) == cudaSuccess);
    CHECK(cudaStreamWaitEvent(answer, asked, 0) == cudaSuccess);
    answer_kernel.Queue(answer);
    CHECK(cudaEventRecord(answered, answer) == cudaSuccess);
    CHECK(cudaStreamWaitEvent(ask, answered, 0) == cudaSuccess);
  });
}

// The events way between two processes (fork before any CUDA call). In
// round i the asker records its event and says so; the answerer, once
// told, waits for it, (spins), records its own and says so; the asker, once
// told, waits for that. So each wait binds to the record of its round: a
// side records its event again only after the other has issued its wait.
double TwoProcessesEvents(int n, const Work& work) {
  void* mapping = FreshWords();
  EventExchange* exchange = new (ExchangeIn(mapping)) EventExchange{};
  const pid_t child = fork();
  CHECK(child >= 0);
  if (child == 0) {
    cudaStream_t answer;
    CHECK(cudaStreamCreateWithFlags(&answer, cudaStreamNonBlocking) ==
          cudaSuccess);
    cudaEvent_t mine, theirs;
    ShareEvents(mine, exchange->answer, exchange->answer_published, theirs,
                exchange->ask, exchange->ask_published);
    const Kernel answer_kernel = work.Answer();
    for (int i = 1; i <= n; ++i) {
      WaitUntil(exchange->asked, i);
      CHECK(cudaStreamWaitEvent(answer, theirs, 0) == cudaSuccess);
      answer_kernel.Queue(answer);
      CHECK(cudaEventRecord(mine, answer) == cudaSuccess);
      exchange->answered.store(i, std::memory_order_release);
    }
    CHECK(cudaStreamSynchronize(answer) == cudaSuccess);
    std::_Exit(0);
  }
  cudaStream_t ask;
  CHECK(cudaStreamCreateWithFlags(&ask, cudaStreamNonBlocking) == cudaSuccess);
  cudaEvent_t mine, theirs;
  ShareEvents(mine, exchange->ask, exchange->ask_published, theirs,
              exchange->answer, exchange->answer_published);
  const Kernel ask_kernel = work.Ask();
  const double us = TimeRoundTrips(ask, n, [&](int i) {
    ask_kernel.Queue(ask);
    CHECK(cudaEventRecord(mine, ask) == cudaSuccess);
    exchange->asked.store(i, std::memory_order_release);
    WaitUntil(exchange->answered, i);
    CHECK(cudaStreamWaitEvent(ask, theirs, 0) == cudaSuccess);
  });
  int status = 0;
  CHECK(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  munmap(mapping, 4096);
  return us;
}

// No hand-off: each round's two kernels on one stream.
double Local(int n, const Work& work) {
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) ==
        cudaSuccess);
  const Kernel ask_kernel = work.Ask(), answer_kernel = work.Answer();
  return TimeRoundTrips(stream, n, [&](int) {
    ask_kernel.Queue(stream);
    answer_kernel.Queue(stream);
  });
}

}  // namespace
}  // namespace matmul

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "one";
  const int n = argc > 2 ? std::atoi(argv[2]) : 2000;
  matmul::Work work;
  work.answer_us = argc > 3 ? std::atof(argv[3]) : 20.0;
  work.ask_us = argc > 4 ? std::atof(argv[4]) : 0.0;
  work.blocks = argc > 5 ? std::atoi(argv[5]) : 1;
  // A fork after this process has touched CUDA leaves the child without
  // it: a two-process way measures one kernel length per run.
  double us = 0;
  const char* what = nullptr;
  if (mode == "one") {
    us = matmul::OneProcess(n, work);
    what = "one process, words";
  } else if (mode == "two") {
    us = matmul::TwoProcesses(n, work);
    what = "two processes, words";
  } else if (mode == "one-events") {
    us = matmul::OneProcessEvents(n, work);
    what = "one process, events";
  } else if (mode == "two-events") {
    us = matmul::TwoProcessesEvents(n, work);
    what = "two processes, interprocess events";
  } else if (mode == "local") {
    us = matmul::Local(n, work);
    what = "one stream, no hand-off";
  } else {
    std::fprintf(stderr,
                 "usage: handoff-probe one|two|one-events|two-events|local "
                 "[round_trips] [kernel_us] [ask_kernel_us] [blocks]\n");
    return 2;
  }
  std::printf(
      "%s, %d round trips, %.0f us kernel, %.0f us asker's kernel, %d "
      "blocks: %.2f us a round trip\n",
      what, n, work.answer_us, work.ask_us, work.blocks, us);
  return 0;
}
