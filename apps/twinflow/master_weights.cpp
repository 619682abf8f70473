// `twinflow run --save-master` (see master_weights.h).
#include "apps/twinflow/master_weights.h"

#include <stdexcept>

#include "core/output_file.h"

namespace tf::app {

void write_master_weights(const std::string& path, int64_t total_params,
                          const std::vector<std::pair<int64_t, float>>& mine, int rank, int world,
                          const core::RankBarrier& barrier, const core::FaultHook& hook) {
  const auto write_mine = [&](core::OutputFile& f) {
    std::vector<float> run;  // (consecutive weights) fp32: one write per run of indices, not per weight
    int64_t first = 0;
    const auto flush = [&] {
      if (!run.empty()) f.write_at(run.data(), run.size() * sizeof(float), uint64_t(first) * sizeof(float));
      run.clear();
    };
    for (const auto& [idx, v] : mine) {
      if (idx < 0 || idx >= total_params)
        throw std::logic_error("write_master_weights: index " + std::to_string(idx) + " outside [0, " +
                               std::to_string(total_params) + ")");
      if (run.empty() || idx != first + int64_t(run.size()) || run.size() >= (size_t(1) << 22)) {
        flush();
        first = idx;
      }
      run.push_back(v);
    }
    flush();
  };
  core::write_shared_output_file(path, "--save-master", uint64_t(total_params) * sizeof(float), rank, world, barrier,
                                 write_mine, hook);
}

}  // namespace tf::app
