// Small command-line helpers shared by the twinflow subcommands (see cli.h).
#include "apps/twinflow/cli.h"

#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "core/error.h"

namespace tf::app {

std::vector<double> parse_ratio_list(const std::string& text, const std::string& option) {
  std::vector<double> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || end != item.c_str() + item.size() || !(v >= 0 && v <= 1))
      throw core::InputError(option + " '" + text + "': expected comma-separated ratios in [0, 1], e.g. 0,0.3,1");
    out.push_back(v);
  }
  if (out.empty()) throw core::InputError(option + ": no ratio given");
  return out;
}

std::string self_executable(const std::string& who) {
  char self[4096];
  const ssize_t len = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) throw core::RuntimeFailure(who + ": cannot find this executable (/proc/self/exe)");
  return std::string(self, size_t(len));
}

}  // namespace tf::app
