// matmul-bench: TFLOPS of the project's own kernel families, cuBLASLt and
// the selector's pick on the seed's shapes, measured in one process on the
// same random data with CUDA events.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/flags_help.h"
#include "common/status_macros.h"
#include "kernels/cuda/runtime/device_info.h"
#include "kernels/cuda/selector/gemm_selector.h"
#include "kernels/cuda/tools/bench_common.h"
#include "kernels/cuda/tools/sustained_run.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, shapes,
          "5120x11008x2048,5120x2048x11008,5120x2048x2048,5120x512x2048,"
          "8192x8192x8192,256x4096x4096,16x4096x4096",
          "Comma-separated MxNxK shapes (optionally BxMxNxK for a batch).");
ABSL_FLAG(std::string, layouts, "NN,NT",
          "Comma-separated operand layouts: N = row-major, T = transposed "
          "(column-major); NT is PyTorch's nn.Linear.");
ABSL_FLAG(std::string, out_dtype, "bf16", "Output dtype: bf16 or fp32.");
ABSL_FLAG(int, device, 0, "CUDA device ordinal.");
ABSL_FLAG(int, repeat, 1,
          "Run the whole table this many times and report the spread of the "
          "pick/cuBLASLt ratio across runs.");
ABSL_FLAG(double, target_ms, 40.0,
          "Timing budget per candidate in milliseconds (more timed runs, up "
          "to --max_iterations, while under it).");
ABSL_FLAG(int, min_iterations, 20, "Least timed runs per candidate.");
ABSL_FLAG(int, max_iterations, 200, "Most timed runs per candidate.");
ABSL_FLAG(int, warmup, 5, "Untimed warm-up runs per candidate.");
ABSL_FLAG(int, max_shared_bytes, 0,
          "Shared-memory limit for own configs (0: the device's opt-in "
          "limit; 101376 imposes the GB10's).");
ABSL_FLAG(std::string, json, "", "Also write every timing as JSON here.");
ABSL_FLAG(std::string, tuning_cache, "",
          "Also store each shape's pick in this tuning cache (the daemon's "
          "--tuning_cache), so that a daemon started on it runs the very "
          "kernels measured here.");
ABSL_FLAG(double, sustained_s, 0.0,
          "Also run each shape's pick back to back for this many seconds "
          "(after as long a warm-up) over --operand_sets rotating A and C "
          "with one shared B, as a daemon serving that many clients does: "
          "plainly (the standalone figure to hold a service run against), "
          "with a timing or a timing-disabled event after each product, "
          "and round robin over that many streams. 0: skip.");
ABSL_FLAG(int, operand_sets, 4,
          "Distinct A and C buffers the --sustained_s run rotates through.");
ABSL_FLAG(std::string, sustained_kernels, "pick",
          "Comma-separated kernels the --sustained_s run takes, one after "
          "the other over the same operands: pick (the selector's choice), "
          "spark (the best own config that fits the GB10's 99 KiB), "
          "cublaslt (the best cuBLASLt candidate), or an own config by "
          "name (mma_128x128x64_s2_w2x2_tma). With cublaslt among "
          "them, each kernel's back-to-back figure is also given as a "
          "ratio to cuBLASLt's: the comparison at the GPU's sustained "
          "clock (an H200 runs at its power cap then).");
ABSL_FLAG(bool, candidates, false,
          "Print every candidate's time, not just the table.");

