#include "client/bench/load_generator.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/ring/request_ring.h"

namespace matmul::bench {
namespace {

using Clock = std::chrono::steady_clock;

// One answered request.
struct Sample {
  double latency = 0;
  double queue = 0;
  double kernel = 0;
  double total = 0;
  uint32_t batch_size = 0;
};

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

double Quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double rank = std::ceil(q * static_cast<double>(sorted.size()));
  const size_t index = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return sorted[std::min(index, sorted.size() - 1)];
}

bool WindowsAgree(const std::vector<WindowStats>& windows, double stability) {
  if (windows.empty()) return false;
  double rate = 0, p50 = 0;
  for (const WindowStats& w : windows) {
    rate += w.requests_per_second;
    p50 += w.p50_latency;
  }
  rate /= windows.size();
  p50 /= windows.size();
  for (const WindowStats& w : windows) {
    if (w.requests == 0) return false;
    if (std::abs(w.requests_per_second - rate) > stability * rate) return false;
    if (std::abs(w.p50_latency - p50) > stability * p50) return false;
  }
  return true;
}

// The slots of one level and what they measured since the last Take().
class LoadGenerator::Run {
 public:
  Run(LoadGenerator& generator, const LoadOptions& options)
      : options_(options) {
    slots_.resize(options.concurrency);
    for (int i = 0; i < options.concurrency; ++i) {
      Slot& slot = slots_[i];
      slot.request = &generator.requests_[i % generator.requests_.size()];
      slot.stub = generator.stubs_[i % generator.stubs_.size()].get();
      if (!options.rings.empty()) {
        slot.ring = options.rings[i % options.rings.size()];
      }
      free_.push_back(&slot);
    }
  }
  ~Run() {
    Stop();
    CloseStreams();
  }

  void Start() {
    start_ = Clock::now();
    {
      absl::MutexLock lock(&mu_);
      window_start_ = start_;
    }
    if (options_.request_rate > 0) {
      pacer_ = std::thread([this] { Pace(); });
      return;
    }
    std::vector<Slot*> slots;
    {
      absl::MutexLock lock(&mu_);
      slots.swap(free_);
      outstanding_ = static_cast<int>(slots.size());
    }
    for (Slot* slot : slots) Send(*slot);
  }

  // Waits until `count` answers arrived since the last Take (or `limit`).
  void WaitForAnswers(int64_t count, absl::Duration limit) {
    absl::MutexLock lock(&mu_);
    wanted_ = count;
    mu_.AwaitWithTimeout(absl::Condition(this, &Run::HaveWanted), limit);
  }

  // What was answered since the last call, and how long that span was.
  std::string last_kernel() {
    absl::MutexLock lock(&mu_);
    return last_kernel_;
  }

  WindowStats Take(std::vector<Sample>* samples, std::string* first_error) {
    const Clock::time_point now = Clock::now();
    WindowStats stats;
    absl::MutexLock lock(&mu_);
    samples->swap(samples_);
    samples_.clear();
    stats.errors = errors_;
    errors_ = 0;
    if (first_error->empty()) *first_error = first_error_;
    first_error_.clear();  // the next window's first, if any
    stats.requests = static_cast<int64_t>(samples->size());
    stats.seconds = Seconds(now - window_start_);
    window_start_ = now;
    return stats;
  }

