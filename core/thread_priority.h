// The calling thread's scheduling priority (Linux: a nice value is per thread).
#pragma once

namespace tf::core {

// Raises the calling thread's nice value by `by` (to at most 19): a background checkpoint save yields
// the CPU to training, the CPU optimizer's workers yield it to the rank's issuing threads
// (backends/cpu/cpu_tuning.h, pool_nice). Threads it starts later inherit it. Needs no privilege; best
// effort: a failure changes nothing.
void lower_thread_priority(int by);

// Moves the calling thread to the idle scheduling class (Linux SCHED_IDLE): it runs only on cycles no
// thread of the normal class wants, and any such thread that wakes on its core takes the core at once,
// where a nice value only shortens the wait (docs/ARCHITECTURE.md, "The issuing threads before the
// workers"). Threads it starts later inherit it. Needs no privilege; best effort: false where the kernel
// refused (nothing changed).
bool run_thread_when_idle();

// Names the calling thread (Linux: at most 15 characters, the rest cut), so that `ps -L`, `top -H` and
// /proc/PID/task/*/comm tell the engine's threads apart: tf-<queue> for the issuers, tf-cpu<i> for the CPU
// optimizer's workers, tf-ckpt for a background save. Best effort.
void name_this_thread(const char* name);

}  // namespace tf::core