namespace matmul::cuda {
namespace {

double Tflops(const GemmProblem& p, double seconds) {
  return seconds > 0 ? p.flops() / seconds * 1e-12 : 0.0;
}

const CandidateTiming* Best(const std::vector<CandidateTiming>& timings,
                            auto predicate) {
  const CandidateTiming* best = nullptr;
  for (const CandidateTiming& t : timings) {
    if (!t.status.ok() || t.iterations == 0 || !predicate(t)) continue;
    if (best == nullptr || t.median_seconds < best->median_seconds) best = &t;
  }
  return best;
}

struct Row {
  std::string shape, layout;
  // Each family's best (re-timed interleaved with the pick and cuBLASLt):
  // its TFLOPS, its name, and whether it fits 99 KiB.
  std::map<std::string, double> family_tflops;
  std::map<std::string, std::string> family_kernel;
  std::map<std::string, bool> family_fits;
  double spark = 0, lt = 0, pick = 0;
  std::string spark_name, lt_name, pick_name;
  // --sustained_kernels' entries, in flag order: the entry, its kernel's
  // figure in the table above (tuning pass or re-timing), its result.
  struct Sustained {
    std::string which;
    double table_tflops = 0;
    SustainedResult result;
  };
  std::vector<Sustained> sustained;
};

std::string Cell(double tflops, double lt) {
  if (tflops <= 0) return "-";
  return absl::StrFormat("%.0f (%.2f)", tflops, lt > 0 ? tflops / lt : 0.0);
}

absl::Status Main() {
  ASSIGN_OR_RETURN(std::vector<BenchShape> shapes,
                   ParseShapes(absl::GetFlag(FLAGS_shapes)));
  ASSIGN_OR_RETURN(std::vector<std::string> layouts,
                   ParseLayouts(absl::GetFlag(FLAGS_layouts)));
  const std::string dtype_name = absl::GetFlag(FLAGS_out_dtype);
  if (dtype_name != "bf16" && dtype_name != "fp32") {
    return absl::InvalidArgumentError("--out_dtype must be bf16 or fp32");
  }
  const DType dtype = dtype_name == "bf16" ? DType::kBF16 : DType::kFP32;
  SustainedOptions sustained;
  sustained.seconds = absl::GetFlag(FLAGS_sustained_s);
  sustained.operand_sets = absl::GetFlag(FLAGS_operand_sets);
  if (sustained.seconds > 0) RETURN_IF_ERROR(CheckSustainedOptions(sustained));
  const std::vector<std::string> sustained_kernels = absl::StrSplit(
      absl::GetFlag(FLAGS_sustained_kernels), ',', absl::SkipEmpty());
  for (const std::string& which : sustained_kernels) {
    if (which != "pick" && which != "spark" && which != "cublaslt" &&
        !absl::StartsWith(which, "mma_") &&
        !absl::StartsWith(which, "wgmma_")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--sustained_kernels: ", which,
          " is not pick, spark, cublaslt or an mma_ or wgmma_ config"));
    }
  }
  if (sustained.seconds > 0 && sustained_kernels.empty()) {
    return absl::InvalidArgumentError("--sustained_kernels is empty");
  }
  if (CudaDeviceCount() == 0) {
    return absl::UnavailableError("no CUDA device: nothing to benchmark");
  }

  SelectorOptions options;
  options.background_tuning = false;
  options.tuning_cache = absl::GetFlag(FLAGS_tuning_cache);
  options.max_shared_bytes = absl::GetFlag(FLAGS_max_shared_bytes);
  options.target_seconds = absl::GetFlag(FLAGS_target_ms) * 1e-3;
  options.min_iterations = absl::GetFlag(FLAGS_min_iterations);
  options.max_iterations = absl::GetFlag(FLAGS_max_iterations);
  options.warmup_iterations = absl::GetFlag(FLAGS_warmup);
  ASSIGN_OR_RETURN(std::unique_ptr<GemmSelector> selector,
                   GemmSelector::Create(absl::GetFlag(FLAGS_device), options));
  std::string family_list;
  for (const auto& family : selector->families()) {
    absl::StrAppend(&family_list, family_list.empty() ? "" : ", ",
                    family->name(), " (", family->Summary(), ")");
  }
  std::fprintf(stderr, "matmul-bench: %s, families %s, limit %d B\n",
               selector->environment().c_str(), family_list.c_str(),
               selector->max_shared_bytes());
  // The table's family columns: the own kernels' tile groups, in the order
  // the candidates list them.
  std::vector<std::string> families;

  nlohmann::json out;
  out["environment"] = selector->environment();
  out["max_shared_bytes"] = selector->max_shared_bytes();
  out["runs"] = nlohmann::json::array();
  const int repeat = std::max(1, absl::GetFlag(FLAGS_repeat));
  std::vector<std::vector<Row>> all_rows(repeat);

