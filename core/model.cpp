// Model descriptions: presets, validation, tensor lists, parameter counts, FLOPs and activation bytes.
#include "core/model.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "core/strings.h"

namespace tf::core {

namespace {

// Checked int64 arithmetic: model sizes come from user input.
int64_t mul(int64_t a, int64_t b, std::string_view what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r))
    throw InputError("model: " + std::string(what) + " overflows 64 bits; the model is too large");
  return r;
}
int64_t add(int64_t a, int64_t b, std::string_view what) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r))
    throw InputError("model: " + std::string(what) + " overflows 64 bits; the model is too large");
  return r;
}

struct Preset {
  const char* name;
  const char* display;
  DecoderShape shape;
  double published_params;
};

// Published shapes.
// - gpt2-350m: GPT-2 medium (Radford et al. 2019; HF "gpt2-medium" config: n_layer 24, n_embd 1024,
//   n_head 16, n_positions 1024, vocab 50257; 354,823,168 parameters). The same shape is GPT-3
//   Medium, "350M" (Brown et al. 2020, Table 2.1), and Megatron-DeepSpeed's "GPT-3 Medium 350M"
//   (examples_deepspeed: NUM_LAYERS=24 HIDDEN_SIZE=1024 NUM_ATTN_HEADS=16, SEQ_LEN=2048).
// - gpt2-10b: the DeepSpeed ZeRO-Offload tutorial's "10-billion parameter GPT-2" (docs/_tutorials/
//   zero-offload.md: --num-layers 50 --hidden-size 4096 --num-attention-heads 32 --batch-size 10
//   --checkpoint-activations; Megatron-LM GPT-2 vocab 50257, seq 1024). The shape gives 10.28e9
//   parameters: 12*L*h^2 alone is 10.07e9 and the embeddings add 0.21e9, so "10B" is a round name.
// - opt-6.7b/13b/30b/175b: Zhang et al. 2022, "OPT: Open Pre-trained Transformer Language Models",
//   Table 1 (layers, heads, d_model), with HF facebook/opt-* config.json: ffn_dim = 4*d_model,
//   vocab_size 50272, max_position_embeddings 2048 (+2 rows: OPTLearnedPositionalEmbedding offset).
constexpr Preset kPresets[] = {
    {"gpt2-350m", "GPT-350M", {24, 1024, 16, 4096, 50257, 1024, 1024, true}, 350e6},
    {"gpt2-10b", "GPT-2 10B", {50, 4096, 32, 16384, 50257, 1024, 1024, true}, 10e9},
    {"opt-6.7b", "OPT-6.7B", {32, 4096, 32, 16384, 50272, 2048, 2050, true}, 6.7e9},
    {"opt-13b", "OPT-13B", {40, 5120, 40, 20480, 50272, 2048, 2050, true}, 13e9},
    {"opt-30b", "OPT-30B", {48, 7168, 56, 28672, 50272, 2048, 2050, true}, 30e9},
    {"opt-175b", "OPT-175B", {96, 12288, 96, 49152, 50272, 2048, 2050, true}, 175e9},
    // A small decoder for functional (bit-exact) tests; not a published model.
    {"gpt-tiny", "GPT-tiny", {2, 64, 4, 256, 512, 64, 64, true}, 0},
};

struct Alias {
  const char* alias;
  const char* name;
};
constexpr Alias kAliases[] = {{"gpt-350m", "gpt2-350m"}, {"gpt2-medium", "gpt2-350m"}, {"gpt-10b", "gpt2-10b"}};

// DeepSpeed's tests/small_model_debugging/partial_offload_test.py: SimpleModel(hidden_dim = 4*1024),
// four torch.nn.Linear(hidden_dim, hidden_dim) with bias.
constexpr const char* kToyName = "toy-mlp";

const Preset* find_preset(std::string_view name) {
  std::string l = ascii_lower(name);
  for (const Alias& a : kAliases)
    if (l == a.alias) l = a.name;
  for (const Preset& p : kPresets)
    if (l == p.name || l == ascii_lower(p.display)) return &p;
  return nullptr;
}

std::string range_text(int64_t lo, int64_t hi) {
  return "allowed [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

}  // namespace

std::vector<std::string_view> model_preset_names() {
  std::vector<std::string_view> out;
  for (const Preset& p : kPresets) out.emplace_back(p.name);
  out.emplace_back(kToyName);
  return out;
}

