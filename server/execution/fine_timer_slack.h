// Linux lets a sleeping thread wake up to its "timer slack" (50 us by
// default) after the time it asked for, so that wake-ups can be merged. A
// worker that sleeps until a batch's queue delay runs out then holds the
// batch that much longer: on the H200 host a lone request under
// --max_queue_delay_us=300 waited 370 us (p50). Threads that wait for
// deadlines measured in microseconds ask for a slack of one.
#ifndef MATMUL_SERVER_EXECUTION_FINE_TIMER_SLACK_H_
#define MATMUL_SERVER_EXECUTION_FINE_TIMER_SLACK_H_

#include <sys/prctl.h>

namespace matmul {

// Linux only. Applies to the calling thread; a failing prctl keeps the
// default slack.
inline void UseFineTimerSlack() {
  prctl(PR_SET_TIMERSLACK, 1000UL /* ns */, 0UL, 0UL, 0UL);
}

}  // namespace matmul

#endif  // MATMUL_SERVER_EXECUTION_FINE_TIMER_SLACK_H_
