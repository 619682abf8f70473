// Which rank `twinflow launch` blames when ranks fail: the one that failed first, by what the launcher saw.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace tf::backend::launch {

// A rank that ended with a failure the launcher did not cause: an error exit before the launcher stopped anyone,
// or, at any time, a signal the launcher had not sent it (SIGKILL from someone else, a crash). Its waitpid status
// and the launcher's poll that reaped it (the launcher polls every few ms, so ranks that fail together may share
// one).
struct RankExit {
  int rank = 0;
  int status = 0;  // as waitpid returns it
  int poll = 0;
};

// Whether a rank's end is a failure of its own: a signal other than `sent` (the one the launcher sent it, 0 for
// none), or an error exit while the launcher had sent it nothing (after its SIGTERM, an error exit is the rank
// stopping as asked).
bool failed_on_its_own(int status, int sent);

// The index in `exits` (not empty) of the rank to blame: a rank ended by a signal (killed or crashed) before one
// that exited with an error code, whatever the polls, since a rank that loses its peer fails with an error of its
// own: the rendezvous watch sees a killed peer's socket close while the peer's process is still being torn down
// (a GPU context takes hundreds of ms), so the peer can be reaped after it (two H200s, 2026-11-29: launch blamed
// rank 0's "exit code 3" though rank 1 was kill -9'd first). Then the earliest poll, then the lowest rank.
size_t first_failure(const std::vector<RankExit>& exits);

// A waitpid status in words: "exit code 3", "signal 9 (SIGKILL)".
std::string describe_status(int status);

}  // namespace tf::backend::launch