  // Stops sending and waits for every call in flight.
  void Stop() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      slot_freed_.SignalAll();
    }
    if (pacer_.joinable()) pacer_.join();
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* outstanding) { return *outstanding == 0; }, &outstanding_));
  }

 private:
  struct Slot;

  // One slot's MatmulStream (LoadOptions::stream): a request is written,
  // its answer read, then the next request is written. gRPC allows one
  // write in flight, and a write's completion may be reported after the
  // answer it produced, so the next write waits for both.
  class StreamCall final
      : public grpc::ClientBidiReactor<v1::MatmulRequest, v1::MatmulResponse> {
   public:
    StreamCall(Run& run, Slot& slot) : run_(run), slot_(slot) {
      // The stream lives for the level: its deadline is the longest the
      // level can take, so that a daemon that stops answering ends it.
      const LoadOptions& o = run.options_;
      const absl::Duration window =
          o.window_requests > 0 ? o.timeout : o.window;
      context_.set_deadline(absl::ToChronoTime(
          absl::Now() + o.warmup + o.max_windows * window + o.timeout));
      slot.stub->async()->MatmulStream(&context_, this);
      StartCall();
    }
    void Send() {
      slot_.sent = Clock::now();
      StartRead(&slot_.response);
      absl::MutexLock lock(&mu_);
      if (writing_) {
        write_after_done_ = true;
        return;
      }
      writing_ = true;
      StartWrite(slot_.request);
    }
    void OnWriteDone(bool /*ok*/) override {
      absl::MutexLock lock(&mu_);
      writing_ = write_after_done_;
      if (write_after_done_) {
        write_after_done_ = false;
        StartWrite(slot_.request);
      }
    }
    void OnReadDone(bool ok) override {
      grpc::Status status;
      if (!ok) {
        status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "stream broke");
      } else if (slot_.response.status_code() != 0) {
        status = grpc::Status(
            static_cast<grpc::StatusCode>(slot_.response.status_code()),
            slot_.response.status_message());
      }
      run_.OnAnswer(slot_, status, /*slot_alive=*/ok);
    }
    void OnDone(const grpc::Status& /*status*/) override {
      absl::MutexLock lock(&mu_);
      done_ = true;
    }
    // Half-closes and waits until gRPC is done with the call.
    void Close() {
      StartWritesDone();
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&done_));
    }

   private:
    Run& run_;
    Slot& slot_;
    grpc::ClientContext context_;
    absl::Mutex mu_;
    bool writing_ ABSL_GUARDED_BY(mu_) = false;
    bool write_after_done_ ABSL_GUARDED_BY(mu_) = false;
    bool done_ ABSL_GUARDED_BY(mu_) = false;
  };

  struct Slot {
    const v1::MatmulRequest* request = nullptr;
    v1::MatmulService::Stub* stub = nullptr;
    RequestRing* ring = nullptr;  // LoadOptions::rings
    v1::MatmulResponse response;
    std::unique_ptr<grpc::ClientContext> context;  // unary calls
    std::unique_ptr<StreamCall> stream;            // stream mode
    Clock::time_point sent;
  };

  void CloseStreams() {
    for (Slot& slot : slots_) {
      if (slot.stream != nullptr) slot.stream->Close();
      slot.stream.reset();
    }
  }

  bool HaveWanted() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return static_cast<int64_t>(samples_.size()) + errors_ >= wanted_;
  }

  void Send(Slot& slot) {
    if (slot.ring != nullptr) {
      slot.sent = Clock::now();
      slot.ring->CallAsync(
          *slot.request, &slot.response, options_.timeout,
          [this, &slot](absl::Status status) {
            OnAnswer(slot,
                     grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                                  std::string(status.message())),
                     /*slot_alive=*/true);
          });
      return;
    }
    if (options_.stream) {
      if (slot.stream == nullptr) {
        slot.stream = std::make_unique<StreamCall>(*this, slot);
      }
      slot.stream->Send();
      return;
    }
    slot.context = std::make_unique<grpc::ClientContext>();
    slot.context->set_deadline(
        absl::ToChronoTime(absl::Now() + options_.timeout));
    slot.sent = Clock::now();
    slot.stub->async()->Matmul(slot.context.get(), slot.request, &slot.response,
                               [this, &slot](grpc::Status status) {
                                 OnAnswer(slot, status, /*slot_alive=*/true);
                               });
  }

  // An answer (or the failure of the call) for `slot`'s request; a slot
  // whose stream broke is not used again.
  void OnAnswer(Slot& slot, const grpc::Status& status, bool slot_alive) {
    const Clock::time_point now = Clock::now();
    bool resend = false;
    {
      absl::MutexLock lock(&mu_);
      if (status.ok()) {
        const v1::Timing& timing = slot.response.timing();
        samples_.push_back({Seconds(now - slot.sent), timing.queue_seconds(),
                            timing.kernel_seconds(), timing.total_seconds(),
                            slot.response.batch_size()});
        if (last_kernel_ != slot.response.kernel()) {
          last_kernel_ = slot.response.kernel();
        }
      } else {
        ++errors_;
        if (first_error_.empty()) {
          first_error_ = absl::StrCat("code ", status.error_code(), ": ",
                                      status.error_message());
        }
      }
      if (stopping_ || !slot_alive) {
        --outstanding_;
      } else if (options_.request_rate > 0) {
        --outstanding_;
        free_.push_back(&slot);
        slot_freed_.Signal();
      } else {
        resend = true;
      }
    }
    if (resend) Send(slot);
  }

  // Open loop: request i is due at start + i / rate; it waits for a free
  // slot when all are busy (the rate then exceeds what the server takes).
  void Pace() {
    for (int64_t i = 0;; ++i) {
      const Clock::time_point due =
          start_ +
          std::chrono::duration_cast<Clock::duration>(
              std::chrono::duration<double>(i / options_.request_rate));
      std::this_thread::sleep_until(due);
      Slot* slot = nullptr;
      {
        absl::MutexLock lock(&mu_);
        while (free_.empty() && !stopping_) slot_freed_.Wait(&mu_);
        if (stopping_) return;
        slot = free_.back();
        free_.pop_back();
        ++outstanding_;
      }
      Send(*slot);
    }
  }

  const LoadOptions options_;
  std::vector<Slot> slots_;
  Clock::time_point start_;
  std::thread pacer_;

  absl::Mutex mu_;
  absl::CondVar slot_freed_;
  std::vector<Slot*> free_ ABSL_GUARDED_BY(mu_);
  int outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Sample> samples_ ABSL_GUARDED_BY(mu_);
  int64_t errors_ ABSL_GUARDED_BY(mu_) = 0;
  std::string first_error_ ABSL_GUARDED_BY(mu_);
  Clock::time_point window_start_ ABSL_GUARDED_BY(mu_);
  int64_t wanted_ ABSL_GUARDED_BY(mu_) = 0;
  std::string last_kernel_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<LoadGenerator>> LoadGenerator::Create(
    const std::string& target, int channels,
    std::vector<v1::MatmulRequest> requests, double flops_per_request,
    absl::Duration connect_timeout) {
  if (channels < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("channels is ", channels, "; expected >= 1"));
  }
  if (requests.empty()) {
    return absl::InvalidArgumentError("no requests to send");
  }
  std::vector<std::unique_ptr<v1::MatmulService::Stub>> stubs;
  for (int i = 0; i < channels; ++i) {
    grpc::ChannelArguments arguments;
    // A connection of its own per channel (channels with equal arguments
    // would share one), so that the calls spread over several.
    arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    arguments.SetMaxSendMessageSize(-1);
    arguments.SetMaxReceiveMessageSize(-1);
    std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
        target, grpc::InsecureChannelCredentials(), arguments);
    if (!channel->WaitForConnected(
            absl::ToChronoTime(absl::Now() + connect_timeout))) {
      return absl::UnavailableError(
          absl::StrCat("could not connect to ", target, " within ",
                       absl::FormatDuration(connect_timeout),
                       " (is matmul-server listening there?)"));
    }
    stubs.push_back(v1::MatmulService::NewStub(channel));
  }
  return std::unique_ptr<LoadGenerator>(new LoadGenerator(
      std::move(stubs), std::move(requests), flops_per_request));
}