std::optional<ModelSpec> find_model_preset(std::string_view name) {
  if (ascii_lower(name) == kToyName) return make_mlp({4096, 4096, 4096, 4096, 4096}, true, kToyName);
  const Preset* p = find_preset(name);
  if (!p) return std::nullopt;
  ModelSpec s;
  s.name = p->name;
  s.type = ModelType::kDecoder;
  s.decoder = p->shape;
  return s;
}

ModelSpec model_preset(std::string_view name) {
  if (auto s = find_model_preset(name)) return *s;
  std::string list;
  for (auto n : model_preset_names()) list += (list.empty() ? "" : ", ") + std::string(n);
  throw InputError("unknown model preset '" + std::string(name) + "'; allowed: " + list);
}

std::optional<double> published_parameter_count(std::string_view preset) {
  const Preset* p = find_preset(preset);
  if (!p || p->published_params <= 0) return std::nullopt;
  return p->published_params;
}

ModelSpec make_mlp(std::vector<int64_t> dims, bool bias, std::string name) {
  ModelSpec s;
  s.name = std::move(name);
  s.type = ModelType::kMlp;
  s.mlp_dims = std::move(dims);
  s.mlp_bias = bias;
  return s;
}

void normalize_model(ModelSpec& spec) {
  if (spec.type != ModelType::kDecoder) return;
  DecoderShape& d = spec.decoder;
  if (d.ffn == 0 && d.hidden > 0 && d.hidden <= kMaxFfn / 4) d.ffn = 4 * d.hidden;
  if (d.max_positions == 0) d.max_positions = d.seq;
}

std::optional<ModelIssue> check_model(const ModelSpec& spec) {
  auto in = [](int64_t v, int64_t lo, int64_t hi) { return v >= lo && v <= hi; };
  if (spec.type == ModelType::kMlp) {
    const auto& dims = spec.mlp_dims;
    if (dims.size() < 2 || dims.size() > kMaxMlpLayers + 1)
      return ModelIssue{"dims", "needs 2 to " + std::to_string(kMaxMlpLayers + 1) +
                                    " sizes [in, hidden..., out], got " + std::to_string(dims.size())};
    for (size_t i = 0; i < dims.size(); ++i)
      if (!in(dims[i], 1, kMaxMlpDim))
        return ModelIssue{"dims[" + std::to_string(i) + "]",
                          std::to_string(dims[i]) + " is out of range; " + range_text(1, kMaxMlpDim)};
    return std::nullopt;
  }
  const DecoderShape& d = spec.decoder;
  struct Field {
    const char* name;
    int64_t v, lo, hi;
  };
  const Field fields[] = {{"layers", d.layers, 1, kMaxLayers},
                          {"hidden", d.hidden, 1, kMaxHidden},
                          {"heads", d.heads, 1, kMaxHidden},
                          {"ffn", d.ffn, 1, kMaxFfn},
                          {"vocab", d.vocab, 1, kMaxVocab},
                          {"seq", d.seq, 1, kMaxSeq},
                          {"max_positions", d.max_positions, 1, kMaxSeq}};
  for (const Field& f : fields)
    if (!in(f.v, f.lo, f.hi))
      return ModelIssue{f.name, std::to_string(f.v) + " is out of range; " + range_text(f.lo, f.hi)};
  if (d.hidden % d.heads != 0)
    return ModelIssue{"heads", std::to_string(d.heads) + " does not divide hidden " + std::to_string(d.hidden) +
                                   "; allowed: a divisor of hidden"};
  if (d.max_positions < d.seq)
    return ModelIssue{"seq", std::to_string(d.seq) + " exceeds max_positions " + std::to_string(d.max_positions) +
                                 "; allowed [1, max_positions] (raise max_positions to train longer sequences)"};
  return std::nullopt;
}

void validate(const ModelSpec& spec) {
  if (auto issue = check_model(spec)) throw InputError("model." + issue->field + ": " + issue->what);
}

int64_t ModelDesc::tokens_per_sample() const { return spec.type == ModelType::kDecoder ? spec.decoder.seq : 1; }

double ModelDesc::train_flops_per_token(bool checkpointing) const {
  double f = 0;
  for (const LayerDesc& l : layers) {
    f += l.fwd_flops_per_token + l.bwd_flops_per_token;
    if (checkpointing && l.kind == LayerKind::kBlock) f += l.fwd_flops_per_token;  // recomputation
  }
  return f;
}

