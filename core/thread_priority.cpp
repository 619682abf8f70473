#include "core/thread_priority.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>

namespace tf::core {

void lower_thread_priority(int by) {
  if (by <= 0) return;
  const pid_t self = ::gettid();
  errno = 0;
  const int now = ::getpriority(PRIO_PROCESS, id_t(self));
  if (errno == 0) (void)::setpriority(PRIO_PROCESS, id_t(self), std::min(19, now + by));
}

bool run_thread_when_idle() {
  sched_param p{};
  p.sched_priority = 0;
  return ::sched_setscheduler(0, SCHED_IDLE, &p) == 0;  // pid 0: the calling thread
}

void name_this_thread(const char* name) {
  const std::string cut = std::string(name).substr(0, 15);  // the kernel's limit, 16 bytes with the NUL
  (void)::pthread_setname_np(::pthread_self(), cut.c_str());
}

}  // namespace tf::core
