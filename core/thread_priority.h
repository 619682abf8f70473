// The calling thread's scheduling priority (Linux: a nice value is per thread).
#pragma once

namespace tf::core {

// Raises the calling thread's nice value by `by` (to at most 19): a background checkpoint save yields
// the CPU to training, the CPU optimizer's workers yield it to the rank's issuing threads
// (backends/cpu/cpu_tuning.h, pool_nice). Threads it starts later inherit it. Needs no privilege; best
// effort: a failure changes nothing.
void lower_thread_priority(int by);

}  // namespace tf::core
