#include "core/thread_priority.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace tf::core {

void lower_thread_priority(int by) {
  if (by <= 0) return;
  const pid_t self = ::gettid();
  errno = 0;
  const int now = ::getpriority(PRIO_PROCESS, id_t(self));
  if (errno == 0) (void)::setpriority(PRIO_PROCESS, id_t(self), std::min(19, now + by));
}

}  // namespace tf::core
