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

// GPT-2: GELU (tanh), pre-LN, positions from row 0, ffn 4h, the GPT-2 vocabulary, tied head (the
// DecoderShape defaults give the rest).
constexpr DecoderShape gpt2_shape(int64_t layers, int64_t hidden, int64_t heads, int64_t seq, int64_t positions) {
  return DecoderShape{.layers = layers,
                      .hidden = hidden,
                      .heads = heads,
                      .ffn = 4 * hidden,
                      .vocab = 50257,
                      .seq = seq,
                      .max_positions = positions};
}
// OPT: ReLU, position offset 2, its vocabulary, 2048 positions.
constexpr DecoderShape opt_shape(int64_t layers, int64_t hidden, int64_t heads, int64_t ffn) {
  DecoderShape d = gpt2_shape(layers, hidden, heads, 2048, 2048);
  d.ffn = ffn;
  d.vocab = 50272;
  d.activation = Activation::kRelu;
  d.pos_offset = 2;
  d.pad_token = 1;
  d.family = ModelFamily::kOpt;
  return d;
}
constexpr DecoderShape with_projection(DecoderShape d, int64_t embed_dim, bool pre_ln) {
  d.embed_dim = embed_dim;
  d.pre_ln = pre_ln;
  return d;
}
// The test models: small enough for finite differences on the CPU reference, each exercising one
// variant of docs/decoder.md (GPT-2: GELU, pre-LN; OPT: ReLU, position offset 2, ffn != 4h; OPT with
// project_in/out and post-LN). Not published models.
constexpr DecoderShape gpt_tiny_shape() {
  DecoderShape d = gpt2_shape(2, 64, 4, 64, 64);
  d.vocab = 512;
  return d;
}
constexpr DecoderShape opt_tiny_shape() {
  DecoderShape d = opt_shape(2, 32, 4, 96);
  d.vocab = 80;
  d.seq = 16;
  d.max_positions = 20;
  return d;
}

