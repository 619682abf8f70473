// Small string helpers shared by the parsers: lower case, printable excerpts, nearest-key suggestions.
#pragma once

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace tf::core {

// ASCII lower case (names and keys are ASCII; locale plays no part).
inline std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The one escaping helper for text that reaches a terminal or a log from user input (file names, keys,
// values): at most max_bytes of s, control bytes (C0 and DEL) written as \xHH, "..." when cut. With
// keep_newlines, '\n' stays (a whole message printed as lines: apps/twinflow/cli.h, print_message).
// Escaping is idempotent: escaped text holds no control byte.
inline std::string printable(std::string_view s, size_t max_bytes = 4096, bool keep_newlines = false) {
  std::string out;
  out.reserve(std::min(s.size(), max_bytes) + 3);
  for (size_t i = 0; i < s.size() && i < max_bytes; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if ((c < 0x20 && !(keep_newlines && c == '\n')) || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  if (s.size() > max_bytes) out += "...";
  return out;
}

// True when s holds a control byte other than tab and newline (an ESC sequence, a NUL, ...).
inline bool has_control_bytes(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return (c < 0x20 && c != '\t' && c != '\n') || c == 0x7f;
  });
}

// Edit distance between a and b counting insertions, deletions, substitutions and swaps of two
// neighbours as one edit each (optimal string alignment: "raito" is 1 from "ratio"), or limit + 1 as
// soon as it must exceed limit (a row whose minimum passed it); O(|a| x |b|) at most.
inline size_t edit_distance(std::string_view a, std::string_view b, size_t limit) {
  const size_t n = a.size(), m = b.size();
  if ((n > m ? n - m : m - n) > limit) return limit + 1;
  std::vector<size_t> prev2(m + 1), prev(m + 1), cur(m + 1);
  for (size_t j = 0; j <= m; ++j) prev[j] = j;
  for (size_t i = 1; i <= n; ++i) {
    cur[0] = i;
    size_t row_min = cur[0];
    for (size_t j = 1; j <= m; ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) cur[j] = std::min(cur[j], prev2[j - 2] + 1);
      row_min = std::min(row_min, cur[j]);
    }
    if (row_min > limit) return limit + 1;
    std::swap(prev2, prev);
    std::swap(prev, cur);
  }
  return std::min(prev[m], limit + 1);
}

// The candidate closest to `key` when it is a plausible misspelling, compared case-insensitively:
// at most 1 edit for keys of up to 3 letters, else at most max(2, a third of the letters); "" when
// none is close.
inline std::string closest_match(std::string_view key, const std::vector<std::string_view>& candidates) {
  const std::string k = ascii_lower(key);
  const size_t limit = k.size() <= 3 ? 1 : std::max<size_t>(2, k.size() / 3);
  std::string best;
  size_t best_d = limit + 1;
  for (std::string_view c : candidates) {
    const size_t d = edit_distance(k, ascii_lower(c), limit);
    if (d < best_d) best_d = d, best = std::string(c);
  }
  return best;
}

inline std::string bool_text(bool b) { return b ? "true" : "false"; }

// The shortest text that reads back to the same double ("0.3", "1e-08"; std::to_chars' round trip).
inline std::string number_text(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

}  // namespace tf::core