  for (int r = 0; r < repeat; ++r) {
    nlohmann::json run = nlohmann::json::array();
    for (const BenchShape& shape : shapes) {
      for (const std::string& layout : layouts) {
        const GemmProblem p = MakeBenchProblem(shape, layout, dtype);
        std::fprintf(stderr, "[%d/%d] %s %s ...\n", r + 1, repeat,
                     shape.Name().c_str(), layout.c_str());
        std::vector<CandidateTiming> timings;
        ASSIGN_OR_RETURN(KernelChoice tuned, selector->Tune(p, &timings));
        Row row;
        row.shape = shape.Name();
        row.layout = layout;
        for (const CandidateTiming& t : timings) {
          if (t.group != "cublaslt" &&
              std::find(families.begin(), families.end(), t.group) ==
                  families.end()) {
            families.push_back(t.group);
          }
        }
        std::vector<const CandidateTiming*> family_best;
        for (const std::string& family : families) {
          family_best.push_back(Best(timings, [&](const CandidateTiming& t) {
            return t.group == family;
          }));
        }
        const CandidateTiming* spark = Best(
            timings, [](const CandidateTiming& t) { return t.fits_spark; });
        const CandidateTiming* lt = Best(timings, [](const CandidateTiming& t) {
          return t.group == "cublaslt";
        });
        // The pick as the service would run it (Choose), re-timed
        // interleaved with the best cuBLASLt and Spark candidates and each
        // family's best, so the ratios compare like with like.
        ASSIGN_OR_RETURN(KernelChoice pick, selector->Choose(p));
        std::vector<KernelChoice> final_choices = {pick};
        if (lt != nullptr) final_choices.push_back(lt->choice);
        const size_t first_family = final_choices.size();
        for (const CandidateTiming* best : family_best) {
          if (best != nullptr) final_choices.push_back(best->choice);
        }
        if (spark != nullptr) final_choices.push_back(spark->choice);
        ASSIGN_OR_RETURN(std::vector<CandidateTiming> final_timings,
                         selector->TimeChoices(p, final_choices));
        for (size_t f = 0, at = first_family; f < families.size(); ++f) {
          if (family_best[f] == nullptr) continue;
          row.family_tflops[families[f]] =
              Tflops(p, final_timings[at++].median_seconds);
          row.family_kernel[families[f]] = family_best[f]->choice.name;
          row.family_fits[families[f]] = family_best[f]->fits_spark;
        }
        row.pick = Tflops(p, final_timings[0].median_seconds);
        row.pick_name = pick.name;
        if (lt != nullptr) {
          row.lt = Tflops(p, final_timings[1].median_seconds);
          row.lt_name = lt->choice.name;
        }
        if (spark != nullptr) {
          row.spark = Tflops(p, final_timings.back().median_seconds);
          row.spark_name = spark->choice.name;
        }
        (void)tuned;
        if (sustained.seconds > 0 && r + 1 == repeat) {
          // An entry's candidate (null: the pick) and its table figure.
          auto entry_of = [&](const std::string& which)
              -> std::pair<const CandidateTiming*, double> {
            if (which == "pick") return {nullptr, row.pick};
            if (which == "spark") return {spark, row.spark};
            if (which == "cublaslt") return {lt, row.lt};
            const CandidateTiming* own =
                Best(timings, [&](const CandidateTiming& t) {
                  return t.choice.name == which;
                });
            return {own, own ? Tflops(p, own->median_seconds) : 0.0};
          };
          std::vector<KernelChoice> choices;
          std::vector<double> table_tflops;
          for (const std::string& which : sustained_kernels) {
            const auto [other, table] = entry_of(which);
            if (which != "pick" && other == nullptr) {
              return absl::FailedPreconditionError(
                  absl::StrCat("no ", which, " candidate ran for ", row.shape));
            }
            choices.push_back(other ? other->choice : pick);
            table_tflops.push_back(table);
          }
          SustainedOptions options = sustained;
          size_t started = 0;
          options.on_kernel_start = [&](const KernelChoice& choice) {
            std::fprintf(stderr, "  sustained run of %s: %s ...\n",
                         sustained_kernels[started++].c_str(),
                         choice.name.c_str());
          };
          ASSIGN_OR_RETURN(std::vector<SustainedResult> results,
                           RunSustained(choices, p, options));
          for (size_t i = 0; i < results.size(); ++i) {
            row.sustained.push_back(
                {sustained_kernels[i], table_tflops[i], std::move(results[i])});
          }
        }

        nlohmann::json entry;
        entry["shape"] = row.shape;
        entry["layout"] = layout;
        entry["flops"] = p.flops();
        entry["pick"] = {{"kernel", row.pick_name}, {"tflops", row.pick}};
        entry["cublaslt_best"] = {{"kernel", row.lt_name}, {"tflops", row.lt}};
        entry["spark_best"] = {{"kernel", row.spark_name},
                               {"tflops", row.spark}};
        entry["family_best"] = nlohmann::json::array();
        for (const auto& [family, tflops] : row.family_tflops) {
          entry["family_best"].push_back(
              {{"family", family},
               {"kernel", row.family_kernel.at(family)},
               {"tflops", tflops}});
        }
        for (const auto& [which, table, result] : row.sustained) {
          entry["sustained"].push_back(
              {{"which", which},
               {"kernel", result.choice.name},
               {"products", result.products},
               {"operand_sets", sustained.operand_sets},
               {"back_to_back_tflops", result.back_to_back_tflops},
               {"event_after_each_tflops", result.event_after_each_tflops},
               {"plain_event_after_each_tflops",
                result.plain_event_after_each_tflops},
               {"streams_tflops", result.streams_tflops}});
        }
        entry["candidates"] = nlohmann::json::array();
        for (const CandidateTiming& t : timings) {
          nlohmann::json c = {{"kernel", t.choice.name},
                              {"family", t.group},
                              {"shared_bytes", t.shared_bytes},
                              {"fits_spark", t.fits_spark},
                              {"ok", t.status.ok()}};
          if (t.status.ok()) {
            c["median_seconds"] = t.median_seconds;
            c["min_seconds"] = t.min_seconds;
            c["max_seconds"] = t.max_seconds;
            c["iterations"] = t.iterations;
            c["tflops"] = Tflops(p, t.median_seconds);
          } else {
            c["error"] = std::string(t.status.message());
          }
          entry["candidates"].push_back(c);
          if (absl::GetFlag(FLAGS_candidates)) {
            std::fprintf(stderr, "    %-32s %8.1f TFLOPS %s\n",
                         t.choice.name.c_str(),
                         t.status.ok() ? Tflops(p, t.median_seconds) : 0.0,
                         t.status.ok() ? "" : t.status.ToString().c_str());
          }
        }
        run.push_back(entry);
        all_rows[r].push_back(std::move(row));
      }
    }
    out["runs"].push_back(run);
  }

