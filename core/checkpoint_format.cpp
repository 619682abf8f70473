// The checkpoint's on-disk format: names, tensor table, index and manifest JSON, model description.
#include "core/checkpoint_format.h"

#include <cstdio>
#include <sstream>

#include "core/checksum.h"
#include "core/error.h"

namespace tf::core::ckpt {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Typed access to a JSON object's keys; every error names the file and the key path.
class Fields {
 public:
  Fields(const json& j, const fs::path& file, std::string prefix) : j_(j), file_(file), prefix_(std::move(prefix)) {
    if (!j_.is_object()) fail("", "expected an object");
  }
  const json& at(std::string_view key) const {
    const auto it = j_.find(key);
    if (it == j_.end()) fail(key, "missing");
    return *it;
  }
  Fields obj(std::string_view key) const { return Fields(at(key), file_, prefix_ + std::string(key) + "."); }
  const json& arr(std::string_view key) const {
    const json& v = at(key);
    if (!v.is_array()) fail(key, "expected an array");
    return v;
  }
  int64_t i64(std::string_view key) const {
    const json& v = at(key);
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)))
      fail(key, "expected an integer");
    return v.get<int64_t>();
  }
  int64_t nonneg(std::string_view key) const {
    const int64_t v = i64(key);
    if (v < 0) fail(key, "expected a value >= 0, got " + std::to_string(v));
    return v;
  }
  uint64_t u64(std::string_view key) const {
    const json& v = at(key);
    if (!v.is_number_unsigned()) fail(key, "expected an unsigned integer");
    return v.get<uint64_t>();
  }
  uint64_t hex(std::string_view key) const {
    const std::optional<uint64_t> v = parse_hex64(str(key));
    if (!v) fail(key, "expected 16 hex digits");
    return *v;
  }
  double dbl(std::string_view key) const {
    const json& v = at(key);
    if (!v.is_number()) fail(key, "expected a number");
    return v.get<double>();
  }
  bool boolean(std::string_view key) const {
    const json& v = at(key);
    if (!v.is_boolean()) fail(key, "expected true or false");
    return v.get<bool>();
  }
  std::string str(std::string_view key) const {
    const json& v = at(key);
    if (!v.is_string()) fail(key, "expected a string");
    return v.get<std::string>();
  }
  [[noreturn]] void fail(std::string_view key, const std::string& what) const {
    throw InputError(file_.string() + ": key " + prefix_ + std::string(key) + ": " + what +
                     "; the file is damaged or was not written by Twin-Flow: resume from another checkpoint");
  }

 private:
  const json& j_;
  const fs::path& file_;
  std::string prefix_;
};

json parse_json(std::string_view text, const fs::path& file) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    throw InputError(file.string() + ": not valid JSON (" + e.what() +
                     "); the file is damaged: resume from another checkpoint");
  }
}

const char* model_type_name(ModelType t) { return t == ModelType::kMlp ? "mlp" : "decoder"; }

json shape_json(const ModelSpec& s) {
  if (s.type == ModelType::kMlp) return {{"dims", s.mlp_dims}, {"bias", s.mlp_bias}};
  const DecoderShape& d = s.decoder;
  return {{"layers", d.layers},
          {"hidden", d.hidden},
          {"heads", d.heads},
          {"ffn", d.ffn},
          {"vocab", d.vocab},
          {"seq", d.seq},
          {"max_positions", d.max_positions},
          {"tied_embeddings", d.tied_embeddings},
          {"activation", std::string(activation_name(d.activation))},
          {"pre_ln", d.pre_ln},
          {"pos_offset", d.pos_offset},
          {"pad_token", d.pad_token},
          {"embed_dim", d.embed_dim},
          {"ln_eps", d.ln_eps},
          {"family", std::string(family_name(d.family))}};
}

// What the fingerprint covers: everything but the name.
json fingerprinted(const json& desc) {
  json f = desc;
  f.erase("name");
  f.erase("fingerprint");
  return f;
}

json meta_json(const CheckpointMeta& m) {
  const LossScaler& s = m.loss_scaler;
  return {{"step", m.step},
          {"optimizer_step", m.optimizer_step},
          {"loss_scaler", {{"scale", s.scale}, {"window", s.window}, {"min_scale", s.min_scale}, {"clean", s.clean}}},
          {"data", {{"seed", m.data.seed}, {"next_step", m.data.next_step}, {"micro_shards", m.data.micro_shards}}},
          {"seed", m.seed},
          {"written_with", {{"world", m.layout.world}, {"stage", m.layout.stage}, {"ratio", m.layout.ratio}}},
          {"scenario", m.scenario_text},
          {"ds_config", m.ds_config_text}};
}

