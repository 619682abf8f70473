// Hugging Face names of GPT-2 and OPT, and loading/exporting models as safetensors (see hf_names.h).
#include "core/hf_names.h"

#include <cstring>
#include <map>

#include "core/error.h"
#include "core/safetensors.h"

namespace tf::core {

namespace {

constexpr std::string_view kGpt2Prefix = "transformer.";
constexpr std::string_view kOptPrefix = "model.decoder.";
constexpr std::string_view kLmHead = "lm_head.weight";

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Collects the map: our tensor `ours` <- HF tensor `hf` (whole, transposed or a row block).
class MapBuilder {
 public:
  explicit MapBuilder(const ModelDesc& m) : m_(m) {}
  void whole(const std::string& ours, std::string hf) {
    const size_t t = index(ours);
    out_.push_back({std::move(hf), m_.tensors[t].shape, t, 0, false});
  }
  void transposed(const std::string& ours, std::string hf) {
    const size_t t = index(ours);
    const std::vector<int64_t>& s = m_.tensors[t].shape;  // (out, in)
    out_.push_back({std::move(hf), {s[1], s[0]}, t, 0, true});
  }
  void rows(const std::string& ours, std::string hf, int64_t first_row, int64_t count) {
    const size_t t = index(ours);
    std::vector<int64_t> s = m_.tensors[t].shape;
    s[0] = count;
    out_.push_back({std::move(hf), std::move(s), t, first_row, false});
  }
  std::vector<HfTensor> take() { return std::move(out_); }

