// libFuzzer target: any bytes as a scenario, a hardware profile and a JSON document give a result or an InputError.
//
// Build and run (clang):
//   CC=clang CXX=clang++ cmake -B build-fuzz -G Ninja -DTWINFLOW_FUZZ=ON -DTWINFLOW_CUDA=OFF \
//       -DTWINFLOW_BUILD_TESTS=OFF -DTWINFLOW_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
//   ninja -C build-fuzz tf_fuzz_scenario
//   mkdir -p build-fuzz/corpus && cp scenarios/*.yaml scenarios/hardware/*.yaml scenarios/ds_config/*.json \
//       tests/fuzz/seeds/* build-fuzz/corpus/
//   build-fuzz/tests/fuzz/tf_fuzz_scenario -dict=tests/fuzz/scenario.dict -max_len=4096 -max_total_time=180 \
//       build-fuzz/corpus
// Relative paths in the input resolve against scenarios/, so ds_config and profile files are reached too.
// Every crash becomes a case in tests/unit/test_scenario.cpp.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/config_node.h"
#include "core/error.h"
#include "core/hardware.h"
#include "core/scenario.h"

namespace {
void check(bool ok) {
  if (!ok) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tf::core;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const Scenario s = parse_scenario(text, TWINFLOW_SOURCE_DIR "/scenarios", "fuzz.yaml");
    // what a parsed scenario promises
    check(s.cluster.world_size() >= 1);
    check(s.cpu_ratio() >= 0 && s.cpu_ratio() <= 1);
    check(s.zero.stage >= 1 && s.zero.stage <= 3);
    check(s.training.micro_batch >= 1 && s.training.grad_accum >= 1);
    check(!check_model(s.model).has_value());
    validate(s.optimizer.kind, s.optimizer.hp);
  } catch (const InputError&) {
  }
  try {
    parse_hardware_profile(text, "fuzz-profile.yaml");
  } catch (const InputError&) {
  }
  try {
    config::parse_json(text, "fuzz.json");
  } catch (const InputError&) {
  }
  return 0;
}
