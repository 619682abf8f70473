// Independent simulations several at once (see parallel.h).
#include "backends/sim/parallel.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>
#include <vector>

#include "core/settings.h"

namespace tf::backend::sim {

size_t simulation_threads(const core::Scenario& s, const SimOptions& opt, int requested) {
  if (requested > 0) return size_t(requested);
  const int world = core::resolve_settings(s, opt.overrides).world;
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  return size_t(std::min(world >= kSimulationWideWorld ? 2 : kSimulationMaxThreads, cores));
}

void for_each_index(size_t n, size_t threads, const std::function<void(size_t)>& fn) {
  std::vector<std::exception_ptr> errors(n);
  std::atomic<size_t> next{0};
  const auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      try {
        fn(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  {
    std::vector<std::jthread> helpers;
    for (size_t k = 1; k < std::min(threads, n); ++k) helpers.emplace_back(work);
    work();
  }  // joined
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace tf::backend::sim
