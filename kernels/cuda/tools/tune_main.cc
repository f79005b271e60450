// matmul-tune: times every kernel for a list of shapes and stores the
// fastest in the selector's JSON cache, so the daemon starts tuned.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/flags_help.h"
#include "common/status_macros.h"
#include "kernels/cuda/runtime/device_info.h"
#include "kernels/cuda/selector/gemm_selector.h"

ABSL_FLAG(std::string, shapes, "",
          "Comma-separated shapes: [Bx]MxNxK[:LL], LL the operand layouts "
          "(NN, NT, TN, TT); without :LL every --layouts entry is tuned.");
ABSL_FLAG(std::string, shapes_file, "",
          "File with one shape per line in the --shapes syntax ('#' starts "
          "a comment).");
ABSL_FLAG(std::string, layouts, "NN,NT",
          "Layouts for shapes given without one.");
ABSL_FLAG(std::string, out_dtype, "bf16", "Output dtype: bf16, fp32 or both.");
ABSL_FLAG(std::string, cache, "matmul_tuning.json",
          "The selector's JSON cache file (the daemon's --tuning_cache).");
ABSL_FLAG(int, device, 0, "CUDA device ordinal.");
ABSL_FLAG(int, max_shared_bytes, 0,
          "Shared-memory limit for own configs (0: the device's opt-in).");
ABSL_FLAG(bool, force, false, "Re-tune shapes the cache already holds.");

namespace matmul::cuda {
namespace {

absl::Status ParseLine(absl::string_view item,
                       const std::vector<std::string>& default_layouts,
                       const std::vector<DType>& dtypes,
                       std::vector<GemmProblem>& out) {
  item = absl::StripAsciiWhitespace(item);
  if (item.empty()) return absl::OkStatus();
  std::vector<std::string> halves = absl::StrSplit(item, ':');
  std::vector<int64_t> dims;
  for (absl::string_view part : absl::StrSplit(halves[0], 'x')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < 1) {
      return absl::InvalidArgumentError(absl::StrCat("bad shape '", item, "'"));
    }
    dims.push_back(v);
  }
  if (dims.size() == 3) dims.insert(dims.begin(), 1);
  if (dims.size() != 4 || halves.size() > 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad shape '", item, "': expected [Bx]MxNxK[:LL]"));
  }
  std::vector<std::string> layouts = default_layouts;
  if (halves.size() == 2) layouts = {halves[1]};
  for (const std::string& l : layouts) {
    if (l.size() != 2 || (l[0] != 'N' && l[0] != 'T') ||
        (l[1] != 'N' && l[1] != 'T')) {
      return absl::InvalidArgumentError(absl::StrCat("bad layout '", l, "'"));
    }
    for (DType dtype : dtypes) {
      GemmProblem p;
      p.batch = dims[0];
      p.m = dims[1];
      p.n = dims[2];
      p.k = dims[3];
      p.c_dtype = dtype;
      p.a.strides =
          l[0] == 'T' ? Strides{p.m * p.k, 1, p.m} : Strides{p.m * p.k, p.k, 1};
      p.b.strides =
          l[1] == 'T' ? Strides{p.k * p.n, 1, p.k} : Strides{p.k * p.n, p.n, 1};
      p.c.strides = {p.m * p.n, p.n, 1};
      out.push_back(p);
    }
  }
  return absl::OkStatus();
}

void Progress(size_t done, size_t total, const std::string& text) {
  constexpr int kWidth = 30;
  const int filled =
      total == 0 ? kWidth : static_cast<int>(kWidth * done / total);
  std::fprintf(
      stderr, "\r[%s%s] %zu/%zu %-60.60s", std::string(filled, '#').c_str(),
      std::string(kWidth - filled, '.').c_str(), done, total, text.c_str());
  std::fflush(stderr);
}

absl::Status Main() {
  const std::vector<std::string> layouts =
      absl::StrSplit(absl::GetFlag(FLAGS_layouts), ',', absl::SkipEmpty());
  std::vector<DType> dtypes;
  const std::string dtype = absl::GetFlag(FLAGS_out_dtype);
  if (dtype == "bf16" || dtype == "both") dtypes.push_back(DType::kBF16);
  if (dtype == "fp32" || dtype == "both") dtypes.push_back(DType::kFP32);
  if (dtypes.empty()) {
    return absl::InvalidArgumentError("--out_dtype must be bf16, fp32 or both");
  }
  std::vector<GemmProblem> problems;
  for (absl::string_view item :
       absl::StrSplit(absl::GetFlag(FLAGS_shapes), ',', absl::SkipEmpty())) {
    RETURN_IF_ERROR(ParseLine(item, layouts, dtypes, problems));
  }
  const std::string file = absl::GetFlag(FLAGS_shapes_file);
  if (!file.empty()) {
    std::ifstream in(file);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", file));
    std::string line;
    while (std::getline(in, line)) {
      line = line.substr(0, line.find('#'));
      RETURN_IF_ERROR(ParseLine(line, layouts, dtypes, problems));
    }
  }
  if (problems.empty()) {
    return absl::InvalidArgumentError(
        "no shapes: give --shapes or --shapes_file");
  }
  if (CudaDeviceCount() == 0) {
    return absl::UnavailableError("no CUDA device: nothing to tune");
  }
  SelectorOptions options;
  options.tuning_cache = absl::GetFlag(FLAGS_cache);
  options.background_tuning = false;
  options.max_shared_bytes = absl::GetFlag(FLAGS_max_shared_bytes);
  ASSIGN_OR_RETURN(std::unique_ptr<GemmSelector> selector,
                   GemmSelector::Create(absl::GetFlag(FLAGS_device), options));
  std::fprintf(stderr, "matmul-tune: %s -> %s\n",
               selector->environment().c_str(), options.tuning_cache.c_str());
  const absl::Time start = absl::Now();
  size_t tuned = 0, skipped = 0;
  for (size_t i = 0; i < problems.size(); ++i) {
    const GemmProblem& p = problems[i];
    const std::string key = GemmSelector::Key(p);
    Progress(i, problems.size(), key);
    ASSIGN_OR_RETURN(KernelChoice known, selector->Choose(p));
    if (known.tuned && !absl::GetFlag(FLAGS_force)) {
      ++skipped;
      continue;
    }
    ASSIGN_OR_RETURN(KernelChoice choice, selector->Tune(p));
    ++tuned;
    std::fprintf(stderr, "\r%-100s\r", "");
    std::fprintf(stderr, "%-36s %-28s %8.1f TFLOPS\n", key.c_str(),
                 choice.name.c_str(),
                 p.flops() / choice.median_seconds * 1e-12);
  }
  Progress(problems.size(), problems.size(), "done");
  std::fprintf(stderr, "\nmatmul-tune: %zu tuned, %zu already cached, %.1f s\n",
               tuned, skipped, absl::ToDoubleSeconds(absl::Now() - start));
  return absl::OkStatus();
}

}  // namespace
}  // namespace matmul::cuda

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Pre-tunes GEMM shapes into the selector's JSON cache (keyed by GPU, "
      "compute capability, driver and library versions).\n\nExample:\n  "
      "matmul-tune --cache=/var/lib/matmul/tuning.json "
      "--shapes=5120x11008x2048,5120x2048x11008:NT");
  matmul::HelpListsFlagsFrom("tune_main.cc");
  absl::ParseCommandLine(argc, argv);
  absl::Status status = matmul::cuda::Main();
  if (!status.ok()) {
    std::fprintf(stderr, "matmul-tune: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
