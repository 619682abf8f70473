// Configuration trees read from YAML or JSON with source positions, typed reads and key-path errors.
// Internal to the scenario and hardware parsers; callers use core/scenario.h and core/hardware.h.
#pragma once

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tf::core::config {

// One node of a parsed document. Maps keep document order; keys[i] names children[i].
struct Node {
  enum class Kind : uint8_t { kNull, kScalar, kMap, kSeq };
  Kind kind = Kind::kNull;
  std::string scalar;                       // kScalar: the text as written (JSON numbers and booleans too)
  bool quoted = false;                      // kScalar: a quoted YAML scalar or a JSON string
  std::vector<std::string> keys;            // kMap
  std::vector<Node> children;               // kMap (values) and kSeq (elements)
  std::string path;                         // key path from the root: "zero.offload_optimizer.ratio", "dims[2]"
  std::shared_ptr<const std::string> file;  // display name of the document
  int line = 0, col = 0;                    // 1-based position of the value (0: unknown)
  int key_line = 0, key_col = 0;            // 1-based position of the key naming this node in its map

  bool is_map() const { return kind == Kind::kMap; }
  bool is_seq() const { return kind == Kind::kSeq; }
  bool is_scalar() const { return kind == Kind::kScalar; }
  bool is_null() const { return kind == Kind::kNull; }
  // "FILE:LINE:COL" of the value (or of its key when the value has no position).
  std::string where() const;
  std::string key_where() const;
  // "a mapping", "a list", "null (empty value)", "string 'x'" or "'x'": for type errors.
  std::string describe() const;
};

// Parse a document. Syntax errors, documents over kMaxDocumentBytes, nesting deeper than
// kMaxDepth and more than kMaxNodes nodes (alias bombs) throw InputError("FILE:LINE:COL: ...").
// root_path prefixes every key path (e.g. "ds_config" for an embedded ds_config).
inline constexpr size_t kMaxDocumentBytes = size_t(1) << 20;
inline constexpr int kMaxDepth = 64;
inline constexpr size_t kMaxNodes = 100'000;
Node parse_yaml(std::string_view text, const std::string& file, const std::string& root_path = "");
Node parse_json(std::string_view text, const std::string& file, const std::string& root_path = "");

// Reads a regular file of at most kMaxDocumentBytes. Throws InputError naming `what` and the path.
std::string read_document(const std::filesystem::path& path, std::string_view what);

// Throws InputError("WHERE: PATH: WHAT").
[[noreturn]] void fail(const Node& n, const std::string& what);
// Text as it may appear in a message: at most max_bytes, control bytes escaped (\x00).
std::string excerpt(std::string_view s, size_t max_bytes = 60);
std::string format_number(double v);

// Typed reads; each throws InputError with the position, the key path, what was found, and the
// allowed range or values.
int64_t read_int(const Node& n, int64_t lo, int64_t hi);
// Finite numbers in [lo, hi], or (lo, hi] when lo_open.
double read_number(const Node& n, double lo, double hi, bool lo_open = false);
bool read_bool(const Node& n);
std::string read_string(const Node& n);  // a non-empty scalar
// One of `allowed`, compared case-insensitively; returns the allowed spelling.
std::string read_choice(const Node& n, std::initializer_list<std::string_view> allowed);

// Reads the keys of one map, then reports every key that was not read as a warning
// "WHERE: PATH: unknown key, ignored" (call warn_unknown once, when done).
class MapReader {
 public:
  // Throws unless n is a map. `what` says what the map should be, for that error.
  MapReader(const Node& n, std::vector<std::string>& warnings, std::string_view what);
  const Node* find(std::string_view key);
  // Missing: "WHERE(map): PATH.key: missing required key; expected HINT".
  const Node& require(std::string_view key, std::string_view hint);
  bool has(std::string_view key) const;
  void warn_unknown(std::string_view note = "unknown key, ignored");
  const Node& node() const { return n_; }

 private:
  const Node& n_;
  std::vector<std::string>& warnings_;
  std::vector<bool> used_;
};

}  // namespace tf::core::config
