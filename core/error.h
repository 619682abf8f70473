// Error type for every layer: what was wrong, where, and what to do.
#pragma once

#include <stdexcept>
#include <string>

namespace tf::core {

// Thrown for bad input (configuration, buffers, hyper-parameters). The message names the
// offending item and the accepted range. Programs map it to exit code 2 (usage/input error).
class InputError : public std::invalid_argument {
 public:
  explicit InputError(const std::string& what) : std::invalid_argument(what) {}
};

// Thrown when a backend or the machine fails (CUDA, allocation, I/O). Exit code 3.
class RuntimeFailure : public std::runtime_error {
 public:
  explicit RuntimeFailure(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace tf::core
