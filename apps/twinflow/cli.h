// Small command-line helpers shared by the twinflow subcommands.
#pragma once

#include <string>
#include <vector>

namespace tf::app {

// "0,0.3,1" -> {0, 0.3, 1}; core::InputError naming `option` unless every item is a number in [0, 1].
std::vector<double> parse_ratio_list(const std::string& text, const std::string& option = "--ratios");

// This executable's path (/proc/self/exe), to run another twinflow subcommand; core::RuntimeFailure
// naming `who` when it cannot be read.
std::string self_executable(const std::string& who);

}  // namespace tf::app
