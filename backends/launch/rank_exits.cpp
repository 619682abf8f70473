// Which rank `twinflow launch` blames (see rank_exits.h).
#include "backends/launch/rank_exits.h"

#include <sys/wait.h>

#include <cstring>
#include <stdexcept>
#include <tuple>

namespace tf::backend::launch {

size_t first_failure(const std::vector<RankExit>& exits) {
  if (exits.empty()) throw std::invalid_argument("first_failure: no rank failed");
  const auto key = [](const RankExit& e) { return std::tuple(!WIFSIGNALED(e.status), e.poll, e.rank); };
  size_t best = 0;
  for (size_t i = 1; i < exits.size(); ++i)
    if (key(exits[i]) < key(exits[best])) best = i;
  return best;
}

bool failed_on_its_own(int status, int sent) {
  if (WIFSIGNALED(status)) return WTERMSIG(status) != sent;
  return sent == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = sigabbrev_np(sig);
    return "signal " + std::to_string(sig) + (name ? std::string(" (SIG") + name + ")" : std::string());
  }
  return "status " + std::to_string(status);
}

}  // namespace tf::backend::launch