CheckpointMeta meta_from(const Fields& f) {
  CheckpointMeta m;
  m.step = f.nonneg("step");
  m.optimizer_step = f.nonneg("optimizer_step");
  const Fields s = f.obj("loss_scaler");
  m.loss_scaler.scale = s.dbl("scale");
  m.loss_scaler.window = s.i64("window");
  m.loss_scaler.min_scale = s.dbl("min_scale");
  m.loss_scaler.clean = s.nonneg("clean");
  const Fields d = f.obj("data");
  m.data.seed = d.u64("seed");
  m.data.next_step = d.nonneg("next_step");
  m.data.micro_shards = d.nonneg("micro_shards");
  m.seed = f.u64("seed");
  const Fields w = f.obj("written_with");
  m.layout.world = int(w.nonneg("world"));
  m.layout.stage = int(w.nonneg("stage"));
  m.layout.ratio = w.dbl("ratio");
  m.scenario_text = f.str("scenario");
  m.ds_config_text = f.str("ds_config");
  return m;
}

// Index of `name` in `names`, else the field fails.
uint32_t find_name(const Fields& f, std::string_view key, std::span<const std::string> names) {
  const std::string v = f.str(key);
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == v) return uint32_t(i);
  f.fail(key, "'" + v + "' is not one of this checkpoint's");
}

IndexEntry entry_from(const Fields& f, const TensorTable& tensors, std::span<const std::string> arrays) {
  IndexEntry e;
  const std::string name = f.str("tensor");
  const std::optional<size_t> t = tensors.find(name);
  if (!t) f.fail("tensor", "'" + name + "' is not a tensor of the checkpoint's model");
  e.tensor = uint32_t(*t);
  e.array = find_name(f, "array", arrays);
  e.begin = f.nonneg("begin");
  e.count = f.nonneg("count");
  if (e.count < 1 || e.count > tensors.numel(*t) - e.begin)
    f.fail("count", "elements [" + std::to_string(e.begin) + ", " + std::to_string(e.begin + e.count) +
                        ") are outside " + name + " (" + std::to_string(tensors.numel(*t)) + " elements)");
  e.offset = f.u64("offset");
  e.bytes = f.u64("bytes");
  if (e.bytes != uint64_t(e.count) * 4) f.fail("bytes", "expected count x 4 = " + std::to_string(e.count * 4));
  e.xxh3 = f.hex("xxh3");
  return e;
}

}  // namespace

void check_layout(std::span<const ShardSpan> spans, int64_t elems, int64_t total) {
  if (elems < 0) throw InputError("checkpoint layout: elems = " + std::to_string(elems) + "; expected >= 0");
  for (size_t i = 0; i < spans.size(); ++i) {
    const ShardSpan& s = spans[i];
    if (s.count < 1 || s.model_begin < 0 || s.model_begin > total - s.count || s.offset < 0 ||
        s.offset > elems - s.count)
      throw InputError("checkpoint layout: span " + std::to_string(i) + " (model [" + std::to_string(s.model_begin) +
                       ", +" + std::to_string(s.count) + ") at offset " + std::to_string(s.offset) +
                       ") lies outside the model's " + std::to_string(total) + " elements or the arrays' " +
                       std::to_string(elems));
  }
  for (const bool by_model : {true, false}) {
    std::vector<ShardSpan> sorted(spans.begin(), spans.end());
    auto key = [&](const ShardSpan& s) { return by_model ? s.model_begin : s.offset; };
    std::sort(sorted.begin(), sorted.end(), [&](const ShardSpan& a, const ShardSpan& b) { return key(a) < key(b); });
    for (size_t i = 1; i < sorted.size(); ++i)
      if (key(sorted[i]) < key(sorted[i - 1]) + sorted[i - 1].count)
        throw InputError(std::string("checkpoint layout: two spans overlap in ") +
                         (by_model ? "the model" : "the arrays") + " at " + std::to_string(key(sorted[i])));
  }
}

std::string data_file_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank-%05d.data", rank);
  return buf;
}

std::string index_file_name(int rank) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "rank-%05d.index.json", rank);
  return buf;
}

std::string step_dir_name(int64_t step) { return "step-" + std::to_string(step); }

