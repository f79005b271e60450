#include "kernels/cuda/selector/internal/tuning_cache.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace matmul::cuda {
namespace {

constexpr int kCacheFormat = 1;

}  // namespace

absl::StatusOr<std::vector<TunedEntry>> TuningCache::Load() const {
  std::vector<TunedEntry> entries;
  std::ifstream in(path_);
  if (!in) return entries;  // no file yet
  nlohmann::json root = nlohmann::json::parse(in, nullptr, false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::DataLossError("not a JSON object");
  }
  if (root.value("format", 0) != kCacheFormat) {
    return absl::FailedPreconditionError("unknown cache format");
  }
  const auto& envs = root.value("environments", nlohmann::json::object());
  auto env = envs.find(environment_);
  if (env == envs.end() || !env->is_object()) return entries;
  const auto& choices = env->value("choices", nlohmann::json::object());
  for (auto it = choices.begin(); it != choices.end(); ++it) {
    if (!it->is_object()) continue;
    entries.push_back({it.key(), it->value("kernel", std::string()),
                       it->value("median_seconds", 0.0)});
  }
  return entries;
}

absl::Status TuningCache::Save(int max_shared_bytes,
                               const std::vector<TunedEntry>& entries) {
  absl::MutexLock file_lock(&file_mu_);
  nlohmann::json root = nlohmann::json::object();
  {
    // Keep other environments' sections (another GPU, another driver).
    std::ifstream in(path_);
    if (in) {
      nlohmann::json existing = nlohmann::json::parse(in, nullptr, false);
      if (!existing.is_discarded() && existing.is_object() &&
          existing.value("format", 0) == kCacheFormat) {
        root = std::move(existing);
      }
    }
  }
  root["format"] = kCacheFormat;
  if (!root.contains("environments") || !root["environments"].is_object()) {
    root["environments"] = nlohmann::json::object();
  }
  nlohmann::json& env = root["environments"][environment_];
  if (!env.is_object()) env = nlohmann::json::object();
  if (!env.contains("choices") || !env["choices"].is_object()) {
    env["choices"] = nlohmann::json::object();
  }
  env["max_shared_bytes"] = max_shared_bytes;
  for (const TunedEntry& tuned : entries) {
    nlohmann::json& entry = env["choices"][tuned.key];
    // Keep the date of an unchanged entry: it says when it was measured.
    if (entry.is_object() && entry.value("kernel", "") == tuned.kernel &&
        entry.value("median_seconds", 0.0) == tuned.median_seconds) {
      continue;
    }
    entry = {
        {"kernel", tuned.kernel},
        {"median_seconds", tuned.median_seconds},
        {"tuned_at", absl::FormatTime(absl::Now())},
    };
  }
  const std::string tmp =
      absl::StrCat(path_, ".tmp.", static_cast<long>(getpid()));
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot write tuning cache ", tmp));
    }
    out << root.dump(2) << "\n";
    if (!out.good()) {
      return absl::DataLossError(absl::StrCat("write failed: ", tmp));
    }
  }
  std::error_code error;
  std::filesystem::rename(tmp, path_, error);
  if (error) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot rename ", tmp, " to ", path_, ": ", error.message()));
  }
  return absl::OkStatus();
}

}  // namespace matmul::cuda
