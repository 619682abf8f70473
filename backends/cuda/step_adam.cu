// The fused adam step kernels (every grad x copy dtype), in their own translation unit so that the
// optimizers compile in parallel.
#include "backends/cuda/step_launch.cuh"

namespace tf::backend::cuda {

void launch_step_adam(const StepLaunch& l, const StepVariant& v) { kern::launch_step_kind<OptimizerKind::kAdam>(l, v); }

}  // namespace tf::backend::cuda
