// The tuning cache's file format on its own (no GPU needed): what one
// environment saves it loads back, other environments' sections survive a
// save, an unchanged entry keeps its date, and a damaged or foreign file
// is reported rather than read.
#include "kernels/cuda/selector/internal/tuning_cache.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace matmul::cuda {
namespace {

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
  TuningCache cache(path_, "gpu|a");
  auto entries = cache.Load();
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_TRUE(entries->empty());
}

TEST_F(TuningCacheTest, SavedEntriesLoadBackForTheirEnvironmentOnly) {
  TuningCache a(path_, "gpu|a");
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
  TuningCache b(path_, "gpu|b");
  auto other = b.Load();
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(other->empty());
  EXPECT_EQ(ReadFile()["environments"]["gpu|a"]["max_shared_bytes"], 101376);
}

TEST_F(TuningCacheTest, SaveKeepsOtherEnvironmentsAndUnchangedDates) {
  TuningCache a(path_, "gpu|a");
  ASSERT_TRUE(a.Save(0, {{"k1", "cublaslt_algo0", 1e-4}}).ok());
  // Mark the entry's date so that a rewrite would show.
  nlohmann::json root = ReadFile();
  root["environments"]["gpu|a"]["choices"]["k1"]["tuned_at"] = "marked";
  std::ofstream(path_) << root.dump();

  TuningCache b(path_, "gpu|b");
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

TEST_F(TuningCacheTest, DamagedOrForeignFilesAreReported) {
  std::ofstream(path_) << "{not json";
  TuningCache cache(path_, "gpu|a");
  EXPECT_EQ(cache.Load().status().code(), absl::StatusCode::kDataLoss);
  std::ofstream(path_) << R"({"format": 2, "environments": {}})";
  EXPECT_EQ(cache.Load().status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace matmul::cuda
