// Configuration trees: YAML (yaml-cpp) and JSON (nlohmann SAX) into one positioned tree; typed reads.
#include "core/config_node.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>

#include "core/error.h"

namespace tf::core::config {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string position(const std::shared_ptr<const std::string>& file, int line, int col) {
  std::string s = file ? *file : std::string("<input>");
  if (line > 0) s += ":" + std::to_string(line) + ":" + std::to_string(col);
  return s;
}

std::string child_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

void check_size(std::string_view text, const std::string& file) {
  if (text.size() > kMaxDocumentBytes)
    throw InputError(file + ": document is " + std::to_string(text.size()) + " bytes; allowed at most " +
                     std::to_string(kMaxDocumentBytes));
}

// ---- YAML ---------------------------------------------------------------------------------------

// Counts documents; remembers where the second starts.
struct DocumentCounter : YAML::EventHandler {
  int documents = 0;
  YAML::Mark second;
  void OnDocumentStart(const YAML::Mark& m) override {
    if (++documents == 2) second = m;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

struct YamlCtx {
  std::shared_ptr<const std::string> file;
  size_t nodes = 0;
};

void set_mark(Node& n, const YAML::Mark& m) {
  if (m.is_null() || m.line < 0) return;
  n.line = m.line + 1;
  n.col = m.column + 1;
}

void from_yaml(const YAML::Node& y, Node& out, YamlCtx& ctx, int depth) {
  out.file = ctx.file;
  set_mark(out, y.Mark());
  if (++ctx.nodes > kMaxNodes) fail(out, "document has more than " + std::to_string(kMaxNodes) + " nodes (aliases?)");
  if (depth > kMaxDepth) fail(out, "nesting deeper than " + std::to_string(kMaxDepth) + " levels");
  switch (y.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null: out.kind = Node::Kind::kNull; return;
    case YAML::NodeType::Scalar: {
      out.kind = Node::Kind::kScalar;
      out.scalar = y.Scalar();
      const std::string& tag = y.Tag();
      out.quoted = tag == "!" || tag == "tag:yaml.org,2002:str";
      return;
    }
    case YAML::NodeType::Sequence: {
      out.kind = Node::Kind::kSeq;
      size_t i = 0;
      for (const YAML::Node& e : y) {
        Node c;
        c.path = out.path + "[" + std::to_string(i++) + "]";
        from_yaml(e, c, ctx, depth + 1);
        if (c.line == 0) c.line = out.line, c.col = out.col;
        out.children.push_back(std::move(c));
      }
      return;
    }
    case YAML::NodeType::Map: {
      out.kind = Node::Kind::kMap;
      for (auto it = y.begin(); it != y.end(); ++it) {
        const YAML::Node k = it->first;  // handles (copies are cheap); it-> returns a temporary
        const YAML::Node v = it->second;
        Node key_node;
        key_node.file = ctx.file;
        key_node.path = out.path;
        set_mark(key_node, k.Mark());
        if (key_node.line == 0) key_node.line = out.line, key_node.col = out.col;
        if (!k.IsScalar()) fail(key_node, "keys must be plain strings; found a non-scalar key");
        const std::string key = k.Scalar();
        for (size_t j = 0; j < out.keys.size(); ++j)
          if (out.keys[j] == key) {
            key_node.path = child_path(out.path, key);
            fail(key_node, "duplicate key (first at " + out.children[j].key_where() + ")");
          }
        Node c;
        c.path = child_path(out.path, key);
        c.key_line = key_node.line;
        c.key_col = key_node.col;
        from_yaml(v, c, ctx, depth + 1);
        if (c.line == 0) c.line = c.key_line, c.col = c.key_col;
        out.keys.push_back(key);
        out.children.push_back(std::move(c));
      }
      return;
    }
  }
}

// ---- JSON ---------------------------------------------------------------------------------------

// An input iterator that records how far nlohmann's lexer has read, so the SAX callbacks below can
// place each value: the lexer reads a string or literal up to its last byte, and a number one byte
// past its end.
struct CountingIter {
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;
  const char* p = nullptr;
  const char** high = nullptr;
  reference operator*() const { return *p; }
  CountingIter& operator++() {
    ++p;
    if (high && p > *high) *high = p;
    return *this;
  }
  CountingIter operator++(int) {
    CountingIter t = *this;
    ++*this;
    return t;
  }
  bool operator==(const CountingIter& o) const { return p == o.p; }
  bool operator!=(const CountingIter& o) const { return p != o.p; }
};

class JsonBuilder {
 public:
  using json = nlohmann::json;
  JsonBuilder(std::string_view text, std::shared_ptr<const std::string> file, std::string root_path)
      : text_(text), file_(std::move(file)), root_path_(std::move(root_path)), high_(text.data()) {}

  Node take_root() { return std::move(root_); }
  const char** high() { return &high_; }
  const std::string& error() const { return error_; }

  bool null() { return value(Node::Kind::kNull, "", false, literal_start(4)); }
  bool boolean(bool v) { return value(Node::Kind::kScalar, v ? "true" : "false", false, literal_start(v ? 4 : 5)); }
  bool number_integer(json::number_integer_t v) {
    return value(Node::Kind::kScalar, std::to_string(v), false, number_start());
  }
  bool number_unsigned(json::number_unsigned_t v) {
    return value(Node::Kind::kScalar, std::to_string(v), false, number_start());
  }
  bool number_float(json::number_float_t, const json::string_t& s) {
    return value(Node::Kind::kScalar, s, false, number_start());
  }
  bool string(json::string_t& s) { return value(Node::Kind::kScalar, s, true, string_start()); }
  bool binary(json::binary_t&) { return fail_at(last(), "binary values are not supported"); }
  bool start_object(std::size_t) { return open(Node::Kind::kMap); }
  bool start_array(std::size_t) { return open(Node::Kind::kSeq); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(json::string_t& k) {
    Node* m = stack_.back();
    const size_t at = string_start();
    for (size_t j = 0; j < m->keys.size(); ++j)
      if (m->keys[j] == k) {
        auto [l, c] = line_col(at);
        error_ = position(file_, l, c) + ": " + child_path(m->path, k) + ": duplicate key (first at " +
                 m->children[j].key_where() + ")";
        return false;
      }
    pending_key_ = k;
    pending_key_at_ = at;
    return true;
  }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& ex) {
    // ex.what(): "[json.exception.parse_error.101] parse error at line L, column C: MESSAGE"
    std::string msg = ex.what();
    const size_t colp = msg.find("column ");
    const size_t sep = colp == std::string::npos ? std::string::npos : msg.find(": ", colp);
    if (sep != std::string::npos) msg = msg.substr(sep + 2);
    auto [l, c] = line_col(pos == 0 ? 0 : std::min(pos, text_.size()) - 1);
    error_ = position(file_, l, c) + ": JSON syntax error: " + msg;
    return false;
  }

 private:
  size_t last() const { return size_t(high_ - text_.data()) == 0 ? 0 : size_t(high_ - text_.data()) - 1; }
  size_t literal_start(size_t len) const { return last() + 1 >= len ? last() + 1 - len : 0; }
  size_t string_start() const {
    // last() is the closing quote; the opening quote is the nearest quote before it that is not
    // escaped (preceded by an even number of backslashes).
    size_t i = last();
    while (i > 0) {
      --i;
      if (text_[i] != '"') continue;
      size_t bs = 0;
      while (bs < i && text_[i - 1 - bs] == '\\') ++bs;
      if (bs % 2 == 0) return i;
    }
    return 0;
  }
  static bool number_char(char c) {
    return c != '\0' && (std::isdigit(static_cast<unsigned char>(c)) || std::strchr("+-.eE", c) != nullptr);
  }
  size_t number_start() const {
    size_t i = last();
    if (i < text_.size() && !number_char(text_[i]) && i > 0) --i;  // the byte read past the number
    while (i > 0 && number_char(text_[i - 1])) --i;
    return i;
  }
  std::pair<int, int> line_col(size_t off) const {
    int line = 1;
    size_t line_start = 0;
    for (size_t i = 0; i < off && i < text_.size(); ++i)
      if (text_[i] == '\n') ++line, line_start = i + 1;
    return {line, int(off - line_start) + 1};
  }
  bool fail_at(size_t off, const std::string& what) {
    auto [l, c] = line_col(off);
    error_ = position(file_, l, c) + ": " + what;
    return false;
  }
  // Places a new node: the root, the next element of a list, or the value of the pending key.
  Node* place(size_t at) {
    Node* n = nullptr;
    if (stack_.empty()) {
      if (have_root_) return nullptr;
      have_root_ = true;
      n = &root_;
      n->path = root_path_;
    } else {
      Node* parent = stack_.back();
      if (parent->is_map()) {
        parent->keys.push_back(pending_key_);
        parent->children.emplace_back();
        n = &parent->children.back();
        n->path = child_path(parent->path, pending_key_);
        auto [kl, kc] = line_col(pending_key_at_);
        n->key_line = kl;
        n->key_col = kc;
      } else {
        parent->children.emplace_back();
        n = &parent->children.back();
        n->path = parent->path + "[" + std::to_string(parent->children.size() - 1) + "]";
      }
    }
    n->file = file_;
    auto [l, c] = line_col(at);
    n->line = l;
    n->col = c;
    return n;
  }
  bool value(Node::Kind kind, std::string text, bool quoted, size_t at) {
    if (++nodes_ > kMaxNodes) return fail_at(at, "document has more than " + std::to_string(kMaxNodes) + " nodes");
    Node* n = place(at);
    if (!n) return fail_at(at, "more than one document");
    n->kind = kind;
    n->scalar = std::move(text);
    n->quoted = quoted;
    return true;
  }
  bool open(Node::Kind kind) {
    if (stack_.size() >= size_t(kMaxDepth))
      return fail_at(last(), "nesting deeper than " + std::to_string(kMaxDepth) + " levels");
    if (!value(kind, "", false, last())) return false;
    // the node just placed: the root, or the last child of the current top
    stack_.push_back(stack_.empty() ? &root_ : &stack_.back()->children.back());
    return true;
  }
  bool close() {
    if (!stack_.empty()) stack_.pop_back();
    return true;
  }

  std::string_view text_;
  std::shared_ptr<const std::string> file_;
  std::string root_path_;
  const char* high_;
  Node root_;
  bool have_root_ = false;
  std::vector<Node*> stack_;  // open maps/lists; a child is only appended to the top, so the
                              // pointers below it stay valid
  std::string pending_key_;
  size_t pending_key_at_ = 0;
  size_t nodes_ = 0;
  std::string error_;
};

// "[0, 1]", "(0, 1e+30]"
std::string range(double lo, double hi, bool lo_open) {
  return std::string(lo_open ? "(" : "[") + format_number(lo) + ", " + format_number(hi) + "]";
}

// Parses a finite number written as YAML/JSON would: optional sign, digits, '.', exponent.
bool parse_double(std::string_view s, double& out) {
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  if (s.empty() || !(std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '-' || s[0] == '.')) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size() && std::isfinite(out);
}

}  // namespace

// ---- Node ---------------------------------------------------------------------------------------

std::string Node::where() const { return line > 0 ? position(file, line, col) : position(file, key_line, key_col); }
std::string Node::key_where() const { return key_line > 0 ? position(file, key_line, key_col) : where(); }

std::string Node::describe() const {
  switch (kind) {
    case Kind::kNull: return "null (empty value)";
    case Kind::kMap: return "a mapping";
    case Kind::kSeq: return "a list";
    case Kind::kScalar: return quoted ? "string '" + excerpt(scalar) + "'" : "'" + excerpt(scalar) + "'";
  }
  return "?";
}

void fail(const Node& n, const std::string& what) {
  throw InputError(n.where() + ": " + (n.path.empty() ? std::string("(document)") : n.path) + ": " + what);
}

std::string excerpt(std::string_view s, size_t max_bytes) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max_bytes; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
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

std::string format_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

// ---- parsing ------------------------------------------------------------------------------------

Node parse_yaml(std::string_view text, const std::string& file, const std::string& root_path) {
  check_size(text, file);
  YamlCtx ctx{std::make_shared<const std::string>(file)};
  YAML::Node y;
  try {
    y = YAML::Load(std::string(text));
    // One document only. YAML::Load reads the first and ignores the rest, and yaml-cpp 0.7 answers
    // trailing text after a flow collection ("{}, x") with endless empty documents (YAML::LoadAll
    // then never returns; found by the fuzzer), so count at most two documents with a bare parser.
    std::istringstream in{std::string(text)};
    YAML::Parser parser(in);
    DocumentCounter counter;
    if (parser.HandleNextDocument(counter) && parser.HandleNextDocument(counter) && counter.documents >= 2)
      throw InputError(position(ctx.file, counter.second.line + 1, counter.second.column + 1) +
                       ": text after the first YAML document; allowed: one document");
  } catch (const YAML::DeepRecursion& e) {  // yaml-cpp's message for it is "bad file"
    const int line = e.mark.is_null() ? 0 : e.mark.line + 1, col = e.mark.is_null() ? 0 : e.mark.column + 1;
    throw InputError(position(ctx.file, line, col) + ": YAML error: nesting deeper than " + std::to_string(e.depth()) +
                     " levels; allowed at most " + std::to_string(kMaxDepth));
  } catch (const YAML::Exception& e) {
    const int line = e.mark.is_null() ? 0 : e.mark.line + 1, col = e.mark.is_null() ? 0 : e.mark.column + 1;
    throw InputError(position(ctx.file, line, col) + ": YAML syntax error: " + e.msg);
  }
  Node root;
  root.path = root_path;
  try {
    from_yaml(y, root, ctx, 0);
  } catch (const YAML::Exception& e) {  // conversion errors inside yaml-cpp; not expected
    throw InputError(position(ctx.file, 0, 0) + ": YAML error: " + e.msg);
  }
  if (root.line == 0) root.line = 1, root.col = 1;
  return root;
}

Node parse_json(std::string_view text, const std::string& file, const std::string& root_path) {
  check_size(text, file);
  JsonBuilder b(text, std::make_shared<const std::string>(file), root_path);
  CountingIter first{text.data(), b.high()}, end{text.data() + text.size(), nullptr};
  bool ok = false;
  try {
    ok = nlohmann::json::sax_parse(first, end, &b, nlohmann::json::input_format_t::json, true, false);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(file + ": JSON error: " + e.what());
  }
  if (!ok) throw InputError(b.error().empty() ? file + ": JSON syntax error" : b.error());
  Node root = b.take_root();
  if (root.line == 0) root.line = 1, root.col = 1;
  return root;
}

std::string read_document(const std::filesystem::path& path, std::string_view what) {
  const std::string w(what), name = "'" + path.string() + "'";
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) throw InputError(w + ": file " + name + " does not exist");
  if (!std::filesystem::is_regular_file(st)) throw InputError(w + ": " + name + " is not a regular file");
  // stdio, not iostreams: a failing read (EIO from /proc/self/mem, say) must become an InputError,
  // and files whose size is not known up front (/proc) are read only up to the limit.
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw InputError(w + ": cannot open " + name + ": " + std::strerror(errno));
  std::string s;
  char buf[65536];
  for (;;) {
    const size_t n = std::fread(buf, 1, sizeof buf, f.get());
    s.append(buf, n);
    if (s.size() > kMaxDocumentBytes)
      throw InputError(w + ": " + name + " is larger than " + std::to_string(kMaxDocumentBytes) +
                       " bytes; allowed at most " + std::to_string(kMaxDocumentBytes));
    if (n < sizeof buf) break;
  }
  if (std::ferror(f.get())) throw InputError(w + ": error reading " + name + ": " + std::strerror(errno));
  return s;
}

// ---- typed reads --------------------------------------------------------------------------------

int64_t read_int(const Node& n, int64_t lo, int64_t hi) {
  const std::string allowed = "allowed [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  if (!n.is_scalar() || n.quoted) fail(n, "expected an integer, got " + n.describe() + "; " + allowed);
  std::string_view s = n.scalar;
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  int64_t v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec == std::errc() && r.ptr == s.data() + s.size()) {
    // plain integer
  } else if (r.ec == std::errc::result_out_of_range) {
    fail(n, n.scalar + " is out of range; " + allowed);
  } else {
    double d = 0;  // 1e9, 2.0: integral values written as floats (common in ds_config files)
    if (!parse_double(n.scalar, d) || d != std::floor(d))
      fail(n, "expected an integer, got " + n.describe() + "; " + allowed);
    if (!(d >= -9.2e18 && d <= 9.2e18)) fail(n, n.scalar + " is out of range; " + allowed);
    if (d < double(lo) || d > double(hi)) fail(n, n.scalar + " is out of range; " + allowed);
    v = int64_t(d);
  }
  if (v < lo || v > hi) fail(n, n.scalar + " is out of range; " + allowed);
  return v;
}