// Published shapes. GPT-2 (Radford et al. 2019) as HF transformers' configs give them
// (openai-community/gpt2, gpt2-medium, gpt2-large, gpt2-xl config.json: n_layer, n_embd, n_head,
// n_positions 1024, vocab_size 50257, activation_function "gelu_new" (the tanh form),
// layer_norm_epsilon 1e-5, n_inner null = 4 * n_embd, tied LM head); counts are HF's
// num_parameters() with the tied head counted once. OPT (Zhang et al. 2022, "OPT: Open Pre-trained
// Transformer Language Models", Table 1: layers, heads, d_model) as HF facebook/opt-* config.json
// give them: ffn_dim, vocab_size 50272, max_position_embeddings 2048 with
// OPTLearnedPositionalEmbedding's offset 2 (2050 rows), activation_function "relu",
// do_layer_norm_before true except opt-350m (post-LN, no final LN, word_embed_proj_dim 512 with
// project_in/project_out), tied LM head.
// - gpt2-124m: 124,439,808; gpt2-350m (gpt2-medium): 354,823,168; gpt2-774m (gpt2-large):
//   774,030,080; gpt2-1.5b (gpt2-xl): 1,557,611,200 parameters.
// - gpt3-350m: Megatron-DeepSpeed's "GPT-3 Medium 350M" of the ZeRO-Offload++ tutorial
//   (examples_deepspeed: NUM_LAYERS=24 HIDDEN_SIZE=1024 NUM_ATTN_HEADS=16 SEQ_LEN=2048, GPT-2 vocab
//   50257, tied embeddings, GELU; 2048 positions), Brown et al. 2020, Table 2.1 "GPT-3 Medium 350M";
//   355,871,744 parameters (gpt2-medium's plus 1024 more position rows).
// - gpt2-10b: the DeepSpeed ZeRO-Offload tutorial's "10-billion parameter GPT-2" (docs/_tutorials/
//   zero-offload.md: --num-layers 50 --hidden-size 4096 --num-attention-heads 32 --batch-size 10
//   --checkpoint-activations; Megatron-LM GPT-2 vocab 50257, seq 1024). The shape gives 10.28e9
//   parameters: 12*L*h^2 alone is 10.07e9 and the embeddings add 0.21e9, so "10B" is a round name.
// - opt-125m: 125,239,296; opt-350m: 331,196,416; opt-1.3b: 1,315,758,080; opt-2.7b: 2,651,596,800;
//   opt-6.7b: 6,658,473,984; opt-13b: 12,853,473,280; opt-30b: 29,974,540,288; opt-175b:
//   174,604,468,224 (published "175B"). A figure of 29,974,528,000 for opt-30b also circulates: it is
//   12,288 below what the config's shape gives, and no tensor of that shape has 12,288 elements (a
//   LayerNorm has 14,336), so it is not a missing or extra tensor; the shape's count stands.
constexpr Preset kPresets[] = {
    {"gpt2-124m", "GPT-2", gpt2_shape(12, 768, 12, 1024, 1024), 124'439'808},
    {"gpt2-350m", "GPT-350M", gpt2_shape(24, 1024, 16, 1024, 1024), 354'823'168},
    {"gpt2-774m", "GPT-2 Large", gpt2_shape(36, 1280, 20, 1024, 1024), 774'030'080},
    {"gpt2-1.5b", "GPT-2 XL", gpt2_shape(48, 1600, 25, 1024, 1024), 1'557'611'200},
    {"gpt3-350m", "GPT-3 Medium", gpt2_shape(24, 1024, 16, 2048, 2048), 350e6},
    {"gpt2-10b", "GPT-2 10B", gpt2_shape(50, 4096, 32, 1024, 1024), 10e9},
    {"opt-125m", "OPT-125M", opt_shape(12, 768, 12, 3072), 125'239'296},
    {"opt-350m", "OPT-350M", with_projection(opt_shape(24, 1024, 16, 4096), 512, false), 331'196'416},
    {"opt-1.3b", "OPT-1.3B", opt_shape(24, 2048, 32, 8192), 1'315'758'080},
    {"opt-2.7b", "OPT-2.7B", opt_shape(32, 2560, 32, 10240), 2'651'596'800},
    {"opt-6.7b", "OPT-6.7B", opt_shape(32, 4096, 32, 16384), 6'658'473'984},
    {"opt-13b", "OPT-13B", opt_shape(40, 5120, 40, 20480), 12'853'473'280},
    {"opt-30b", "OPT-30B", opt_shape(48, 7168, 56, 28672), 29'974'540'288},
    {"opt-175b", "OPT-175B", opt_shape(96, 12288, 96, 49152), 175e9},
    {"gpt-tiny", "GPT-tiny", gpt_tiny_shape(), 0},
    {"opt-tiny", "OPT-tiny", opt_tiny_shape(), 0},
    {"opt-tiny-proj", "OPT-tiny-proj", with_projection(opt_tiny_shape(), 16, false), 0},
};

struct Alias {
  const char* alias;
  const char* name;
};
constexpr Alias kAliases[] = {{"gpt2", "gpt2-124m"},       {"gpt-350m", "gpt2-350m"}, {"gpt2-medium", "gpt2-350m"},
                              {"gpt2-large", "gpt2-774m"}, {"gpt2-xl", "gpt2-1.5b"},  {"gpt-10b", "gpt2-10b"}};

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

std::string_view activation_name(Activation a) { return a == Activation::kRelu ? "relu" : "gelu_tanh"; }
std::string_view family_name(ModelFamily f) { return f == ModelFamily::kOpt ? "opt" : "gpt2"; }

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
                          {"max_positions", d.max_positions, 1, kMaxSeq},
                          {"pos_offset", d.pos_offset, 0, kMaxSeq},
                          {"embed_dim", d.embed_dim, 0, kMaxHidden}};
  for (const Field& f : fields)
    if (!in(f.v, f.lo, f.hi))
      return ModelIssue{f.name, std::to_string(f.v) + " is out of range; " + range_text(f.lo, f.hi)};
  if (d.hidden % d.heads != 0)
    return ModelIssue{"heads", std::to_string(d.heads) + " does not divide hidden " + std::to_string(d.hidden) +
                                   "; allowed: a divisor of hidden"};
  if (d.max_positions < d.seq)
    return ModelIssue{"seq", std::to_string(d.seq) + " exceeds max_positions " + std::to_string(d.max_positions) +
                                 "; allowed [1, max_positions] (raise max_positions to train longer sequences)"};
  if (d.pad_token < -1 || d.pad_token >= d.vocab)
    return ModelIssue{"pad_token", std::to_string(d.pad_token) + " is out of range; allowed -1 (none) or [0, vocab = " +
                                       std::to_string(d.vocab) + ")"};
  if (!(d.ln_eps > 0 && d.ln_eps <= 1))
    return ModelIssue{"ln_eps", std::to_string(d.ln_eps) + " is out of range; allowed (0, 1]"};
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

const TensorDesc* ModelDesc::find_tensor(std::string_view name) const {
  for (const TensorDesc& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

DecoderTensors::DecoderTensors(const ModelDesc& m) {
  auto t = [&](const std::string& name) { return m.find_tensor(name); };
  tokens = t("embed.tokens.weight");
  positions = t("embed.positions.weight");
  project_in = t("embed.project_in.weight");
  for (int64_t i = 0; i < m.spec.decoder.layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    blocks.push_back({t(p + "ln1.weight"), t(p + "ln1.bias"), t(p + "attn.qkv.weight"), t(p + "attn.qkv.bias"),
                      t(p + "attn.out.weight"), t(p + "attn.out.bias"), t(p + "ln2.weight"), t(p + "ln2.bias"),
                      t(p + "mlp.fc1.weight"), t(p + "mlp.fc1.bias"), t(p + "mlp.fc2.weight"), t(p + "mlp.fc2.bias")});
  }
  lnf_w = t("final_ln.weight");
  lnf_b = t("final_ln.bias");
  project_out = t("head.project_out.weight");
  head = m.spec.decoder.tied_embeddings ? tokens : t("lm_head.weight");
}

int32_t ModelDesc::shared_owner(size_t layer) const {
  const int64_t t = layers.at(layer).shared_tensor;
  return t < 0 ? -1 : tensors.at(size_t(t)).layer;
}

// FLOPs (multiply and add counted as 2), per token, matmuls only; LayerNorm, softmax, GELU, bias
// and residual adds are memory-bound kernels (core/gemm.cpp: layer_elementwise) and left out here:
//   block forward  = 2*(3h*h + h*h + 2*h*f)   QKV, out-projection, fc1, fc2 (2 x matmul params)
//                  + 2*h*(s+1)                 causal attention: per (sample, head) Q*K^T and P*V over
//                                              the causal half, s(s+1)/2 (query, key) pairs of d
//                                              multiply-adds each: 2 * 2*d*s(s+1)/2 per sample and
//                                              head, 2*h*(s+1) per token over the H heads. (Narayanan
//                                              et al. 2021, eq. 2, count the full s x s: 4*s*h.)
//   block backward = 2 x the matmuls          input and weight gradients
//                  + 5*h*(s+1)                attention backward: the scores recomputed, dV = P^T dO,
//                                              dP = dO V^T, dQ = dS K, dK = dS^T Q: 5 products over
//                                              the causal half (2.5 x forward)
//   embedding      = 2*e*h forward (project_in, when e != h), else 0 (a gather); backward 2x
//   head forward   = 2*e*V (logits, tied or not) + 2*h*e (project_out, when e != h); backward 2x
//   MLP linear     = 2*in*out per sample; backward 2x
//   Backward counts every input gradient (the first layer's unneeded one too, as in the 6*N*tokens
//   rule). Activation checkpointing adds one more forward of each block (train_flops_per_token).
double attention_fwd_flops_per_token(const DecoderShape& d) { return 2.0 * double(d.hidden) * double(d.seq + 1); }
double attention_bwd_flops_per_token(const DecoderShape& d) { return 2.5 * attention_fwd_flops_per_token(d); }
namespace {
double block_matmul_flops_per_token(const DecoderShape& d) {
  const double h = double(d.hidden), f = double(d.ffn);
  return 2.0 * (4.0 * h * h + 2.0 * h * f);
}
}  // namespace
double block_fwd_flops_per_token(const DecoderShape& d) {
  return block_matmul_flops_per_token(d) + attention_fwd_flops_per_token(d);
}
double block_bwd_flops_per_token(const DecoderShape& d) {
  return 2.0 * block_matmul_flops_per_token(d) + attention_bwd_flops_per_token(d);
}

namespace {

// Builds a ModelDesc: layers own contiguous runs of tensors, offsets and counts add up.
class DescBuilder {
 public:
  explicit DescBuilder(ModelDesc& m) : m_(m) {}
  void begin_layer(std::string name, LayerKind kind) {
    LayerDesc l;
    l.name = std::move(name);
    l.kind = kind;
    l.first_tensor = m_.tensors.size();
    m_.layers.push_back(std::move(l));
  }
  void add_tensor(std::string name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n = mul(n, d, "tensor " + name);
    m_.tensors.push_back(
        TensorDesc{std::move(name), std::move(shape), n, int32_t(m_.layers.size() - 1), m_.total_params});
    LayerDesc& l = m_.layers.back();
    l.tensor_count++;
    l.params = add(l.params, n, "layer " + l.name);
    m_.total_params = add(m_.total_params, n, "total parameters");
  }
  void set_flops(double fwd, double bwd) {
    m_.layers.back().fwd_flops_per_token = fwd;
    m_.layers.back().bwd_flops_per_token = bwd;
  }

 private:
  ModelDesc& m_;
};

void describe_mlp(DescBuilder& b, const ModelSpec& spec) {
  const auto& dims = spec.mlp_dims;
  for (size_t i = 0; i + 1 < dims.size(); ++i) {
    const std::string p = "layers." + std::to_string(i);
    b.begin_layer(p, LayerKind::kLinear);
    b.add_tensor(p + ".weight", {dims[i + 1], dims[i]});  // (out, in)
    if (spec.mlp_bias) b.add_tensor(p + ".bias", {dims[i + 1]});
    const double fwd = 2.0 * double(dims[i]) * double(dims[i + 1]);
    b.set_flops(fwd, 2 * fwd);
  }
}

// The tensor table of docs/decoder.md, in model order.
void describe_decoder(DescBuilder& b, const DecoderShape& d) {
  const int64_t h = d.hidden, f = d.ffn, e = embed_width(d);
  const bool proj = has_embed_projection(d);
  const double proj_flops = proj ? 2.0 * double(e) * double(h) : 0.0;
  b.begin_layer("embed", LayerKind::kEmbedding);
  b.add_tensor("embed.tokens.weight", {d.vocab, e});              // (V, e)
  b.add_tensor("embed.positions.weight", {position_rows(d), h});  // (P + off, h)
  if (proj) b.add_tensor("embed.project_in.weight", {h, e});      // (h, e)
  b.set_flops(proj_flops, 2 * proj_flops);
  for (int64_t i = 0; i < d.layers; ++i) {
    const std::string p = "layers." + std::to_string(i);
    b.begin_layer(p, LayerKind::kBlock);
    b.add_tensor(p + ".ln1.weight", {h});
    b.add_tensor(p + ".ln1.bias", {h});
    b.add_tensor(p + ".attn.qkv.weight", {3 * h, h});  // (3h, h): q, k, v stacked
    b.add_tensor(p + ".attn.qkv.bias", {3 * h});
    b.add_tensor(p + ".attn.out.weight", {h, h});
    b.add_tensor(p + ".attn.out.bias", {h});
    b.add_tensor(p + ".ln2.weight", {h});
    b.add_tensor(p + ".ln2.bias", {h});
    b.add_tensor(p + ".mlp.fc1.weight", {f, h});  // (f, h)
    b.add_tensor(p + ".mlp.fc1.bias", {f});
    b.add_tensor(p + ".mlp.fc2.weight", {h, f});  // (h, f)
    b.add_tensor(p + ".mlp.fc2.bias", {h});
    b.set_flops(block_fwd_flops_per_token(d), block_bwd_flops_per_token(d));
  }
  b.begin_layer("head", LayerKind::kHead);
  if (d.pre_ln) {
    b.add_tensor("final_ln.weight", {h});
    b.add_tensor("final_ln.bias", {h});
  }
  if (proj) b.add_tensor("head.project_out.weight", {e, h});             // (e, h)
  if (!d.tied_embeddings) b.add_tensor("lm_head.weight", {d.vocab, e});  // (V, e)
  const double head_fwd = 2.0 * double(e) * double(d.vocab) + proj_flops;
  b.set_flops(head_fwd, 2 * head_fwd);
}

}  // namespace

ModelDesc describe_model(ModelSpec spec) {
  normalize_model(spec);
  validate(spec);
  ModelDesc m;
  m.spec = spec;
  DescBuilder b(m);
  if (spec.type == ModelType::kMlp) {
    describe_mlp(b, spec);
    return m;
  }
  describe_decoder(b, spec.decoder);
  if (spec.decoder.tied_embeddings) m.layers.back().shared_tensor = 0;  // embed.tokens.weight
  return m;
}

int64_t parameter_count(const ModelSpec& spec) { return describe_model(spec).total_params; }

// Activation bytes kept for backward, per layer and micro-batch: T = s*b token rows, e bytes per
// stored activation (bf16/fp16: 2, fp32: 4), LayerNorm statistics and log-sum-exps in fp32 (4 B),
// token ids and targets int32 (4 B). What docs/decoder.md's forward keeps:
//   block, full   = e*T*(8h + 2f) + T*(16 + 4H)
//       e*T*h each: x (the block input), a (LN1 output; post-LN: the LN1 input x + attn), o, x2,
//                   c (LN2 output; post-LN: the LN2 input x2 + mlp)
//       e*T*3h: qkv     e*T*f each: u (fc1 pre-activation), g (activation output)
//       4*T*2 per LN: mean, rstd (two LNs: 16*T)    4*T*H: lse (B, H, s)
//     no s x s term: the fused attention recomputes its scores in backward.
//   block, checkpointed = e*T*h (the block's input; the rest is recomputed in backward, so the peak
//     also holds one block's full activations: the memory model adds that once)
//   embedding     = 4*T (token ids, for the embedding gradient) + e*T*e when e != h (the gathered rows
//                   E[tok], project_in's input)
//   head          = e*T*h (x_L) + [pre-LN] e*T*h + 8*T (LNf output z, mean, rstd) + [e != h] e*T*e (z')
//                   + e*T*V (bf16 logits) + 4*T (their fp32 lse) + 4*T (targets)
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
  const int64_t t = mul(d.seq, b, what), eth = mul(mul(e, t, what), d.hidden, what);
  const int64_t ete = has_embed_projection(d) ? mul(mul(e, t, what), embed_width(d), what) : 0;
  switch (kind) {
    case LayerKind::kEmbedding: r.full = add(mul(4, t, what), ete, what); break;
    case LayerKind::kBlock: {
      const int64_t rows = add(mul(8, d.hidden, what), mul(2, d.ffn, what), what);  // 8h + 2f
      const int64_t stats = mul(t, add(16, mul(4, d.heads, what), what), what);     // T*(16 + 4H)
      r.full = add(mul(mul(e, t, what), rows, what), stats, what);
      r.checkpointed = eth;
      return r;
    }
    case LayerKind::kHead: {
      int64_t v = add(eth, add(mul(mul(e, t, what), d.vocab, what), mul(8, t, what), what), what);
      if (d.pre_ln) v = add(v, add(eth, mul(8, t, what), what), what);
      r.full = add(v, ete, what);
      break;
    }
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
