#include "common/adaptive_spin.h"

#include "gtest/gtest.h"

namespace matmul {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'000'000);

TEST(AdaptiveSpinTest, NoSpinBeforeArrivalsShowShortGaps) {
  AdaptiveSpin spin(absl::Milliseconds(1));
  EXPECT_EQ(spin.SpinUntil(kStart), kStart);
  spin.Arrived(kStart);
  EXPECT_EQ(spin.SpinUntil(kStart), kStart);  // one arrival shows no gap
}

TEST(AdaptiveSpinTest, SpinsAboutTwiceTheGapWhileRequestsKeepComing) {
  AdaptiveSpin spin(absl::Milliseconds(1));
  absl::Time t = kStart;
  for (int i = 0; i < 40; ++i) {
    spin.Arrived(t);
    t += absl::Microseconds(100);
  }
  const absl::Time last = t - absl::Microseconds(100);
  const absl::Duration window = spin.SpinUntil(last) - last;
  EXPECT_GT(window, absl::Microseconds(200));
  EXPECT_LT(window, absl::Microseconds(300));
}

TEST(AdaptiveSpinTest, NeverPastTheCapAfterTheLastArrival) {
  AdaptiveSpin spin(absl::Milliseconds(1));
  absl::Time t = kStart;
  for (int i = 0; i < 40; ++i) {
    spin.Arrived(t);
    t += absl::Microseconds(600);
  }
  const absl::Time last = t - absl::Microseconds(600);
  EXPECT_EQ(spin.SpinUntil(last) - last, absl::Milliseconds(1));
  // Out of work again later: only what is left of the cap.
  const absl::Time later = last + absl::Microseconds(800);
  EXPECT_EQ(spin.SpinUntil(later), last + absl::Milliseconds(1));
  // The load has stopped: sleep at once.
  const absl::Time idle = last + absl::Seconds(1);
  EXPECT_EQ(spin.SpinUntil(idle), idle);
}

TEST(AdaptiveSpinTest, GapsLongerThanTheCapStopTheSpin) {
  AdaptiveSpin spin(absl::Milliseconds(1));
  absl::Time t = kStart;
  for (int i = 0; i < 40; ++i) {
    spin.Arrived(t);
    t += absl::Microseconds(50);
  }
  for (int i = 0; i < 10; ++i) {
    spin.Arrived(t);
    t += absl::Milliseconds(5);  // now a request every 5 ms
  }
  const absl::Time last = t - absl::Milliseconds(5);
  EXPECT_EQ(spin.SpinUntil(last), last);
}

TEST(AdaptiveSpinTest, AZeroCapNeverSpins) {
  AdaptiveSpin spin(absl::ZeroDuration());
  absl::Time t = kStart;
  for (int i = 0; i < 10; ++i) {
    spin.Arrived(t);
    t += absl::Microseconds(1);
  }
  EXPECT_EQ(spin.SpinUntil(t), t);
}

}  // namespace
}  // namespace matmul
