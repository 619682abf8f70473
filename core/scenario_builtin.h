// The shipped hardware profiles and default scenario, compiled in from scenarios/ (generated source).
#pragma once

#include <span>
#include <string_view>

namespace tf::core::builtin {

struct EmbeddedFile {
  std::string_view name;  // "dgx-h100-80gb" (the file name without .yaml)
  std::string_view text;
};

std::span<const EmbeddedFile> hardware_profiles();
std::string_view default_scenario_name();  // "opt-30b-dgx-h100.yaml"
std::string_view default_scenario();

}  // namespace tf::core::builtin
