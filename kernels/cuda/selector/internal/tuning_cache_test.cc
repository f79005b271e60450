// The tuning cache's file format on its own (no GPU needed): what one
// environment saves it loads back, other environments' sections survive a
// save, an unchanged entry keeps its date, an environment holds at most
// its bound of choices, and a damaged or foreign file is reported rather
// than read (a field of the wrong type reads as missing).
#include "kernels/cuda/selector/internal/tuning_cache.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace matmul::cuda {
namespace {

constexpr size_t kMaxChoices = 100;

class TuningCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() /
             ("tuning_cache_test." + std::to_string(getpid()) + ".json"))
                .string();
    std::filesystem::remove(path_);
  }
  void TearDown() override { std::filesystem::remove(path_); }

  nlohmann::json ReadFile() const {
    std::ifstream in(path_);
    return nlohmann::json::parse(in);
  }

  std::string path_;
};

TEST_F(TuningCacheTest, NoFileLoadsNothing) {
  TuningCache cache(path_, "gpu|a", kMaxChoices);
  auto entries = cache.Load();
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_TRUE(entries->empty());
}

TEST_F(TuningCacheTest, SavedEntriesLoadBackForTheirEnvironmentOnly) {
  TuningCache a(path_, "gpu|a", kMaxChoices);
  ASSERT_TRUE(
      a.Save(101376, {{"64x64x64:NN:bf16:b1", "cublaslt_algo2", 1e-5},
                      {"8x8x8:NT:fp32:b4:ptr", "mma_64x64x32_s4", 2e-6}})
          .ok());
  auto loaded = a.Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->size(), 2u);
  for (const TunedEntry& e : *loaded) {
    if (e.key == "64x64x64:NN:bf16:b1") {
      EXPECT_EQ(e.kernel, "cublaslt_algo2");
      EXPECT_DOUBLE_EQ(e.median_seconds, 1e-5);
    } else {
      EXPECT_EQ(e.key, "8x8x8:NT:fp32:b4:ptr");
      EXPECT_EQ(e.kernel, "mma_64x64x32_s4");
      EXPECT_DOUBLE_EQ(e.median_seconds, 2e-6);
    }
  }
  TuningCache b(path_, "gpu|b", kMaxChoices);
  auto other = b.Load();
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(other->empty());
  EXPECT_EQ(ReadFile()["environments"]["gpu|a"]["max_shared_bytes"], 101376);
}

TEST_F(TuningCacheTest, SaveKeepsOtherEnvironmentsAndUnchangedDates) {
  TuningCache a(path_, "gpu|a", kMaxChoices);
  ASSERT_TRUE(a.Save(0, {{"k1", "cublaslt_algo0", 1e-4}}).ok());
  // Mark the entry's date so that a rewrite would show.
  nlohmann::json root = ReadFile();
  root["environments"]["gpu|a"]["choices"]["k1"]["tuned_at"] = "marked";
  std::ofstream(path_) << root.dump();

  TuningCache b(path_, "gpu|b", kMaxChoices);
  ASSERT_TRUE(b.Save(0, {{"k2", "cublaslt_algo1", 2e-4}}).ok());
  ASSERT_TRUE(a.Save(0, {{"k1", "cublaslt_algo0", 1e-4},
                         {"k3", "cublaslt_algo3", 3e-4}})
                  .ok());
  root = ReadFile();
  EXPECT_EQ(root["format"], 1);
  EXPECT_EQ(root["environments"]["gpu|b"]["choices"]["k2"]["kernel"],
            "cublaslt_algo1");
  EXPECT_EQ(root["environments"]["gpu|a"]["choices"]["k1"]["tuned_at"],
            "marked");
  EXPECT_NE(root["environments"]["gpu|a"]["choices"]["k3"]["tuned_at"],
            "marked");
  // A changed choice gets a new date.
  ASSERT_TRUE(a.Save(0, {{"k1", "cublaslt_algo5", 1e-4}}).ok());
  root = ReadFile();
  EXPECT_EQ(root["environments"]["gpu|a"]["choices"]["k1"]["kernel"],
            "cublaslt_algo5");
  EXPECT_NE(root["environments"]["gpu|a"]["choices"]["k1"]["tuned_at"],
            "marked");
}

