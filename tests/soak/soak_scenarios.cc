#include "tests/soak/soak_scenarios.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace matmul::soak {
namespace {

// Checked products dominate: they are what a wrong answer would show up
// in, and every other scenario runs beside them. Kills are rare because
// each costs a process start.
constexpr ScenarioInfo kScenarios[] = {
    {Scenario::kProductInline, "product_inline", 8, true},
    {Scenario::kProductShm, "product_shm", 8, true},
    {Scenario::kProductRing, "product_ring", 5, true},
    {Scenario::kProductStream, "product_stream", 3, true},
    {Scenario::kMalformed, "malformed", 4, true},
    {Scenario::kUnparseable, "unparseable", 1, true},
    {Scenario::kOversized, "oversized", 1, true},
    {Scenario::kCancel, "cancel", 3, true},
    {Scenario::kDeadline, "deadline", 3, true},
    {Scenario::kUnregister, "unregister", 2, true},
    {Scenario::kTruncate, "truncate", 2, true},
    {Scenario::kStreamDrop, "stream_drop", 2, true},
    {Scenario::kRingDrop, "ring_drop", 2, true},
    {Scenario::kKill, "kill", 1, true},
    {Scenario::kRingChaos, "ring_chaos", 2, true},
    {Scenario::kRingKill, "ring_kill", 1, true},
    {Scenario::kSharedWeight, "shared_weight", 3, true},
    {Scenario::kSharedKill, "shared_kill", 1, true},
    // Named explicitly (or through --regions): they need a GPU.
    {Scenario::kProductIpc, "product_ipc", 6, false},
    {Scenario::kProductVmm, "product_vmm", 6, false},
    {Scenario::kStreamBatch, "stream_batch", 4, false},
};

}  // namespace

absl::Span<const ScenarioInfo> AllScenarios() { return kScenarios; }

const ScenarioInfo& InfoOf(Scenario scenario) {
  for (const ScenarioInfo& info : kScenarios) {
    if (info.scenario == scenario) return info;
  }
  return kScenarios[0];  // unreachable: every enumerator is listed
}

absl::StatusOr<std::vector<Scenario>> ParseScenarios(absl::string_view text) {
  std::vector<Scenario> chosen;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    const bool remove = absl::ConsumePrefix(&item, "-");
    if (item == "all") {
      for (const ScenarioInfo& info : kScenarios) {
        if (info.in_all) chosen.push_back(info.scenario);
      }
      continue;
    }
    const ScenarioInfo* found = nullptr;
    for (const ScenarioInfo& info : kScenarios) {
      if (item == info.name) found = &info;
    }
    if (found == nullptr) {
      std::vector<std::string> names;
      for (const ScenarioInfo& info : kScenarios) names.push_back(info.name);
      return absl::InvalidArgumentError(
          absl::StrCat("unknown scenario '", item, "'; expected all or ",
                       absl::StrJoin(names, ", "), " (a leading '-' removes)"));
    }
    if (remove) {
      chosen.erase(std::remove(chosen.begin(), chosen.end(), found->scenario),
                   chosen.end());
    } else {
      chosen.push_back(found->scenario);
    }
  }
  std::sort(chosen.begin(), chosen.end());
  chosen.erase(std::unique(chosen.begin(), chosen.end()), chosen.end());
  if (chosen.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--scenarios='", text, "' enables no scenario"));
  }
  return chosen;
}

std::string ScenarioNames(absl::Span<const Scenario> scenarios) {
  std::vector<std::string> names;
  for (Scenario scenario : scenarios) names.push_back(InfoOf(scenario).name);
  return absl::StrJoin(names, ",");
}

}  // namespace matmul::soak