double read_number(const Node& n, double lo, double hi, bool lo_open) {
  const std::string allowed = "allowed " + range(lo, hi, lo_open);
  double v = 0;
  if (!n.is_scalar() || n.quoted || !parse_double(n.scalar, v))
    fail(n, "expected a finite number, got " + n.describe() + "; " + allowed);
  if (v < lo || v > hi || (lo_open && v == lo)) fail(n, n.scalar + " is out of range; " + allowed);
  return v;
}

bool read_bool(const Node& n) {
  if (n.is_scalar() && !n.quoted) {
    const std::string l = lower(n.scalar);
    if (l == "true") return true;
    if (l == "false") return false;
  }
  fail(n, "expected true or false, got " + n.describe());
}

std::string read_string(const Node& n) {
  if (!n.is_scalar() || n.scalar.empty()) fail(n, "expected a non-empty string, got " + n.describe());
  return n.scalar;
}

std::string read_choice(const Node& n, std::initializer_list<std::string_view> allowed) {
  std::string list;
  for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
  if (n.is_scalar()) {
    const std::string l = lower(n.scalar);
    for (auto a : allowed)
      if (l == lower(a)) return std::string(a);
  }
  fail(n, "got " + n.describe() + "; allowed: " + list);
}

// ---- MapReader ----------------------------------------------------------------------------------

