// The soak's memory rules (rss_watch.h): window means, slope, growth and
// the after-load ratio, on series made up for each case.
#include "tests/soak/rss_watch.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace matmul::soak {
namespace {

constexpr double kMB = 1e6;

// A sample every `every` from `every` to `load`, of bytes(t in minutes).
template <typename F>
std::vector<RssSample> Series(absl::Duration load, absl::Duration every,
                              F bytes) {
  std::vector<RssSample> samples;
  for (absl::Duration at = every; at <= load; at += every) {
    samples.push_back(
        {at, static_cast<int64_t>(bytes(absl::ToDoubleMinutes(at)))});
  }
  return samples;
}

TEST(FractionFlagTest, ReadsPercentAndPlainFractions) {
  Fraction fraction;
  std::string error;
  ASSERT_TRUE(AbslParseFlag("5%", &fraction, &error)) << error;
  EXPECT_DOUBLE_EQ(fraction.value, 0.05);
  ASSERT_TRUE(AbslParseFlag("0.25", &fraction, &error)) << error;
  EXPECT_DOUBLE_EQ(fraction.value, 0.25);
  ASSERT_TRUE(AbslParseFlag("150%", &fraction, &error)) << error;
  EXPECT_DOUBLE_EQ(fraction.value, 1.5);
  EXPECT_FALSE(AbslParseFlag("-5%", &fraction, &error));
  EXPECT_FALSE(AbslParseFlag("five", &fraction, &error));
  EXPECT_FALSE(AbslParseFlag("%", &fraction, &error));
  Fraction again;
  ASSERT_TRUE(AbslParseFlag(AbslUnparseFlag(Fraction{0.05}), &again, &error));
  EXPECT_DOUBLE_EQ(again.value, 0.05);
}

TEST(WindowMeanTest, AveragesTheSamplesInsideOnly) {
  const std::vector<RssSample> samples = {{absl::Seconds(1), 100},
                                          {absl::Seconds(2), 200},
                                          {absl::Seconds(3), 600},
                                          {absl::Seconds(4), 1000}};
  EXPECT_EQ(WindowMean(samples, absl::Seconds(2), absl::Seconds(4)), 400.0);
  EXPECT_EQ(WindowMean(samples, absl::Seconds(0), absl::Seconds(10)), 475.0);
  EXPECT_FALSE(
      WindowMean(samples, absl::Seconds(5), absl::Seconds(9)).has_value());
}

TEST(SlopePerMinuteTest, FitsALine) {
  // 3 MB a minute plus noise that cancels out in pairs.
  std::vector<RssSample> samples;
  for (int s = 0; s < 600; s += 10) {
    const double noise = (s / 10) % 2 == 0 ? 0.5 * kMB : -0.5 * kMB;
    samples.push_back(
        {absl::Seconds(s),
         static_cast<int64_t>(200 * kMB + 3 * kMB * s / 60.0 + noise)});
  }
  ASSERT_TRUE(SlopePerMinute(samples).has_value());
  EXPECT_NEAR(*SlopePerMinute(samples), 3 * kMB, 0.01 * kMB);

  const std::vector<RssSample> flat = {{absl::Seconds(1), 5},
                                       {absl::Seconds(2), 5}};
  EXPECT_EQ(SlopePerMinute(flat), 0.0);
  EXPECT_FALSE(SlopePerMinute({{absl::Seconds(1), 5}}).has_value());
  // Two samples at one time say nothing about a rate.
  EXPECT_FALSE(SlopePerMinute({{absl::Seconds(1), 5}, {absl::Seconds(1), 9}})
                   .has_value());
}

TEST(GrowthWindowTest, AMinuteOrATenthOfWhatFollowsTheWarmUp) {
  const RssRules rules;  // warm-up 0.2, window at most a minute
  EXPECT_NEAR(absl::ToDoubleSeconds(GrowthWindow(rules, absl::Minutes(10))), 48,
              1e-6);
  EXPECT_NEAR(absl::ToDoubleSeconds(GrowthWindow(rules, absl::Hours(1))), 60,
              1e-6);
  EXPECT_NEAR(absl::ToDoubleSeconds(GrowthWindow(rules, absl::Seconds(45))),
              3.6, 1e-6);
}

TEST(JudgeRssTest, ALeakFailsTheGrowthRule) {
  // 100 MB + 1 MB a minute, a sample every 5 s for 10 minutes. Warm-up
  // 120 s, windows of 48 s: [120, 168) holds 120..165 s (mean at 142.5 s),
  // the last [552, 600] holds 555..600 s (mean at 577.5 s).
  const std::vector<RssSample> samples =
      Series(absl::Minutes(10), absl::Seconds(5),
             [](double minutes) { return 100 * kMB + kMB * minutes; });
  const RssFigures f =
      JudgeRss(RssRules{}, int64_t{90'000'000}, samples, absl::Minutes(10),
               int64_t{95'000'000}, absl::Minutes(1));
  EXPECT_EQ(f.samples, 120);
  EXPECT_EQ(f.post_warmup_samples, 97);  // 120 s .. 600 s
  EXPECT_EQ(f.first_window_samples, 10);
  EXPECT_EQ(f.last_window_samples, 10);
  ASSERT_TRUE(f.first_window_mean.has_value());
  ASSERT_TRUE(f.last_window_mean.has_value());
  EXPECT_NEAR(*f.first_window_mean, 100 * kMB + 2.375 * kMB, 1);
  EXPECT_NEAR(*f.last_window_mean, 100 * kMB + 9.625 * kMB, 1);
  ASSERT_TRUE(f.growth.has_value());
  EXPECT_NEAR(*f.growth, 7.25 / 102.375, 1e-6);
  ASSERT_TRUE(f.slope_bytes_per_minute.has_value());
  EXPECT_NEAR(*f.slope_bytes_per_minute, kMB, 100);
  EXPECT_EQ(f.peak, int64_t{110'000'000});
  ASSERT_EQ(f.failures.size(), 1u);
  EXPECT_NE(f.failures[0].find("RSS grew 7.1%"), std::string::npos)
      << f.failures[0];
  // 95 MB against 90 MB at the start: within 25%.
  ASSERT_TRUE(f.after_load_ratio.has_value());
  EXPECT_NEAR(*f.after_load_ratio, 95.0 / 90.0, 1e-9);

  // The same series passes a looser bound.
  RssRules loose;
  loose.max_growth = 0.08;
  EXPECT_TRUE(JudgeRss(loose, int64_t{90'000'000}, samples, absl::Minutes(10),
                       int64_t{95'000'000}, absl::Minutes(1))
                  .failures.empty());
}

TEST(JudgeRssTest, GrowthDuringTheWarmUpOnlyPasses) {
  // Doubles over the first 2 minutes, then flat with +-1 MB of noise.
  const std::vector<RssSample> samples =
      Series(absl::Minutes(10), absl::Seconds(5), [](double minutes) {
        // +1 MB and -1 MB by turns (samples every 5 s).
        const double noise = std::lround(minutes * 12) % 2 == 0 ? kMB : -kMB;
        return minutes < 2 ? 100 * kMB * (1 + minutes / 2) : 200 * kMB + noise;
      });
  const RssFigures f =
      JudgeRss(RssRules{}, int64_t{100'000'000}, samples, absl::Minutes(10),
               std::nullopt, absl::Minutes(1));
  ASSERT_TRUE(f.growth.has_value());
  EXPECT_LT(std::abs(*f.growth), 0.001);
  EXPECT_TRUE(f.failures.empty()) << f.failures[0];
  // No after-load sample: a note, not a failure.
  ASSERT_EQ(f.notes.size(), 1u);
  EXPECT_NE(f.notes[0].find("after-load"), std::string::npos);
}

TEST(JudgeRssTest, AfterLoadRatioAgainstTheStart) {
  const std::vector<RssSample> samples = Series(
      absl::Minutes(2), absl::Seconds(1), [](double) { return 300 * kMB; });
  RssRules rules;
  const RssFigures over =
      JudgeRss(rules, int64_t{200'000'000}, samples, absl::Minutes(2),
               int64_t{260'000'000}, absl::Seconds(60));
  ASSERT_TRUE(over.after_load_ratio.has_value());
  EXPECT_DOUBLE_EQ(*over.after_load_ratio, 1.3);
  ASSERT_EQ(over.failures.size(), 1u);
  EXPECT_NE(over.failures[0].find("30.0% above the start"), std::string::npos)
      << over.failures[0];
  EXPECT_EQ(over.peak, int64_t{300'000'000});

  rules.max_after_load = 0.5;
  EXPECT_TRUE(JudgeRss(rules, int64_t{200'000'000}, samples, absl::Minutes(2),
                       int64_t{260'000'000}, absl::Seconds(60))
                  .failures.empty());
  // Back under the start is fine whatever the bound.
  rules.max_after_load = 0;
  EXPECT_TRUE(JudgeRss(rules, int64_t{200'000'000}, samples, absl::Minutes(2),
                       int64_t{150'000'000}, absl::Seconds(60))
                  .failures.empty());
}

TEST(JudgeRssTest, ShortRunsUseTheNearestSampleAndFewSamplesAreNotJudged) {
  // 45 s, a sample every 8 s: warm-up 9 s, windows of 3.6 s ([9, 12.6)
  // and [41.4, 45]), which hold no sample; the nearest ones (16 s and
  // 40 s) stand in.
  const std::vector<RssSample> samples =
      Series(absl::Seconds(45), absl::Seconds(8),
             [](double minutes) { return 100 * kMB + 60 * kMB * minutes; });
  const RssFigures f =
      JudgeRss(RssRules{}, int64_t{100'000'000}, samples, absl::Seconds(45),
               int64_t{100'000'000}, absl::Seconds(20));
  EXPECT_EQ(f.first_window_samples, 1);
  EXPECT_EQ(f.last_window_samples, 1);
  EXPECT_NEAR(*f.first_window_mean, 116 * kMB, 1);
  EXPECT_NEAR(*f.last_window_mean, 140 * kMB, 1);
  ASSERT_EQ(f.failures.size(), 1u);  // grew 20.7%
  EXPECT_NE(f.failures[0].find("RSS grew 20.7%"), std::string::npos)
      << f.failures[0];

  const RssFigures few = JudgeRss(
      RssRules{}, int64_t{100'000'000}, {{absl::Seconds(30), 500'000'000}},
      absl::Seconds(45), int64_t{100'000'000}, absl::Seconds(20));
  EXPECT_FALSE(few.growth.has_value());
  EXPECT_TRUE(few.failures.empty());
  ASSERT_EQ(few.notes.size(), 1u);
  EXPECT_NE(few.notes[0].find("growth not judged"), std::string::npos);
  EXPECT_EQ(few.peak, int64_t{500'000'000});
}

}  // namespace
}  // namespace matmul::soak