// FLOPs (multiply and add counted as 2), per token, matmuls only; LayerNorm, softmax, GeLU, bias
// and dropout are left out (they are memory-bound and take under 1% of the FLOPs at these sizes):
//   block forward  = 2*(3h*h + h*h + 2*h*f)   QKV, out-projection, fc1, fc2 (2 x matmul params)
//                  + 2*s*h + 2*s*h             Q*K^T and softmax(..)*V over the full s x s score
//                                              matrix (causal masking not subtracted, as in
//                                              Narayanan et al. 2021, eq. 2: 24*h^2 + 4*s*h for f = 4h)
//   head forward   = 2*h*V                     logits (tied or not)
//   embedding      = 0                         a gather
//   MLP linear     = 2*in*out per sample
//   backward       = 2 x forward for every layer (input and weight gradients; the first layer's
//                    unneeded input gradient is counted too, as in the usual 6*N*tokens rule).
//   Activation checkpointing adds one more forward of each block (ModelDesc::train_flops_per_token).
ModelDesc describe_model(ModelSpec spec) {
  normalize_model(spec);
  validate(spec);
  ModelDesc m;
  m.spec = spec;
  auto add_tensor = [&](std::string name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n = mul(n, d, "tensor " + name);
    m.tensors.push_back(TensorDesc{std::move(name), std::move(shape), n, int32_t(m.layers.size() - 1)});
    LayerDesc& l = m.layers.back();
    l.tensor_count++;
    l.params = add(l.params, n, "layer " + l.name);
    m.total_params = add(m.total_params, n, "total parameters");
  };
  auto begin_layer = [&](std::string name, LayerKind kind) {
    LayerDesc l;
    l.name = std::move(name);
    l.kind = kind;
    l.first_tensor = m.tensors.size();
    m.layers.push_back(std::move(l));
  };

  if (spec.type == ModelType::kMlp) {
    const auto& dims = spec.mlp_dims;
    for (size_t i = 0; i + 1 < dims.size(); ++i) {
      const std::string p = "layers." + std::to_string(i);
      begin_layer(p, LayerKind::kLinear);
      add_tensor(p + ".weight", {dims[i + 1], dims[i]});  // (out, in)
      if (spec.mlp_bias) add_tensor(p + ".bias", {dims[i + 1]});
      const double fwd = 2.0 * double(dims[i]) * double(dims[i + 1]);
      m.layers.back().fwd_flops_per_token = fwd;
      m.layers.back().bwd_flops_per_token = 2 * fwd;
    }
    return m;
  }

  const DecoderShape& d = spec.decoder;
  const int64_t h = d.hidden, f = d.ffn;
  begin_layer("embed", LayerKind::kEmbedding);
  add_tensor("embed.tokens.weight", {d.vocab, h});             // (V, h)
  add_tensor("embed.positions.weight", {d.max_positions, h});  // (P, h)
  const int64_t token_embedding = 0;
  const double block_fwd =
      2.0 * (4.0 * double(h) * double(h) + 2.0 * double(h) * double(f)) + 4.0 * double(d.seq) * double(h);
  for (int64_t i = 0; i < d.layers; ++i) {
    const std::string p = "layers." + std::to_string(i);
    begin_layer(p, LayerKind::kBlock);
    add_tensor(p + ".ln1.weight", {h});
    add_tensor(p + ".ln1.bias", {h});
    add_tensor(p + ".attn.qkv.weight", {3 * h, h});  // (3h, h): q, k, v stacked
    add_tensor(p + ".attn.qkv.bias", {3 * h});
    add_tensor(p + ".attn.out.weight", {h, h});
    add_tensor(p + ".attn.out.bias", {h});
    add_tensor(p + ".ln2.weight", {h});
    add_tensor(p + ".ln2.bias", {h});
    add_tensor(p + ".mlp.fc1.weight", {f, h});  // (f, h)
    add_tensor(p + ".mlp.fc1.bias", {f});
    add_tensor(p + ".mlp.fc2.weight", {h, f});  // (h, f)
    add_tensor(p + ".mlp.fc2.bias", {h});
    m.layers.back().fwd_flops_per_token = block_fwd;
    m.layers.back().bwd_flops_per_token = 2 * block_fwd;
  }
  begin_layer("head", LayerKind::kHead);
  add_tensor("final_ln.weight", {h});
  add_tensor("final_ln.bias", {h});
  if (d.tied_embeddings)
    m.layers.back().shared_tensor = token_embedding;
  else
    add_tensor("lm_head.weight", {d.vocab, h});
  m.layers.back().fwd_flops_per_token = 2.0 * double(h) * double(d.vocab);
  m.layers.back().bwd_flops_per_token = 4.0 * double(h) * double(d.vocab);
  return m;
}