  // The table (last run), then the spread over runs.
  std::string header = absl::StrFormat("%-18s %-3s", "shape", "ab");
  for (const std::string& f : families) {
    absl::StrAppendFormat(&header, " %14s", f);
  }
  absl::StrAppendFormat(&header, " %14s %8s %14s  %s\n", "spark(<=99K)",
                        "cublasLt", "pick", "pick kernel");
  std::printf(
      "\nTFLOPS (ratio to cuBLASLt). Family cells: best config of the "
      "family, re-timed interleaved with cuBLASLt and the pick; '*' = it "
      "fits the GB10's 99 KiB.\n%s",
      header.c_str());
  const std::vector<Row>& rows = all_rows.back();
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& row = rows[i];
    std::string line = absl::StrFormat("%-18s %-3s", row.shape, row.layout);
    for (const std::string& f : families) {
      auto it = row.family_tflops.find(f);
      std::string cell =
          it == row.family_tflops.end()
              ? "-"
              : Cell(it->second, row.lt) + (row.family_fits.at(f) ? "*" : " ");
      absl::StrAppendFormat(&line, " %14s", cell);
    }
    absl::StrAppendFormat(&line, " %14s %8.0f %14s  %s\n",
                          Cell(row.spark, row.lt), row.lt,
                          Cell(row.pick, row.lt), row.pick_name);
    std::printf("%s", line.c_str());
  }
  if (sustained.seconds > 0) {
    std::printf(
        "\nSustained: each kernel back to back, %.1f s per column after as "
        "long a warm-up, %d rotating A/C sets and one B, the kernels one "
        "after the other on the same operands. TFLOPS (ratio to back to "
        "back; back to back: to the table's figure for that kernel, then "
        "to cuBLASLt's back to back)\n%-18s %-3s %-8s %-22s %6s %13s %6s "
        "%13s %13s %13s\n",
        sustained.seconds, sustained.operand_sets, "shape", "ab", "which",
        "kernel", "table", "back to back", "/ lt", "timing event",
        "plain event", "streams");
    for (const Row& row : rows) {
      double lt_b2b = 0;
      for (const auto& [which, table, s] : row.sustained) {
        if (which == "cublaslt") lt_b2b = s.back_to_back_tflops;
      }
      for (const auto& [which, table, s] : row.sustained) {
        const double b2b = s.back_to_back_tflops;
        const std::string vs_lt =
            lt_b2b > 0 ? absl::StrFormat("%.2f", b2b / lt_b2b) : "-";
        std::printf(
            "%-18s %-3s %-8s %-22s %6.0f %6.0f (%.2f) %6s %6.0f (%.2f) "
            "%6.0f (%.2f) %6.0f (%.2f)\n",
            row.shape.c_str(), row.layout.c_str(), which.c_str(),
            s.choice.name.c_str(), table, b2b, b2b / table, vs_lt.c_str(),
            s.event_after_each_tflops, s.event_after_each_tflops / b2b,
            s.plain_event_after_each_tflops,
            s.plain_event_after_each_tflops / b2b, s.streams_tflops,
            s.streams_tflops / b2b);
      }
    }
    std::printf(
        "(timing / plain event: one recorded after each product; streams: "
        "round robin over %d streams, an event pair around each product)\n",
        sustained.operand_sets);
  }
  if (repeat > 1) {
    std::printf(
        "\nSpread over %d runs (pick/cuBLASLt and spark/cuBLASLt: "
        "median [min, max]):\n",
        repeat);
    for (size_t i = 0; i < rows.size(); ++i) {
      std::vector<double> pick_ratio, spark_ratio;
      for (int r = 0; r < repeat; ++r) {
        const Row& row = all_rows[r][i];
        if (row.lt > 0) {
          pick_ratio.push_back(row.pick / row.lt);
          if (row.spark > 0) spark_ratio.push_back(row.spark / row.lt);
        }
      }
      auto summary = [](std::vector<double> v) {
        if (v.empty()) return std::string("-");
        std::sort(v.begin(), v.end());
        return absl::StrFormat("%.3f [%.3f, %.3f]", v[v.size() / 2], v.front(),
                               v.back());
      };
      std::printf("%-18s %-3s pick %s  spark %s\n", rows[i].shape.c_str(),
                  rows[i].layout.c_str(), summary(pick_ratio).c_str(),
                  summary(spark_ratio).c_str());
    }
  }
  const std::string json_path = absl::GetFlag(FLAGS_json);
  if (!json_path.empty()) {
    RETURN_IF_ERROR(WriteJsonFile(json_path, out, 2));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace matmul::cuda

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Benchmarks BF16 GEMM on the GPU: every own kernel config (best per "
      "tile family, and the best that fits the DGX Spark's 99 KiB of shared "
      "memory), cuBLASLt (best of its heuristic top-k, 32 MiB workspace) and "
      "the selector's pick, in TFLOPS with the ratio to cuBLASLt. Random "
      "non-zero inputs, rotated when they fit in L2; CUDA events; median of "
      "many runs after warm-up.\n\nExample:\n  matmul-bench --repeat=3 "
      "--json=bench.json\n  matmul-bench --shapes=4096x4096x4096 "
      "--layouts=NT --candidates");
  matmul::HelpListsFlagsFrom("bench_main.cc");
  absl::ParseCommandLine(argc, argv);
  absl::Status status = matmul::cuda::Main();
  if (!status.ok()) {
    std::fprintf(stderr, "matmul-bench: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
