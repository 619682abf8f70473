// SIGTERM/SIGINT handling of training commands: the first signal is recorded and the process goes on;
// a second one exits at once with 128 + the signal; the previous handlers come back afterwards.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>

#include "apps/twinflow/stop_signals.h"

namespace tf::app {
namespace {

volatile sig_atomic_t g_seen = 0;
extern "C" void remember(int sig) { g_seen = sig; }

TEST(StopSignals, FirstSignalIsRecordedAndTheProcessGoesOn) {
  StopSignals s;
  EXPECT_FALSE(s.requested());
  EXPECT_EQ(s.signal(), 0);
  ASSERT_EQ(::raise(SIGTERM), 0);
  EXPECT_TRUE(s.requested());
  EXPECT_EQ(s.signal(), SIGTERM);
}

TEST(StopSignals, SecondSignalExitsAtOnce) {
  EXPECT_EXIT(
      {
        StopSignals s;
        ::raise(SIGINT);
        if (!s.requested()) std::_Exit(3);
        ::raise(SIGTERM);
        std::_Exit(4);  // not reached
      },
      ::testing::ExitedWithCode(128 + SIGTERM), "second stop signal: exiting now");
}

TEST(StopSignals, PreviousHandlersComeBack) {
  struct sigaction mine = {}, old = {};
  mine.sa_handler = remember;
  sigemptyset(&mine.sa_mask);
  ASSERT_EQ(::sigaction(SIGINT, &mine, &old), 0);
  {
    StopSignals s;
    ::raise(SIGINT);
    EXPECT_EQ(g_seen, 0);  // ours handled it
    EXPECT_THROW(StopSignals second, std::logic_error);
  }
  ::raise(SIGINT);
  EXPECT_EQ(g_seen, SIGINT);
  ::sigaction(SIGINT, &old, nullptr);
  StopSignals again;  // a fresh instance starts with no request
  EXPECT_FALSE(again.requested());
}

}  // namespace
}  // namespace tf::app