// Two daemons share a file: each keeps the other's choices, but past the
// bound the oldest of those not being saved go.
TEST_F(TuningCacheTest, HoldsAtMostItsBoundPerEnvironment) {
  TuningCache a(path_, "gpu|a", 3);
  TuningCache shared(path_, "gpu|a", 3);
  TuningCache other(path_, "gpu|b", 3);
  ASSERT_TRUE(a.Save(0, {{"k1", "cublaslt_algo0", 1e-4},
                         {"k2", "cublaslt_algo1", 1e-4}})
                  .ok());
  ASSERT_TRUE(other
                  .Save(0, {{"o1", "cublaslt_algo0", 1e-4},
                            {"o2", "cublaslt_algo0", 1e-4},
                            {"o3", "cublaslt_algo0", 1e-4}})
                  .ok());
  ASSERT_TRUE(shared.Save(0, {{"k3", "cublaslt_algo2", 1e-4}}).ok());
  nlohmann::json root = ReadFile();
  auto& choices = root["environments"]["gpu|a"]["choices"];
  ASSERT_EQ(choices.size(), 3u);
  choices["k1"]["tuned_at"] = "2020-01-01T00:00:00+00:00";
  choices["k2"]["tuned_at"] = "2021-01-01T00:00:00+00:00";
  std::ofstream(path_) << root.dump();

  ASSERT_TRUE(shared
                  .Save(0, {{"k3", "cublaslt_algo2", 1e-4},
                            {"k4", "cublaslt_algo3", 1e-4}})
                  .ok());
  root = ReadFile();
  EXPECT_FALSE(root["environments"]["gpu|a"]["choices"].contains("k1"));
  EXPECT_TRUE(root["environments"]["gpu|a"]["choices"].contains("k2"));
  // An entry being saved stays even when it is the oldest.
  ASSERT_TRUE(shared
                  .Save(0, {{"k2", "cublaslt_algo1", 1e-4},
                            {"k5", "cublaslt_algo4", 1e-4}})
                  .ok());
  root = ReadFile();
  const auto& now = root["environments"]["gpu|a"]["choices"];
  EXPECT_EQ(now.size(), 3u) << now.dump();
  EXPECT_TRUE(now.contains("k2"));
  EXPECT_TRUE(now.contains("k5"));
  // k3 was saved before k4.
  EXPECT_FALSE(now.contains("k3"));
  EXPECT_TRUE(now.contains("k4"));
  EXPECT_EQ(root["environments"]["gpu|b"]["choices"].size(), 3u);
}

TEST_F(TuningCacheTest, DamagedOrForeignFilesAreReported) {
  std::ofstream(path_) << "{not json";
  TuningCache cache(path_, "gpu|a", kMaxChoices);
  EXPECT_EQ(cache.Load().status().code(), absl::StatusCode::kDataLoss);
  std::ofstream(path_) << R"({"format": 2, "environments": {}})";
  EXPECT_EQ(cache.Load().status().code(),
            absl::StatusCode::kFailedPrecondition);
  std::ofstream(path_) << R"({"format": "1", "environments": {}})";
  EXPECT_EQ(cache.Load().status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Fields of the wrong type read as missing (no exception): the entry
  // names no kernel, which the selector skips.
  std::ofstream(path_) << R"({"format": 1, "environments": {"gpu|a":
      {"choices": {"k1": {"kernel": 5, "median_seconds": "x",
                          "tuned_at": 7}}}}})";
  auto loaded = cache.Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->size(), 1u);
  EXPECT_EQ((*loaded)[0].kernel, "");
  EXPECT_EQ((*loaded)[0].median_seconds, 0.0);
  // ... and a save over such a file rewrites the entry.
  ASSERT_TRUE(cache.Save(0, {{"k1", "cublaslt_algo0", 1e-4}}).ok());
  EXPECT_EQ(ReadFile()["environments"]["gpu|a"]["choices"]["k1"]["kernel"],
            "cublaslt_algo0");
}

}  // namespace
}  // namespace matmul::cuda
