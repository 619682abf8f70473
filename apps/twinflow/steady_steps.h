// Which steps of a measured run are its steady state, for the medians that `run` prints and records and
// that `validate` compares (docs/ARCHITECTURE.md, "Carrying the optimizer tail into the next step").
#pragma once

#include <cstddef>
#include <vector>

namespace tf::app {

// Of a run's `n` steps (in order; the first is step 1 or the first after a resume): steady[i].
// - Step 1 pays for set-up (first touch, cuBLAS heuristics, NCCL) and, always speculating, for a
//   failed speculation's second pass: never steady (unless it is the only step).
// - A carried run (`carried`: core::carries) reports each step's period, which holds the previous
//   step's tail: its second step holds the first step's, so it is not steady either; and its last step
//   is drained (Engine::drain: its own tail timed alone, not a period), so it is left out too. Each of
//   these two is kept only where nothing else would remain.
inline std::vector<bool> steady_steps(size_t n, bool carried) {
  std::vector<bool> steady(n, true);
  if (n > 1) steady[0] = false;
  if (carried && n > 2) steady[n - 1] = false;  // the drained last step
  if (carried && n > 3) steady[1] = false;      // the period holding the first step's tail
  return steady;
}

}  // namespace tf::app