int64_t parameter_count(const ModelSpec& spec) { return describe_model(spec).total_params; }

// Activation bytes kept for backward, per layer and micro-batch (b samples of s tokens; e bytes per
// activation element, 1-byte dropout masks), following Korthikanti et al. 2022, "Reducing Activation
// Recomputation in Large Transformer Models", section 4.1 (no tensor or sequence parallelism):
//   block, full   = s*b*h*(8e + 2) + 2e*s*b*f + a*s^2*b*(2e + 1)
//       attention: e*sbh (QKV input) + 2e*sbh (Q, K) + e*as^2b (softmax) + as^2b (its dropout mask)
//                  + e*as^2b (dropout output) + e*sbh (V) + e*sbh (out-proj input) + sbh (mask)
//       MLP:       e*sbh (fc1 input) + e*sbf (GeLU input) + e*sbf (fc2 input) + sbh (mask)
//       two LNs:   2e*sbh
//     which is the paper's 34*sbh + 5*as^2*b for e = 2 and f = 4h.
//   block, checkpointed = e*s*b*h (the block's input; the rest is recomputed in backward, so the peak
//     also holds one block's full activations: the memory model adds that once)
//   embedding     = s*b*h (the dropout mask; its output is the first block's input)
//   head          = 2e*s*b*h (final-LN and LM-head inputs) + 4*s*b*V (fp32 logits for the loss)
//   MLP linear    = e*b*in (its input); the last one also 4*b*out (fp32 logits for the loss)
// Layers other than blocks are not checkpointed: their two figures are equal.
ActivationBytes activation_bytes(const ModelSpec& spec, LayerKind kind, size_t index, int64_t micro_batch,
                                 int act_elem_bytes) {
  if (micro_batch < 1)
    throw InputError("activation_bytes: micro_batch must be >= 1, got " + std::to_string(micro_batch));
  if (act_elem_bytes != 2 && act_elem_bytes != 4)
    throw InputError("activation_bytes: act_elem_bytes must be 2 or 4, got " + std::to_string(act_elem_bytes));
  const int64_t e = act_elem_bytes, b = micro_batch;
  const char* what = "activation bytes";
  ActivationBytes r;
  if (spec.type == ModelType::kMlp) {
    const auto& dims = spec.mlp_dims;
    if (kind != LayerKind::kLinear || index + 1 >= dims.size())
      throw InputError("activation_bytes: no linear layer " + std::to_string(index) + " in this model");
    r.full = mul(mul(e, b, what), dims[index], what);
    if (index + 2 == dims.size()) r.full = add(r.full, mul(mul(4, b, what), dims[index + 1], what), what);
    r.checkpointed = r.full;
    return r;
  }
  const DecoderShape& d = spec.decoder;
  const int64_t sb = mul(d.seq, b, what), sbh = mul(sb, d.hidden, what);
  switch (kind) {
    case LayerKind::kEmbedding: r.full = sbh; break;
    case LayerKind::kBlock: {
      const int64_t lin = add(mul(sbh, 8 * e + 2, what), mul(mul(2 * e, sb, what), d.ffn, what), what);
      const int64_t att = mul(mul(mul(d.heads, d.seq, what), sb, what), 2 * e + 1, what);
      r.full = add(lin, att, what);
      r.checkpointed = mul(e, sbh, what);
      return r;
    }
    case LayerKind::kHead: r.full = add(mul(2 * e, sbh, what), mul(mul(4, sb, what), d.vocab, what), what); break;
    case LayerKind::kLinear: throw InputError("activation_bytes: a decoder has no linear layers");
  }
  r.checkpointed = r.full;
  return r;
}

ActivationBytes activation_bytes(const ModelDesc& model, const LayerDesc& layer, int64_t micro_batch,
                                 int act_elem_bytes) {
  size_t index = 0;
  if (layer.kind == LayerKind::kLinear) {
    if (layer.first_tensor >= model.tensors.size())
      throw InputError("activation_bytes: layer '" + layer.name + "' is not part of this model");
    index = size_t(model.tensors[layer.first_tensor].layer);
  }
  return activation_bytes(model.spec, layer.kind, index, micro_batch, act_elem_bytes);
}

}  // namespace tf::core