MapReader::MapReader(const Node& n, std::vector<std::string>& warnings, std::string_view what)
    : n_(n), warnings_(warnings) {
  if (!n.is_map()) fail(n, "expected " + std::string(what) + " (a mapping), got " + n.describe());
  used_.assign(n.keys.size(), false);
}

const Node* MapReader::find(std::string_view key) {
  for (size_t i = 0; i < n_.keys.size(); ++i)
    if (n_.keys[i] == key) {
      used_[i] = true;
      return &n_.children[i];
    }
  return nullptr;
}

bool MapReader::has(std::string_view key) const {
  return std::find(n_.keys.begin(), n_.keys.end(), key) != n_.keys.end();
}

const Node& MapReader::require(std::string_view key, std::string_view hint) {
  if (const Node* c = find(key)) return *c;
  throw InputError(n_.where() + ": " + child_path(n_.path, std::string(key)) + ": missing required key; expected " +
                   std::string(hint));
}

void MapReader::warn_unknown(std::string_view note) {
  for (size_t i = 0; i < n_.keys.size(); ++i)
    if (!used_[i]) {
      const Node& c = n_.children[i];
      warnings_.push_back(c.key_where() + ": " + c.path + ": " + std::string(note));
      used_[i] = true;  // warn once
    }
}

}  // namespace tf::core::config
