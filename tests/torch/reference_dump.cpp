// Writes one optimizer problem and the Eigen double reference's result as JSON, for the torch
// cross-check (tests/torch/test_reference_vs_torch.py). Usage: tf_reference_dump KIND SEED N STEPS
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/twinflow/optim_harness.h"
#include "backends/reference/reference_optim.h"
#include "core/error.h"

int main(int argc, char** argv) {
  using namespace tf;
  if (argc != 5) {
    std::cerr << "usage: tf_reference_dump adamw|adam|adagrad|lion SEED N STEPS\n";
    return 2;
  }
  try {
    const core::OptimizerKind k = core::parse_optimizer(argv[1]);
    harness::Problem p =
        harness::random_problem(std::strtoull(argv[2], nullptr, 10), k, core::DType::kF32, core::DType::kNone, 10);
    p.n = std::strtoull(argv[3], nullptr, 10);
    p.steps = std::atoi(argv[4]);
    p.chunks = 1;
    nlohmann::json j;
    j["optimizer"] = argv[1];
    j["hp"] = {{"lr", p.hp.lr},
               {"beta1", p.hp.beta1},
               {"beta2", p.hp.beta2},
               {"eps", p.hp.eps},
               {"weight_decay", p.hp.weight_decay},
               {"lr_decay", p.hp.lr_decay},
               {"initial_accumulator_value", p.hp.initial_accumulator_value}};
    j["param0"] = harness::initial_params(p);
    nlohmann::json grads = nlohmann::json::array();
    for (int s = 1; s <= p.steps; ++s) {
      const auto raw = harness::raw_grad(p, s);
      std::vector<double> g(p.n);
      for (size_t i = 0; i < p.n; ++i) {
        float f;
        std::memcpy(&f, raw.data() + 4 * i, 4);
        g[i] = double(f) / p.loss_scale;
      }
      grads.push_back(g);
    }
    j["grads"] = grads;
    const auto r = harness::run_reference(p);
    j["param"] = r.param_d;
    j["state1"] = r.state1_d;
    j["state2"] = r.state2_d;
    std::cout << j.dump() << "\n";
  } catch (const core::InputError& e) {
    std::cerr << "tf_reference_dump: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