 private:
  size_t index(const std::string& ours) const {
    const TensorDesc* t = m_.find_tensor(ours);
    if (t == nullptr) throw InputError("hf names: model '" + m_.spec.name + "' has no tensor '" + ours + "'");
    return size_t(t - m_.tensors.data());
  }
  const ModelDesc& m_;
  std::vector<HfTensor> out_;
};

void gpt2_names(MapBuilder& b, const DecoderShape& d) {
  const std::string p(kGpt2Prefix);
  b.whole("embed.tokens.weight", p + "wte.weight");
  b.whole("embed.positions.weight", p + "wpe.weight");
  for (int64_t i = 0; i < d.layers; ++i) {
    const std::string o = "layers." + std::to_string(i) + ".", h = p + "h." + std::to_string(i) + ".";
    for (const char* wb : {"weight", "bias"}) {
      b.whole(o + "ln1." + wb, h + "ln_1." + wb);
      b.whole(o + "ln2." + wb, h + "ln_2." + wb);
    }
    b.transposed(o + "attn.qkv.weight", h + "attn.c_attn.weight");
    b.whole(o + "attn.qkv.bias", h + "attn.c_attn.bias");
    b.transposed(o + "attn.out.weight", h + "attn.c_proj.weight");
    b.whole(o + "attn.out.bias", h + "attn.c_proj.bias");
    b.transposed(o + "mlp.fc1.weight", h + "mlp.c_fc.weight");
    b.whole(o + "mlp.fc1.bias", h + "mlp.c_fc.bias");
    b.transposed(o + "mlp.fc2.weight", h + "mlp.c_proj.weight");
    b.whole(o + "mlp.fc2.bias", h + "mlp.c_proj.bias");
  }
  if (d.pre_ln) {
    b.whole("final_ln.weight", p + "ln_f.weight");
    b.whole("final_ln.bias", p + "ln_f.bias");
  }
}

void opt_names(MapBuilder& b, const DecoderShape& d) {
  const std::string p(kOptPrefix);
  b.whole("embed.tokens.weight", p + "embed_tokens.weight");
  b.whole("embed.positions.weight", p + "embed_positions.weight");
  if (has_embed_projection(d)) b.whole("embed.project_in.weight", p + "project_in.weight");
  for (int64_t i = 0; i < d.layers; ++i) {
    const std::string o = "layers." + std::to_string(i) + ".", h = p + "layers." + std::to_string(i) + ".";
    for (const char* wb : {"weight", "bias"}) {
      const std::string w = wb;
      b.whole(o + "ln1." + w, h + "self_attn_layer_norm." + w);
      const char* qkv[] = {"q_proj.", "k_proj.", "v_proj."};
      for (int64_t j = 0; j < 3; ++j)
        b.rows(o + "attn.qkv." + w, h + "self_attn." + qkv[j] + w, j * d.hidden, d.hidden);
      b.whole(o + "attn.out." + w, h + "self_attn.out_proj." + w);
      b.whole(o + "ln2." + w, h + "final_layer_norm." + w);
      b.whole(o + "mlp.fc1." + w, h + "fc1." + w);
      b.whole(o + "mlp.fc2." + w, h + "fc2." + w);
    }
  }
  if (d.pre_ln) {
    b.whole("final_ln.weight", p + "final_layer_norm.weight");
    b.whole("final_ln.bias", p + "final_layer_norm.bias");
  }
  if (has_embed_projection(d)) b.whole("head.project_out.weight", p + "project_out.weight");
}

// GPT-2's causal-mask buffers: "transformer.h.{i}.attn.bias" and ".attn.masked_bias".
bool is_gpt2_buffer(std::string_view canonical) {
  if (!canonical.starts_with("transformer.h.")) return false;
  const size_t dot = canonical.find('.', 14);
  if (dot == std::string_view::npos || dot == 14) return false;
  for (size_t i = 14; i < dot; ++i)
    if (canonical[i] < '0' || canonical[i] > '9') return false;
  const std::string_view rest = canonical.substr(dot);
  return rest == ".attn.bias" || rest == ".attn.masked_bias";
}

// Element (r, c) of our tensor (rows x cols) <-> HF element: transposed, HF (c, r); a row block,
// HF (r - first_row, c); else the same.
void copy_piece(const HfTensor& p, const TensorDesc& t, std::span<const float> from, std::span<float> to,
                bool hf_to_ours) {
  const int64_t cols = t.shape.size() == 2 ? t.shape[1] : 1, rows = t.numel / cols;
  const int64_t piece_rows = p.transposed ? rows : p.hf_shape[0];
  for (int64_t r = 0; r < piece_rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t ours = t.offset + (p.first_row + r) * cols + c;
      const int64_t hf = p.transposed ? c * rows + r : r * cols + c;
      if (hf_to_ours)
        to[size_t(ours)] = from[size_t(hf)];
      else
        to[size_t(hf)] = from[size_t(ours)];
    }
}

// The file's tensors by canonical name; two names for one tensor are refused.
std::map<std::string, const SafetensorsTensor*> index_file(const SafetensorsFile& f, ModelFamily family) {
  std::map<std::string, const SafetensorsTensor*> out;
  for (const SafetensorsTensor& t : f.tensors()) {
    const std::string c = canonical_hf_name(family, t.name);
    if (auto [it, fresh] = out.emplace(c, &t); !fresh)
      throw InputError("init.from: '" + f.path() + "': tensors '" + it->second->name + "' and '" + t.name +
                       "' are the same Hugging Face tensor '" + c + "'; keep one");
  }
  return out;
}

// A tied model may find lm_head.weight in the file: it must be the token embedding.
void check_tied_head(const ModelDesc& model, const SafetensorsFile& f, const SafetensorsTensor& head,
                     std::span<const float> flat) {
  const TensorDesc& e = model.tensors[0];  // embed.tokens.weight
  const std::string at = "init.from: '" + f.path() + "': tensor '" + head.name + "'";
  if (head.shape != e.shape)
    throw InputError(at + " has shape " + shape_text(head.shape) + ", the token embedding " + shape_text(e.shape));
  const std::vector<float> v = f.read(head);
  if (std::memcmp(v.data(), flat.data() + e.offset, v.size() * sizeof(float)) != 0)
    throw InputError(at +
                     " differs from the token embedding, but the model ties them; set tied_embeddings: false "
                     "to load an untied head");
}

}  // namespace

std::vector<HfTensor> hf_tensors(const ModelDesc& model) {
  if (model.spec.type != ModelType::kDecoder)
    throw InputError("hf names: model '" + model.spec.name + "' is not a decoder");
  const DecoderShape& d = model.spec.decoder;
  MapBuilder b(model);
  if (d.family == ModelFamily::kGpt2) {
    if (has_embed_projection(d))
      throw InputError("hf names: Hugging Face GPT-2 has no project_in/project_out (model '" + model.spec.name +
                       "' has embed_dim " + std::to_string(embed_width(d)) + " != hidden " + std::to_string(d.hidden) +
                       "); use family opt");
    gpt2_names(b, d);
  } else {
    opt_names(b, d);
  }
  if (!d.tied_embeddings) b.whole("lm_head.weight", std::string(kLmHead));
  return b.take();
}

std::string canonical_hf_name(ModelFamily family, std::string_view name) {
  if (name == kLmHead) return std::string(name);
  if (family == ModelFamily::kGpt2)
    return name.starts_with(kGpt2Prefix) ? std::string(name) : std::string(kGpt2Prefix) + std::string(name);
  if (name.starts_with(kOptPrefix)) return std::string(name);
  if (name.starts_with("decoder.")) return "model." + std::string(name);
  return std::string(name);
}

std::vector<float> load_hf_weights(const ModelDesc& model, const std::filesystem::path& path) {
  const std::vector<HfTensor> map = hf_tensors(model);
  const SafetensorsFile f(path, "init.from");
  const std::string where = "init.from: '" + f.path() + "'";
  std::map<std::string, const SafetensorsTensor*> found = index_file(f, model.spec.decoder.family);
  std::vector<float> flat(static_cast<size_t>(model.total_params));  // (total_params) fp32, model order
  std::vector<float> buf;                                            // one HF tensor's values
  for (const HfTensor& p : map) {
    const TensorDesc& ours = model.tensors[p.tensor];
    auto it = found.find(p.hf_name);
    if (it == found.end())
      throw InputError(where + ": missing tensor '" + p.hf_name + "' (" + ours.name + " " + shape_text(ours.shape) +
                       "); the file is not a checkpoint of this model");
    const SafetensorsTensor& t = *it->second;
    if (t.shape != p.hf_shape)
      throw InputError(where + ": tensor '" + t.name + "' has shape " + shape_text(t.shape) + ", model '" +
                       model.spec.name + "' needs " + shape_text(p.hf_shape) + " (" + ours.name + "); the preset " +
                       "does not match the checkpoint");
    buf = f.read(t);
    copy_piece(p, ours, buf, flat, true);
    found.erase(it);
  }
  for (const auto& [name, t] : found) {
    if (name == kLmHead && model.spec.decoder.tied_embeddings) {
      check_tied_head(model, f, *t, flat);
      continue;
    }
    if (model.spec.decoder.family == ModelFamily::kGpt2 && is_gpt2_buffer(name)) continue;
    throw InputError(where + ": tensor '" + t->name + "' is not a parameter of model '" + model.spec.name +
                     "' (family " + std::string(family_name(model.spec.decoder.family)) +
                     "); the preset does not match the checkpoint");
  }
  return flat;
}

void export_hf_weights(const ModelDesc& model, std::span<const float> flat, const std::filesystem::path& path,
                       DType dtype) {
  if (int64_t(flat.size()) != model.total_params)
    throw InputError("export: " + std::to_string(flat.size()) + " weights, model '" + model.spec.name + "' has " +
                     std::to_string(model.total_params));
  export_hf_weights(
      model,
      [&](size_t t) {
        const TensorDesc& d = model.tensors[t];
        return std::vector<float>(flat.begin() + d.offset, flat.begin() + d.offset + d.numel);
      },
      path, dtype);
}

void export_hf_weights(const ModelDesc& model, const TensorValues& tensor_values, const std::filesystem::path& path,
                       DType dtype) {
  const std::vector<HfTensor> map = hf_tensors(model);
  std::vector<SafetensorsOut> outs;
  for (const HfTensor& p : map) outs.push_back({p.hf_name, p.hf_shape});
  size_t held = SIZE_MAX;     // the tensor `values` holds
  std::vector<float> values;  // (numel of tensor `held`) fp32
  write_safetensors(path, outs, dtype, [&](size_t i, std::span<float> out) {
    const HfTensor& p = map[i];
    if (held != p.tensor) {
      values = tensor_values(p.tensor);
      held = p.tensor;
      if (int64_t(values.size()) != model.tensors[held].numel)
        throw InputError("export: " + std::to_string(values.size()) + " values for tensor " + model.tensors[held].name +
                         ", which has " + std::to_string(model.tensors[held].numel));
    }
    TensorDesc local = model.tensors[p.tensor];
    local.offset = 0;  // `values` holds this tensor alone
    copy_piece(p, local, values, out, false);
  });
}

}  // namespace tf::core
