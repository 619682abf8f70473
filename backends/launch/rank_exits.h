// Which rank `twinflow launch` blames when ranks fail: the one that failed first, by what the launcher saw.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace tf::backend::launch {

// A rank that ended on its own with a failure (not stopped by the launcher): its waitpid status and the
// launcher's poll that reaped it (the launcher polls every few ms, so ranks that fail together share one).
struct RankExit {
  int rank = 0;
  int status = 0;  // as waitpid returns it
  int poll = 0;
};

// The index in `exits` (not empty) of the rank to blame: the earliest poll; within one poll a rank ended by a
// signal (killed or crashed) before one that exited with an error code, since a rank that loses its peer fails
// with an error of its own right after (the rendezvous watch, NCCL); then the lowest rank.
size_t first_failure(const std::vector<RankExit>& exits);

// A waitpid status in words: "exit code 3", "signal 9 (SIGKILL)".
std::string describe_status(int status);

}  // namespace tf::backend::launch
