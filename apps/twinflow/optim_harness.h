// Runs the same optimizer problem on any backend and on the Eigen reference, and compares the
// results elementwise. Shared by `twinflow verify` and the conformance tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/optim/lr_schedule.h"
#include "core/optim/optimizer.h"

namespace tf::harness {

using backend::GradStats;
using core::DType;
using core::OptimizerKind;

struct Problem {
  OptimizerKind kind = OptimizerKind::kAdamW;
  core::HyperParams hp;
  DType grad = DType::kBF16;
  DType copy = DType::kBF16;
  size_t n = 4096;
  int chunks = 1;  // the elements split into this many chunks (random sizes, seeded)
  int steps = 5;
  uint64_t seed = 1;
  double loss_scale = 1;      // grads are stored multiplied by this; grad_scale = 1/loss_scale
  int nonfinite_every = 0;    // > 0: every k-th element of step 2's gradient is NaN/+Inf/-Inf
  int special_every = 0;      // > 0: every k-th element's gradient is one of the values where IEEE division and
                              // square root leave their fast paths (special_grad in optim_harness.cpp)
  core::LrSchedule schedule;  // the lr of each step (core::lr_at; base_lr is hp.lr); constant: hp.lr
};

std::string describe(const Problem& p);

// A random problem (sizes with tails, hyper-parameters in range) from a seed.
Problem random_problem(uint64_t seed, OptimizerKind k, DType grad, DType copy, size_t max_n);

struct Result {
  std::vector<float> param, state1, state2;         // concatenated over chunks
  std::vector<uint16_t> copy;                       // empty when copy == none
  std::vector<GradStats> stats;                     // one per step
  std::vector<double> param_d, state1_d, state2_d;  // the reference's double values (reference only)
  // Lion only (reference only): 1 where sign(c) was decided within fp32 rounding of c = 0 at some
  // step. There the fp32 direction is not determined by the inputs, and the master weight may differ
  // by 2*lr; such elements are excluded from the param check and counted.
  std::vector<uint8_t> ambiguous;
};

// Initial master weights and the raw gradient of `step` (1-based) as the backend receives it.
std::vector<float> initial_params(const Problem& p);
std::vector<uint8_t> raw_grad(const Problem& p, int step);  // n * dtype_bytes(p.grad) bytes

// Runs p.steps fused steps on the backend. Output buffers are poisoned before the first step.
Result run_backend(backend::OptimizerBackend& be, const Problem& p);

// The Eigen double reference on the same inputs (gradients converted exactly, times 1/loss_scale).
// Elements whose gradient is non-finite at a step are left untouched, as the kernels do.
Result run_reference(const Problem& p);

struct BitReport {
  bool equal = true;
  size_t mismatches = 0;
  std::string first;  // "param[17]: 0x3f800000 vs 0x3f800001"
};
BitReport compare_bits(const Result& a, const Result& b);

struct TolReport {
  double max_abs = 0, max_rel = 0;  // rel = |a-r|/|r| over elements with |r| >= 1e-3 max|r|
  size_t worst_index = 0;
  std::string worst_array;
  bool within = true;
  size_t excluded = 0;  // Lion elements with an ambiguous sign decision (Result::ambiguous)
};
// The tolerance the contract states for fp32 paths after `steps` steps (docs/ARCHITECTURE.md,
// "Numerics"), elementwise for every element i of param and of each state array A:
//   |a_i - r_i| <= rtol * |r_i| + atol + scale * max_j |r_j|    (max over the array A)
// The scale term covers values that shrank through zero: their rounding errors were made while
// they were as large as the array's other values.
struct Tolerance {
  double rtol = 0, atol = 0, scale = 0;
};
Tolerance stated_tolerance(OptimizerKind k, const core::HyperParams& hp, int steps);

TolReport compare_tolerance(const Result& fp32, const Result& ref, const Tolerance& tol);

}  // namespace tf::harness
