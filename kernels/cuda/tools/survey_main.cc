// cublaslt-survey: how fast NVIDIA's own kernels of each instruction run on
// this GPU. For each shape it times every configuration of every cuBLASLt
// algorithm (not only the heuristic's top-k), names the kernel each one
// launched, and sets the best mma.sync kernel (m16n8k16, the instruction a
// DGX Spark has) beside the baseline (cuBLASLt's heuristic top-k, as
// matmul-bench times it) and the Spark path (the project's own configs
// that fit the GB10's 99 KiB), in one process on the same data.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/flags_help.h"
#include "common/status_macros.h"
#include "kernels/cuda/families/cublaslt_gemm.h"
#include "kernels/cuda/families/gemm_family.h"
#include "kernels/cuda/families/gemm_family_registry.h"
#include "kernels/cuda/runtime/cuda_resources.h"
#include "kernels/cuda/runtime/cuda_status.h"
#include "kernels/cuda/runtime/device_info.h"
#include "kernels/cuda/runtime/device_ops.h"
#include "kernels/cuda/selector/candidate_timer.h"
#include "kernels/cuda/tools/bench_common.h"
#include "kernels/cuda/tools/launch_names.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, shapes,
          "5120x11008x2048,5120x2048x11008,5120x2048x2048,5120x512x2048",
          "Comma-separated MxNxK shapes (the seed's four by default).");
ABSL_FLAG(std::string, layouts, "NN,NT",
          "Comma-separated operand layouts: N = row-major, T = transposed.");
ABSL_FLAG(int, device, 0, "CUDA device ordinal.");
ABSL_FLAG(int, survey_runs, 3,
          "Timed runs per configuration in the survey pass (after one "
          "untimed run); the finalists are timed again at length.");
ABSL_FLAG(int, finalists, 4,
          "How many of the fastest heuristic candidates, surveyed mma.sync "
          "configurations and own configs (each) are timed again at length.");
ABSL_FLAG(int, warmup, 10, "Untimed runs before each finalist's timing.");
ABSL_FLAG(int, iterations, 50,
          "Timed runs per finalist, back to back (median), and rounds of "
          "the interleaved timing.");
ABSL_FLAG(bool, candidates, false,
          "Print every surveyed configuration with its kernel and time.");
ABSL_FLAG(std::string, json, "", "Also write every timing as JSON here.");