std::optional<int64_t> parse_step_dir_name(std::string_view name) {
  constexpr std::string_view kPrefix = "step-";
  if (!name.starts_with(kPrefix) || name.size() == kPrefix.size() || name.size() > kPrefix.size() + 18)
    return std::nullopt;
  int64_t v = 0;
  for (char c : name.substr(kPrefix.size())) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

TensorTable::TensorTable(const ModelDesc& model) : first_{0} {
  for (const TensorDesc& t : model.tensors) {
    by_name_.emplace(t.name, names_.size());
    names_.push_back(t.name);
    first_.push_back(first_.back() + t.numel);
  }
}

std::optional<size_t> TensorTable::find(std::string_view name) const {
  const auto it = by_name_.find(std::string(name));
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

std::string TensorTable::describe(size_t tensor, int64_t begin, int64_t count) const {
  return names_[tensor] + " [" + std::to_string(begin) + ", " + std::to_string(begin + count) + ")";
}

std::string index_to_text(const ShardIndex& index, const TensorTable& tensors, std::span<const std::string> arrays) {
  json entries = json::array();
  for (const IndexEntry& e : index.entries)
    entries.push_back({{"tensor", tensors.name(e.tensor)},
                       {"array", arrays[e.array]},
                       {"begin", e.begin},
                       {"count", e.count},
                       {"offset", e.offset},
                       {"bytes", e.bytes},
                       {"xxh3", hex64(e.xxh3)}});
  const json j = {{"format_version", kCheckpointFormatVersion},
                  {"rank", index.rank},
                  {"world", index.world},
                  {"step", index.step},
                  {"data_file", index.data_file},
                  {"data_bytes", index.data_bytes},
                  {"data_xxh3", hex64(index.data_xxh3)},
                  {"entries", std::move(entries)}};
  return j.dump(1) + "\n";
}

ShardIndex index_from_text(std::string_view text, const fs::path& file, const TensorTable& tensors,
                           std::span<const std::string> arrays) {
  const json j = parse_json(text, file);
  const Fields f(j, file, "");
  ShardIndex idx;
  idx.rank = int(f.nonneg("rank"));
  idx.world = int(f.nonneg("world"));
  idx.step = f.nonneg("step");
  idx.data_file = f.str("data_file");
  idx.data_bytes = f.u64("data_bytes");
  idx.data_xxh3 = f.hex("data_xxh3");
  const json& entries = f.arr("entries");
  idx.entries.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const Fields ef(entries[i], file, "entries[" + std::to_string(i) + "].");
    idx.entries.push_back(entry_from(ef, tensors, arrays));
    const IndexEntry& e = idx.entries.back();
    if (e.offset > idx.data_bytes || e.bytes > idx.data_bytes - e.offset)
      ef.fail("offset", "bytes [" + std::to_string(e.offset) + ", " + std::to_string(e.offset + e.bytes) +
                            ") lie past the data file's " + std::to_string(idx.data_bytes) + " bytes");
  }
  return idx;
}

std::string manifest_to_text(const Manifest& m) {
  json files = json::array();
  for (const FileRecord& r : m.files) files.push_back({{"name", r.name}, {"bytes", r.bytes}, {"xxh3", hex64(r.xxh3)}});
  json j = meta_json(m.meta);
  j["format"] = kFormatTag;
  j["format_version"] = m.format_version;
  j["optimizer"] = optimizer_name(m.optimizer);
  j["arrays"] = m.arrays;
  j["world"] = m.world;
  j["model"] = m.model;
  j["files"] = std::move(files);
  const std::string body = j.dump();
  j["checksum"] = hex64(xxh3_64(body.data(), body.size()));
  return j.dump(2) + "\n";
}

Manifest manifest_from_text(std::string_view text, const fs::path& file) {
  json j = parse_json(text, file);
  const Fields f(j, file, "");
  if (f.str("format") != kFormatTag) f.fail("format", "expected \"" + std::string(kFormatTag) + "\"");
  Manifest m;
  m.format_version = int(f.i64("format_version"));
  if (m.format_version > kCheckpointFormatVersion)
    throw InputError(file.string() + ": format version " + std::to_string(m.format_version) +
                     " was written by a newer Twin-Flow; this build reads versions up to " +
                     std::to_string(kCheckpointFormatVersion) + ": resume with a newer build");
  if (m.format_version < 1) f.fail("format_version", "expected >= 1");
  const uint64_t stored = f.hex("checksum");
  j.erase("checksum");
  const std::string body = j.dump();
  if (const uint64_t computed = xxh3_64(body.data(), body.size()); computed != stored)
    throw InputError(file.string() + ": checksum mismatch (stored " + hex64(stored) + ", computed " + hex64(computed) +
                     "): the manifest is damaged; resume from another checkpoint");
  m.meta = meta_from(f);
  try {
    m.optimizer = parse_optimizer(f.str("optimizer"));
  } catch (const InputError& e) {
    f.fail("optimizer", e.what());
  }
  for (const json& a : f.arr("arrays")) {
    if (!a.is_string()) f.fail("arrays", "expected names");
    m.arrays.push_back(a.get<std::string>());
  }
  if (m.arrays != checkpoint_arrays(m.optimizer)) f.fail("arrays", "do not match the optimizer's arrays");
  m.world = int(f.nonneg("world"));
  if (m.world < 1) f.fail("world", "expected >= 1");
  (void)f.obj("model");  // an object; model_spec_from_json reads its fields
  m.model = f.at("model");
  const json& files = f.arr("files");
  for (size_t i = 0; i < files.size(); ++i) {
    const Fields ff(files[i], file, "files[" + std::to_string(i) + "].");
    m.files.push_back({ff.str("name"), ff.u64("bytes"), ff.hex("xxh3")});
    if (m.files.back().name.find('/') != std::string::npos) ff.fail("name", "expected a file name without '/'");
  }
  return m;
}

json describe_model_json(const ModelDesc& model) {
  json tensors = json::array();
  for (const TensorDesc& t : model.tensors) tensors.push_back({{"name", t.name}, {"shape", t.shape}});
  json j = {{"name", model.spec.name},
            {"type", model_type_name(model.spec.type)},
            {model_type_name(model.spec.type), shape_json(model.spec)},
            {"tensors", std::move(tensors)}};
  const std::string body = fingerprinted(j).dump();
  j["fingerprint"] = hex64(xxh3_64(body.data(), body.size()));
  return j;
}

ModelSpec model_spec_from_json(const json& desc, const fs::path& file) {
  const Fields f(desc, file, "model.");
  ModelSpec s;
  s.name = f.str("name");
  const std::string type = f.str("type");
  if (type == "mlp") {
    s.type = ModelType::kMlp;
    const Fields m = f.obj("mlp");
    for (const json& d : m.arr("dims")) {
      if (!d.is_number_integer()) m.fail("dims", "expected integers");
      s.mlp_dims.push_back(d.get<int64_t>());
    }
    s.mlp_bias = m.boolean("bias");
  } else if (type == "decoder") {
    s.type = ModelType::kDecoder;
    const Fields d = f.obj("decoder");
    DecoderShape& o = s.decoder;
    o.layers = d.i64("layers"), o.hidden = d.i64("hidden"), o.heads = d.i64("heads"), o.ffn = d.i64("ffn");
    o.vocab = d.i64("vocab"), o.seq = d.i64("seq"), o.max_positions = d.i64("max_positions");
    o.tied_embeddings = d.boolean("tied_embeddings"), o.pre_ln = d.boolean("pre_ln");
    o.pos_offset = d.i64("pos_offset"), o.embed_dim = d.i64("embed_dim"), o.ln_eps = d.dbl("ln_eps");
    o.pad_token = d.i64("pad_token");
    const std::string act = d.str("activation"), fam = d.str("family");
    if (act == activation_name(Activation::kGeluTanh)) o.activation = Activation::kGeluTanh;
    else if (act == activation_name(Activation::kRelu)) o.activation = Activation::kRelu;
    else d.fail("activation", "unknown activation \"" + act + "\"");
    if (fam == family_name(ModelFamily::kGpt2)) o.family = ModelFamily::kGpt2;
    else if (fam == family_name(ModelFamily::kOpt)) o.family = ModelFamily::kOpt;
    else d.fail("family", "unknown model family \"" + fam + "\"");
  } else {
    f.fail("type", "expected \"mlp\" or \"decoder\"");
  }
  if (const std::optional<ModelIssue> issue = check_model(s)) f.fail(issue->field, issue->what);
  return s;
}

std::string model_difference(const json& stored, const json& run) {
  auto diff = [](const std::string& key, const json& a, const json& b) {
    return key + ": " + a.dump() + " in the checkpoint, " + b.dump() + " in this run";
  };
  if (stored.value("type", json()) != run.value("type", json()))
    return diff("type", stored.value("type", json()), run.value("type", json()));
  const std::string type = run.value("type", std::string());
  const json a = stored.value(type, json::object()), b = run.value(type, json::object());
  for (auto it = b.begin(); it != b.end(); ++it)
    if (a.value(it.key(), json()) != it.value())
      return diff(type + "." + it.key(), a.value(it.key(), json()), it.value());
  const json ta = stored.value("tensors", json::array()), tb = run.value("tensors", json::array());
  for (size_t i = 0; i < std::min(ta.size(), tb.size()); ++i)
    if (ta[i] != tb[i]) return diff("tensors[" + std::to_string(i) + "]", ta[i], tb[i]);
  if (ta.size() != tb.size()) return diff("tensor count", ta.size(), tb.size());
  return "";
}

}  // namespace tf::core::ckpt
