#include "kernels/cuda/selector/internal/tuning_cache.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace matmul::cuda {
namespace {

constexpr int kCacheFormat = 1;

// object[name] when it holds a T, else `fallback`: nlohmann's value()
// throws on a field of another type, and a damaged file must cost a
// re-tune, not the daemon.
template <typename T>
T FieldOr(const nlohmann::json& object, const char* name, T fallback) {
  if (!object.is_object()) return fallback;
  auto it = object.find(name);
  if (it == object.end()) return fallback;
  bool fits = false;
  if constexpr (std::is_same_v<T, std::string>) {
    fits = it->is_string();
  } else if constexpr (std::is_floating_point_v<T>) {
    fits = it->is_number();
  } else {
    fits = it->is_number_integer();
  }
  return fits ? it->template get<T>() : fallback;
}

// Drops the choices with the oldest dates (an unreadable date counts as
// oldest) that are not among `kept` until at most `max_choices` remain.
void DropOldestBeyond(size_t max_choices, const std::vector<TunedEntry>& kept,
                      nlohmann::json& choices) {
  if (choices.size() <= max_choices) return;
  absl::flat_hash_set<std::string> keep;
  for (const TunedEntry& entry : kept) keep.insert(entry.key);
  std::vector<std::pair<absl::Time, std::string>> droppable;
  for (auto it = choices.begin(); it != choices.end(); ++it) {
    if (keep.contains(it.key())) continue;
    absl::Time tuned_at;
    std::string error;
    if (!absl::ParseTime(absl::RFC3339_full,
                         FieldOr<std::string>(*it, "tuned_at", ""), &tuned_at,
                         &error)) {
      tuned_at = absl::InfinitePast();
    }
    droppable.emplace_back(tuned_at, it.key());
  }
  std::sort(droppable.begin(), droppable.end());
  for (const auto& [tuned_at, key] : droppable) {
    if (choices.size() <= max_choices) break;
    choices.erase(key);
  }
}

}  // namespace

absl::StatusOr<std::vector<TunedEntry>> TuningCache::Load() const {
  std::vector<TunedEntry> entries;
  std::ifstream in(path_);
  if (!in) return entries;  // no file yet
  nlohmann::json root = nlohmann::json::parse(in, nullptr, false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::DataLossError("not a JSON object");
  }
  if (FieldOr(root, "format", 0) != kCacheFormat) {
    return absl::FailedPreconditionError("unknown cache format");
  }
  const auto& envs = root.value("environments", nlohmann::json::object());
  auto env = envs.find(environment_);
  if (env == envs.end() || !env->is_object()) return entries;
  const auto& choices = env->value("choices", nlohmann::json::object());
  for (auto it = choices.begin(); it != choices.end(); ++it) {
    if (!it->is_object()) continue;
    entries.push_back({it.key(), FieldOr<std::string>(*it, "kernel", ""),
                       FieldOr(*it, "median_seconds", 0.0)});
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
          FieldOr(existing, "format", 0) == kCacheFormat) {
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
    if (FieldOr<std::string>(entry, "kernel", "") == tuned.kernel &&
        FieldOr(entry, "median_seconds", 0.0) == tuned.median_seconds) {
      continue;
    }
    entry = {
        {"kernel", tuned.kernel},
        {"median_seconds", tuned.median_seconds},
        {"tuned_at", absl::FormatTime(absl::Now())},
    };
  }
  DropOldestBeyond(max_choices_, entries, env["choices"]);
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