LoadGenerator::LoadGenerator(
    std::vector<std::unique_ptr<v1::MatmulService::Stub>> stubs,
    std::vector<v1::MatmulRequest> requests, double flops_per_request)
    : stubs_(std::move(stubs)),
      requests_(std::move(requests)),
      flops_per_request_(flops_per_request) {}

LoadGenerator::~LoadGenerator() = default;

absl::StatusOr<LevelResult> LoadGenerator::RunLevel(
    const LoadOptions& options,
    const std::function<void(const std::vector<WindowStats>&)>& progress) {
  if (!options.rings.empty() && options.stream) {
    return absl::InvalidArgumentError(
        "requests go through a request ring or a MatmulStream, not both");
  }
  if (options.concurrency < 1 || options.request_rate < 0 ||
      options.stable_windows < 1 ||
      options.max_windows < options.stable_windows ||
      !(options.stability > 0) ||
      (options.window_requests <= 0 &&
       options.window <= absl::ZeroDuration())) {
    return absl::InvalidArgumentError(
        "bad load options: need concurrency >= 1, request_rate >= 0, "
        "1 <= stable_windows <= max_windows, stability > 0 and a window");
  }
  Run run(*this, options);
  run.Start();
  std::vector<Sample> samples;
  std::string first_error;
  absl::SleepFor(options.warmup);
  {
    std::string warmup_error;           // warm-up errors are not the level's
    run.Take(&samples, &warmup_error);  // discarded: warm-up
  }

  std::vector<WindowStats> windows;
  std::deque<std::vector<Sample>> recent;  // the last stable_windows
  LevelResult result;
  while (static_cast<int>(windows.size()) < options.max_windows) {
    if (options.window_requests > 0) {
      run.WaitForAnswers(options.window_requests,
                         options.timeout + absl::Seconds(10));
    } else {
      absl::SleepFor(options.window);
    }
    WindowStats stats = run.Take(&samples, &first_error);
    std::vector<double> latencies;
    for (const Sample& s : samples) latencies.push_back(s.latency);
    std::sort(latencies.begin(), latencies.end());
    stats.requests_per_second =
        stats.seconds > 0 ? stats.requests / stats.seconds : 0;
    stats.p50_latency = Quantile(latencies, 0.5);
    windows.push_back(stats);
    result.errors += stats.errors;
    if (progress) progress(windows);
    if (stats.requests == 0 && stats.errors > 0) {
      run.Stop();
      return absl::UnavailableError(
          absl::StrCat("every request of a window failed: ", first_error));
    }
    recent.push_back(std::move(samples));
    samples.clear();
    if (static_cast<int>(recent.size()) > options.stable_windows) {
      recent.pop_front();
    }
    if (static_cast<int>(windows.size()) >= options.stable_windows &&
        WindowsAgree({windows.end() - options.stable_windows, windows.end()},
                     options.stability)) {
      result.stable = true;
      break;
    }
  }
  run.Stop();
  result.kernel = run.last_kernel();

  result.concurrency = options.concurrency;
  result.request_rate = options.request_rate;
  result.windows = static_cast<int>(windows.size());
  result.first_error = first_error;
  std::vector<double> latency, queue, kernel, total, overhead;
  double batch_sum = 0;
  for (size_t w = windows.size() - recent.size(); w < windows.size(); ++w) {
    result.seconds += windows[w].seconds;
  }
  for (const std::vector<Sample>& window : recent) {
    for (const Sample& s : window) {
      latency.push_back(s.latency);
      queue.push_back(s.queue);
      kernel.push_back(s.kernel);
      total.push_back(s.total);
      overhead.push_back(s.latency - s.kernel);
      batch_sum += s.batch_size;
    }
  }
  for (std::vector<double>* v :
       {&latency, &queue, &kernel, &total, &overhead}) {
    std::sort(v->begin(), v->end());
  }
  result.requests = static_cast<int64_t>(latency.size());
  if (result.requests == 0) {
    return absl::UnavailableError("no request was answered");
  }
  result.requests_per_second = result.requests / result.seconds;
  result.tflops = result.requests_per_second * flops_per_request_ / 1e12;
  double sum = 0;
  for (double l : latency) sum += l;
  result.latency_mean = sum / result.requests;
  result.latency_p50 = Quantile(latency, 0.50);
  result.latency_p90 = Quantile(latency, 0.90);
  result.latency_p95 = Quantile(latency, 0.95);
  result.latency_p99 = Quantile(latency, 0.99);
  result.server_queue_p50 = Quantile(queue, 0.5);
  result.server_kernel_p50 = Quantile(kernel, 0.5);
  result.server_total_p50 = Quantile(total, 0.5);
  result.overhead_p50 = Quantile(overhead, 0.5);
  result.overhead_p99 = Quantile(overhead, 0.99);
  result.mean_batch_size = batch_sum / result.requests;
  return result;
}

}  // namespace matmul::bench
