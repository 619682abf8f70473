// Small string helpers shared by the parsers.
#pragma once

#include <cctype>
#include <string>
#include <string_view>

namespace tf::core {

// ASCII lower case (names and keys are ASCII; locale plays no part).
inline std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace tf::core
