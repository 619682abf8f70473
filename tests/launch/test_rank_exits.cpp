// `twinflow launch` blames the rank that failed first: by the poll that saw it, then a signal over an exit code.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdexcept>
#include <vector>

#include "backends/launch/rank_exits.h"

namespace {

using tf::backend::launch::describe_status;
using tf::backend::launch::first_failure;
using tf::backend::launch::RankExit;

// A real waitpid status: a child that exits with `code`, or (code < 0) is killed by signal -code.
int status_of(int code) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (code < 0) ::raise(-code);
    ::_exit(code < 0 ? 0 : code);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

TEST(RankExits, ASignalThenTheFirstPollThenTheLowestRank) {
  const int exit3 = status_of(3), killed = status_of(-SIGKILL), exit2 = status_of(2);
  // A rank kill -9'd and its peer failing on the lost connection, reaped by one poll: the killed rank, though
  // rank 0 comes first (two H200s, issue 21: launch blamed rank 0 with "exit code 3")
  EXPECT_EQ(first_failure({{0, exit3, 4}, {1, killed, 4}}), 1u);
  // ... and reaped a poll later, its GPU context still being torn down when its peer had already exited (two
  // H200s, 2026-11-29): still the killed rank
  EXPECT_EQ(first_failure({{0, exit3, 3}, {1, killed, 4}}), 1u);
  // two signals: the earlier poll
  EXPECT_EQ(first_failure({{0, status_of(-SIGUSR1), 5}, {1, killed, 4}}), 1u);
  // the same poll and no signal: the lowest rank
  EXPECT_EQ(first_failure({{3, exit2, 7}, {1, exit3, 7}}), 1u);
  EXPECT_EQ(first_failure({{2, killed, 1}}), 0u);
  EXPECT_THROW((void)first_failure({}), std::invalid_argument);
}

TEST(RankExits, WhatTheLauncherCausedIsNoFailureOfTheRank) {
  using tf::backend::launch::failed_on_its_own;
  EXPECT_TRUE(failed_on_its_own(status_of(3), 0));          // an error before anyone was stopped
  EXPECT_FALSE(failed_on_its_own(status_of(0), 0));         // success
  EXPECT_FALSE(failed_on_its_own(status_of(3), SIGTERM));   // stopping as asked, with an error code
  EXPECT_FALSE(failed_on_its_own(status_of(-SIGTERM), SIGTERM));
  EXPECT_TRUE(failed_on_its_own(status_of(-SIGKILL), SIGTERM));  // killed by someone else while being stopped
  EXPECT_FALSE(failed_on_its_own(status_of(-SIGKILL), SIGKILL));
  EXPECT_TRUE(failed_on_its_own(status_of(-SIGKILL), 0));
}

TEST(RankExits, StatusInWords) {
  EXPECT_EQ(describe_status(status_of(3)), "exit code 3");
  EXPECT_EQ(describe_status(status_of(-SIGKILL)), "signal 9 (SIGKILL)");
  EXPECT_EQ(describe_status(status_of(-SIGTERM)), "signal 15 (SIGTERM)");  // not SIGSEGV: ASan handles that one
}

}  // namespace