namespace matmul::cuda {
namespace {

// What a kernel's name says of its MMA instruction.
std::string InstructionOf(const std::vector<std::string>& names) {
  std::string kind = "unnamed";
  for (const std::string& name : names) {
    if (absl::StrContains(name, "16816") ||
        absl::StrContains(name, "16x8x16")) {
      return "mma.sync";
    }
    if (absl::StrContains(name, "gmma") || absl::StrContains(name, "nvjet") ||
        absl::StrContains(name, "warpgroup") ||
        absl::StartsWith(name, "sm90")) {
      kind = "wgmma";
    } else if (kind == "unnamed") {
      kind = "other";
    }
  }
  return kind;
}

// One kernel under test: a cuBLASLt configuration or an own config.
struct Candidate {
  std::string label;        // "lt algo 21 tile 18 stages 9 ...", "mma_..."
  std::string source;       // "heuristic", "survey", "own"
  std::string instruction;  // "mma.sync", "wgmma", "other", "unnamed"
  std::vector<std::string> kernels;  // names launched by one run
  std::function<absl::Status(cudaStream_t)> run;
  double survey_seconds = 0;       // median of the survey pass
  double burst_seconds = 0;        // finalists: median back to back
  double interleaved_seconds = 0;  // finalists: median, round robin
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Times `runs` runs of `c` queued behind `warmup` untimed ones (at least
// one, so that no timed run starts on an idle stream and its event pair
// spans the launch's host-side work): the median of each run's CUDA-event
// time.
absl::StatusOr<double> TimeBurst(const Candidate& c, CandidateTimer& timer,
                                 int warmup, int runs) {
  ASSIGN_OR_RETURN(std::vector<double> seconds,
                   timer.TimeBurst(c.run, std::max(1, warmup), runs));
  return Median(seconds);
}

struct Buffers {
  DeviceBuffer a, b, c, workspace;
  size_t workspace_bytes = 0;
};

absl::StatusOr<Buffers> MakeBuffers(const GemmProblem& p, size_t workspace,
                                    cudaStream_t stream, uint64_t seed) {
  const size_t c_bytes = p.m * p.n * (p.c_dtype == DType::kBF16 ? 2 : 4);
  ASSIGN_OR_RETURN(DeviceBuffer a, DeviceBuffer::Create(p.m * p.k * 2));
  ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Create(p.k * p.n * 2));
  ASSIGN_OR_RETURN(DeviceBuffer c, DeviceBuffer::Create(c_bytes));
  ASSIGN_OR_RETURN(DeviceBuffer w, DeviceBuffer::Create(workspace));
  RETURN_IF_ERROR(FillRandomBf16(a.data(), p.m * p.k, seed, stream));
  RETURN_IF_ERROR(FillRandomBf16(b.data(), p.k * p.n, seed + 1, stream));
  return Buffers{std::move(a), std::move(b), std::move(c), std::move(w),
                 workspace};
}

struct Report {
  std::string shape, layout;
  double flops = 0;
  std::vector<Candidate> all;  // their `run` cleared once timed
};

absl::StatusOr<Report> SurveyOne(
    CublasLtGemm& lt, const std::vector<std::unique_ptr<GemmFamily>>& own,
    LaunchNames* names, const BenchShape& shape, const std::string& layout,
    cudaStream_t stream) {
  CandidateTimer timer(stream);
  GemmProblem p = MakeBenchProblem(shape, layout, DType::kBF16);
  size_t own_workspace = 0;
  for (const auto& family : own) {
    for (const GemmCandidate& c : family->Candidates(p)) {
      absl::StatusOr<size_t> bytes = family->WorkspaceBytes(c.choice, p);
      if (bytes.ok()) own_workspace = std::max(own_workspace, *bytes);
    }
  }
  ASSIGN_OR_RETURN(Buffers buf,
                   MakeBuffers(p, std::max(lt.workspace_bytes(), own_workspace),
                               stream, shape.m * 131 + shape.n * 7 + shape.k));
  p.a.data = buf.a.data();
  p.b.data = buf.b.data();
  p.c.data = buf.c.data();
  ASSIGN_OR_RETURN(std::shared_ptr<const CublasLtPlan> plan, lt.GetPlan(p));

  Report report{shape.Name(), layout, p.flops(), {}};
  auto lt_candidate = [&](const cublasLtMatmulHeuristicResult_t& result,
                          std::string source) {
    const cublasLtMatmulAlgo_t& a = result.algo;
    Candidate c;
    c.label = absl::StrFormat(
        "lt algo %d tile %u stages %u swizzle %u inner %u",
        CublasLtGemm::AlgoId(a),
        CublasLtGemm::AlgoConfig(a, CUBLASLT_ALGO_CONFIG_TILE_ID),
        CublasLtGemm::AlgoConfig(a, CUBLASLT_ALGO_CONFIG_STAGES_ID),
        CublasLtGemm::AlgoConfig(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
        CublasLtGemm::AlgoConfig(a, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID));
    c.source = std::move(source);
    c.run = [&lt, plan, result, p, &buf](cudaStream_t s) {
      return lt.RunAlgo(*plan, result, p, s, buf.workspace.data(),
                        buf.workspace_bytes);
    };
    return c;
  };
  for (int i = 0; i < plan->algo_count(); ++i) {
    report.all.push_back(lt_candidate(plan->result(i), "heuristic"));
  }
  ASSIGN_OR_RETURN(
      std::vector<cublasLtMatmulHeuristicResult_t> surveyed,
      lt.AllAlgos(*plan, [&](int index, int count, int algo_id) {
        std::fprintf(stderr, "\r  %s %s: searching algorithm %d (%d of %d)   ",
                     report.shape.c_str(), layout.c_str(), algo_id, index + 1,
                     count);
      }));
  std::fprintf(stderr, "\n");
  for (const auto& r : surveyed)
    report.all.push_back(lt_candidate(r, "survey"));
  for (const auto& family : own) {
    for (const GemmCandidate& k : family->Candidates(p)) {
      if (!k.status.ok()) continue;
      Candidate c;
      c.label = k.choice.name;
      c.source = "own";
      c.instruction = "mma.sync";
      c.run = [p, choice = k.choice, &buf](cudaStream_t s) {
        return choice.family->Run(choice, p, s, buf.workspace.data(),
                                  buf.workspace_bytes);
      };
      report.all.push_back(std::move(c));
    }
  }

  // Survey pass: every candidate briefly, its kernels named on the first
  // (untimed: it may load the kernel's module) run. The heuristic's
  // candidates come first; a configuration whose first timed run is over
  // kSlowFactor times their best is not timed further (thousands of
  // configurations, some of them very slow).
  constexpr double kSlowFactor = 2.5;
  const int survey_runs = std::max(1, absl::GetFlag(FLAGS_survey_runs));
  double heuristic_best = 0;
  for (size_t i = 0; i < report.all.size(); ++i) {
    Candidate& c = report.all[i];
    if (i % 25 == 0 || i + 1 == report.all.size()) {
      std::fprintf(stderr, "\r  %s %s: timing %zu of %zu   ",
                   report.shape.c_str(), layout.c_str(), i + 1,
                   report.all.size());
    }
    if (names != nullptr) names->Take();
    absl::Status ran = c.run(stream);
    if (ran.ok()) ran = CudaStatus(cudaStreamSynchronize(stream), "run");
    if (!ran.ok()) continue;  // accepted by the check, refused to launch
    if (names != nullptr) c.kernels = names->Take();
    if (c.source != "own") c.instruction = InstructionOf(c.kernels);
    ASSIGN_OR_RETURN(c.survey_seconds, TimeBurst(c, timer, 1, 1));
    if (heuristic_best > 0 && c.survey_seconds > kSlowFactor * heuristic_best) {
      continue;
    }
    ASSIGN_OR_RETURN(c.survey_seconds, TimeBurst(c, timer, 1, survey_runs));
    if (c.source == "heuristic" &&
        (heuristic_best == 0 || c.survey_seconds < heuristic_best)) {
      heuristic_best = c.survey_seconds;
    }
  }
  std::fprintf(stderr, "\n");

  // Finalists: the fastest few of the heuristic's candidates (the
  // baseline), of the surveyed mma.sync configurations and of the own
  // configs.
  const int finalists = std::max(1, absl::GetFlag(FLAGS_finalists));
  std::vector<Candidate*> final_set;
  auto take_fastest = [&](auto predicate) {
    std::vector<Candidate*> pool;
    for (Candidate& c : report.all) {
      if (c.survey_seconds > 0 && predicate(c)) pool.push_back(&c);
    }
    std::sort(pool.begin(), pool.end(), [](Candidate* x, Candidate* y) {
      return x->survey_seconds < y->survey_seconds;
    });
    if (pool.size() > static_cast<size_t>(finalists)) pool.resize(finalists);
    final_set.insert(final_set.end(), pool.begin(), pool.end());
  };
  take_fastest([](const Candidate& c) { return c.source == "heuristic"; });
  take_fastest([](const Candidate& c) {
    return c.source == "survey" && c.instruction == "mma.sync";
  });
  take_fastest([](const Candidate& c) { return c.source == "own"; });

  const int warmup = absl::GetFlag(FLAGS_warmup);
  const int iterations = std::max(1, absl::GetFlag(FLAGS_iterations));
  for (Candidate* c : final_set) {
    ASSIGN_OR_RETURN(c->burst_seconds,
                     TimeBurst(*c, timer, warmup, iterations));
  }
  // Interleaved: rounds of one run of each finalist, all queued before a
  // single wait, so that every finalist sees the same clocks (an H200 at
  // its power cap runs each kernel at a clock of its own when timed back to
  // back) and no event pair spans a launch's host-side overhead.
  for (Candidate* c : final_set) RETURN_IF_ERROR(c->run(stream));
  std::vector<TimedLaunch> launches;
  for (Candidate* c : final_set) launches.push_back(c->run);
  ASSIGN_OR_RETURN(
      std::vector<std::vector<double>> rounds,
      timer.TimeInterleaved(launches, iterations, /*shuffler=*/nullptr));
  for (size_t i = 0; i < final_set.size(); ++i) {
    final_set[i]->interleaved_seconds = Median(rounds[i]);
  }
  // The runs refer to this call's buffers.
  for (Candidate& c : report.all) c.run = nullptr;
  return report;
}

// Prints `r`'s three lines (and every candidate with --candidates);
// returns its JSON.
nlohmann::json PrintReport(const Report& r) {
  auto tflops = [&](double s) { return s > 0 ? r.flops / s * 1e-12 : 0; };
  // The finalist of `source` (and `instruction`, unless null) fastest in
  // the interleaved timing, or null.
  auto by = [&](const std::string& source,
                const char* instruction) -> const Candidate* {
    const Candidate* best = nullptr;
    for (const Candidate& c : r.all) {
      if (c.interleaved_seconds <= 0 || c.source != source ||
          (instruction != nullptr && c.instruction != instruction)) {
        continue;
      }
      if (best == nullptr ||
          c.interleaved_seconds < best->interleaved_seconds) {
        best = &c;
      }
    }
    return best;
  };
  const Candidate* baseline = by("heuristic", nullptr);
  int ran = 0, mma_sync = 0;
  for (const Candidate& c : r.all) {
    if (c.source != "survey" || c.survey_seconds <= 0) continue;
    ++ran;
    mma_sync += c.instruction == "mma.sync";
  }
  std::printf(
      "\n%s %s: %d cuBLASLt configurations ran (%d mma.sync, %d "
      "other)\n",
      r.shape.c_str(), r.layout.c_str(), ran, mma_sync, ran - mma_sync);
  for (const auto& [what, c] :
       std::vector<std::pair<const char*, const Candidate*>>{
           {"baseline", baseline},
           {"lt mma.sync", by("survey", "mma.sync")},
           {"spark", by("own", nullptr)}}) {
    if (c == nullptr) {
      std::printf("  %-12s -\n", what);
      continue;
    }
    const double ratio = baseline != nullptr ? baseline->interleaved_seconds /
                                                   c->interleaved_seconds
                                             : 0;
    std::printf("  %-12s %6.0f / %6.0f (%.3f)  %s [%s] %s\n", what,
                tflops(c->burst_seconds), tflops(c->interleaved_seconds), ratio,
                c->label.c_str(), c->instruction.c_str(),
                absl::StrJoin(c->kernels, " + ").c_str());
  }
  nlohmann::json entry = {{"shape", r.shape}, {"layout", r.layout}};
  for (const Candidate& c : r.all) {
    nlohmann::json j = {{"label", c.label},
                        {"source", c.source},
                        {"instruction", c.instruction},
                        {"kernels", c.kernels},
                        {"survey_tflops", tflops(c.survey_seconds)}};
    if (c.burst_seconds > 0) {
      j["burst_tflops"] = tflops(c.burst_seconds);
      j["interleaved_tflops"] = tflops(c.interleaved_seconds);
    }
    entry["candidates"].push_back(j);
    if (absl::GetFlag(FLAGS_candidates) && c.survey_seconds > 0) {
      std::printf("    %7.1f  %-9s %-8s %s %s\n", tflops(c.survey_seconds),
                  c.source.c_str(), c.instruction.c_str(), c.label.c_str(),
                  absl::StrJoin(c.kernels, " + ").c_str());
    }
  }
  return entry;
}

absl::Status Main() {
  ASSIGN_OR_RETURN(std::vector<BenchShape> shapes,
                   ParseShapes(absl::GetFlag(FLAGS_shapes)));
  ASSIGN_OR_RETURN(std::vector<std::string> layouts,
                   ParseLayouts(absl::GetFlag(FLAGS_layouts)));
  if (CudaDeviceCount() == 0) {
    return absl::UnavailableError("no CUDA device: nothing to survey");
  }
  const int device = absl::GetFlag(FLAGS_device);
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), "cudaSetDevice"));
  ASSIGN_OR_RETURN(std::unique_ptr<CublasLtGemm> lt,
                   CublasLtGemm::Create(device));
  // The own families (all but cuBLASLt), held to the GB10's limit: the
  // Spark path.
  FamilySettings settings;
  settings.device = device;
  settings.max_shared_bytes = kSparkSharedBytes;
  std::vector<std::unique_ptr<GemmFamily>> own;
  for (const FamilyFactory& factory : BuiltInFamilies()) {
    if (factory.name == "cublaslt") continue;
    ASSIGN_OR_RETURN(std::unique_ptr<GemmFamily> family,
                     factory.create(settings));
    own.push_back(std::move(family));
  }
  absl::StatusOr<std::unique_ptr<LaunchNames>> names = LaunchNames::Create();
  if (!names.ok()) {
    std::fprintf(stderr,
                 "cublaslt-survey: kernel names unavailable (%s): every "
                 "cuBLASLt kernel is reported as 'unnamed'\n",
                 names.status().ToString().c_str());
  }
  ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create());
  std::printf(
      "TFLOPS, back to back / interleaved (ratio to the baseline, "
      "interleaved). baseline: best of cuBLASLt's heuristic top-%d; "
      "lt mma.sync: the fastest surveyed cuBLASLt configuration whose "
      "kernel is mma.sync m16n8k16; spark: "
      "fastest own config within 99 KiB.\n",
      CublasLtGemm::kDefaultTopK);
  nlohmann::json out = nlohmann::json::array();
  for (const BenchShape& shape : shapes) {
    for (const std::string& layout : layouts) {
      ASSIGN_OR_RETURN(Report r,
                       SurveyOne(*lt, own, names.ok() ? names->get() : nullptr,
                                 shape, layout, stream.get()));
      out.push_back(PrintReport(r));
      std::fflush(stdout);
    }
  }
  const std::string json_path = absl::GetFlag(FLAGS_json);
  if (!json_path.empty()) {
    RETURN_IF_ERROR(WriteJsonFile(json_path, out, 1));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace matmul::cuda

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Times every configuration of every cuBLASLt algorithm on each shape "
      "(not only the heuristic's top-k), names the kernel each launched, "
      "and sets the fastest mma.sync (m16n8k16) kernel beside the baseline "
      "(cuBLASLt's heuristic top-k, 32 MiB workspace) and the Spark path "
      "(own configs within the GB10's 99 KiB), in one process on the same "
      "random data: how fast NVIDIA's own kernels of the Spark's instruction "
      "run on this GPU. Takes minutes (thousands of configurations).\n\n"
      "Example:\n  cublaslt-survey --json=survey.json\n  cublaslt-survey "
      "--shapes=5120x512x2048 --layouts=NT --candidates");
  matmul::HelpListsFlagsFrom("survey_main.cc");
  absl::ParseCommandLine(argc, argv);
  absl::Status status = matmul::cuda::Main();
  if (!status.ok()) {
    std::fprintf(stderr, "cublaslt-survey: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
