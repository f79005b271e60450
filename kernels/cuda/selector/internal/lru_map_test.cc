// LruMap on its own (no GPU needed): it never holds more than its
// capacity, forgets the entry used least recently, and a Find counts as a
// use.
#include "kernels/cuda/selector/internal/lru_map.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace matmul::cuda {
namespace {

std::vector<std::string> KeysByRecency(const LruMap<int>& map) {
  std::vector<std::string> keys;
  map.ForEach([&](const std::string& key, int) { keys.push_back(key); });
  return keys;
}

TEST(LruMapTest, ForgetsTheLeastRecentlyUsed) {
  LruMap<int> map(3);
  EXPECT_FALSE(map.Put("a", 1));
  EXPECT_FALSE(map.Put("b", 2));
  EXPECT_FALSE(map.Put("c", 3));
  // A find is a use: "a" is now the most recent, "b" the least.
  ASSERT_NE(map.Find("a"), nullptr);
  EXPECT_EQ(*map.Find("a"), 1);
  EXPECT_TRUE(map.Put("d", 4));
  EXPECT_EQ(map.Find("b"), nullptr);
  EXPECT_EQ(KeysByRecency(map), (std::vector<std::string>{"d", "a", "c"}));
  // Replacing a value forgets nothing and makes it the most recent.
  EXPECT_FALSE(map.Put("c", 30));
  EXPECT_EQ(*map.Find("c"), 30);
  EXPECT_EQ(KeysByRecency(map), (std::vector<std::string>{"c", "d", "a"}));
  EXPECT_EQ(map.size(), 3u);
}

TEST(LruMapTest, HoldsAtMostItsCapacityUnderRandomUse) {
  constexpr size_t kCapacity = 64;
  LruMap<int> map(kCapacity);
  std::mt19937_64 rng(std::random_device{}());
  // A reference of recency: the keys, most recent first.
  std::vector<std::string> recency;
  int forgotten = 0;
  for (int step = 0; step < 20000; ++step) {
    const std::string key = std::to_string(rng() % 200);
    auto it = std::find(recency.begin(), recency.end(), key);
    if (rng() % 2 == 0) {
      const bool held = it != recency.end();
      ASSERT_EQ(map.Find(key) != nullptr, held) << key;
      if (held) {
        recency.erase(it);
        recency.insert(recency.begin(), key);
      }
      continue;
    }
    if (it != recency.end()) recency.erase(it);
    recency.insert(recency.begin(), key);
    const bool forgot = recency.size() > kCapacity;
    if (forgot) recency.pop_back();
    ASSERT_EQ(map.Put(key, step), forgot) << key;
    forgotten += forgot;
    ASSERT_LE(map.size(), kCapacity);
  }
  EXPECT_EQ(KeysByRecency(map), recency);
  EXPECT_GT(forgotten, 0);
}

TEST(LruMapTest, HoldsOneEntryAtLeast) {
  LruMap<int> map(0);
  EXPECT_EQ(map.capacity(), 1u);
  map.Put("a", 1);
  EXPECT_TRUE(map.Put("b", 2));
  EXPECT_EQ(map.Find("a"), nullptr);
  EXPECT_EQ(*map.Find("b"), 2);
}

}  // namespace
}  // namespace matmul::cuda
