// Model descriptions (toy MLP, GPT/OPT decoders): tensors in forward order, parameter counts, FLOPs and activations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tf::core {

enum class ModelType : uint8_t { kMlp, kDecoder };

// The feed-forward activation (docs/decoder.md): GELU with the tanh approximation (GPT-2) or ReLU (OPT).
enum class Activation : uint8_t { kGeluTanh, kRelu };
// Whose Hugging Face tensor names a decoder maps to (core/hf_names.*).
enum class ModelFamily : uint8_t { kGpt2, kOpt };
// "gelu_tanh", "relu"; "gpt2", "opt".
std::string_view activation_name(Activation a);
std::string_view family_name(ModelFamily f);

// A GPT-2/OPT decoder as docs/decoder.md describes it: learned token and position embeddings (OPT's
// optional project_in/project_out when embed_dim != hidden), `layers` blocks of (LN, fused QKV,
// causal attention, out-projection, LN, fc1, GELU/ReLU, fc2) in pre-LN or post-LN order, a final LN
// (pre-LN models only), and an LM head tied to the token embedding unless tied_embeddings is false.
struct DecoderShape {
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t ffn = 0;  // 0 in a spec being built means 4 * hidden (filled by normalize_model)
  int64_t vocab = 0;
  int64_t seq = 0;            // training sequence length
  int64_t max_positions = 0;  // the longest sequence; 0 means seq (filled by normalize_model)
  bool tied_embeddings = true;
  Activation activation = Activation::kGeluTanh;
  bool pre_ln = true;      // false: post-LN (opt-350m), which has no final LN
  int64_t pos_offset = 0;  // first position's row in the table: 2 for OPT, 0 for GPT-2
  int64_t embed_dim = 0;   // e, OPT's word_embed_proj_dim; 0 (or hidden) means none: e = hidden
  // OPT's padding_idx (pad_token_id 1): the row's lookups add nothing to its gradient (the tied head's
  // part still does), as transformers' nn.Embedding(padding_idx) has it; -1: none (GPT-2).
  int64_t pad_token = -1;
  double ln_eps = 1e-5;  // LayerNorm epsilon
  ModelFamily family = ModelFamily::kGpt2;
};

// Derived sizes of a normalized decoder (docs/decoder.md, "Shapes and names").
inline int64_t embed_width(const DecoderShape& d) { return d.embed_dim > 0 ? d.embed_dim : d.hidden; }  // e
inline bool has_embed_projection(const DecoderShape& d) { return embed_width(d) != d.hidden; }
inline int64_t position_rows(const DecoderShape& d) { return d.max_positions + d.pos_offset; }  // P + off
inline int64_t head_dim(const DecoderShape& d) { return d.hidden / d.heads; }                   // d = h / H
// The fused attention's (sample, head) pairs at a micro-batch: its kernels' grid (core::AttentionPoint::pairs).
inline int64_t attention_pairs(const DecoderShape& d, int64_t micro_batch) { return micro_batch * d.heads; }

// What a scenario names. For kMlp, mlp_dims = [in, h1, ..., out] gives the linear layers
// (in -> h1), (h1 -> h2), ...; each linear has a bias when mlp_bias.
struct ModelSpec {
  std::string name;
  ModelType type = ModelType::kDecoder;
  std::vector<int64_t> mlp_dims;
  bool mlp_bias = true;
  DecoderShape decoder;
};

// Limits that keep every derived count inside int64 (checked again where counts are formed).
inline constexpr int64_t kMaxLayers = 100'000;
inline constexpr int64_t kMaxHidden = int64_t(1) << 20;
inline constexpr int64_t kMaxFfn = int64_t(1) << 24;
inline constexpr int64_t kMaxVocab = int64_t(1) << 24;
inline constexpr int64_t kMaxSeq = int64_t(1) << 22;
inline constexpr int64_t kMaxMlpDim = int64_t(1) << 24;
inline constexpr size_t kMaxMlpLayers = 4096;

// Presets with their published shapes (sources in model.cpp). Names are case-insensitive; aliases:
// "gpt2" for gpt2-124m, "gpt-350m" and "gpt2-medium" for gpt2-350m, "gpt2-large" for gpt2-774m,
// "gpt2-xl" for gpt2-1.5b, "gpt-10b" for gpt2-10b.
std::vector<std::string_view> model_preset_names();
std::optional<ModelSpec> find_model_preset(std::string_view name);
ModelSpec model_preset(std::string_view name);  // throws InputError listing the presets
// The published parameter count of a preset (the figure its source states), for checks.
std::optional<double> published_parameter_count(std::string_view preset);

ModelSpec make_mlp(std::vector<int64_t> dims, bool bias = true, std::string name = "mlp");

// Fills the defaults (ffn = 4*hidden, max_positions = seq) of a decoder spec.
void normalize_model(ModelSpec& spec);

// The first problem with a spec: the field it concerns ("heads", "mlp_dims[2]", ...) and what is
// wrong, including the allowed range. Empty when the spec is valid (after normalize_model).
struct ModelIssue {
  std::string field;
  std::string what;
};
std::optional<ModelIssue> check_model(const ModelSpec& spec);
// Throws InputError("model.FIELD: WHAT") for the first issue.
void validate(const ModelSpec& spec);

// One parameter tensor. Shapes follow torch (out, in) for linear weights.
struct TensorDesc {
  std::string name;            // e.g. "layers.3.attn.qkv.weight"
  std::vector<int64_t> shape;  // e.g. (3*hidden, hidden)
  int64_t numel = 0;
  int32_t layer = 0;   // index into ModelDesc::layers
  int64_t offset = 0;  // first element in the model-order flat vector (the tensors back to back)
};

enum class LayerKind : uint8_t { kEmbedding, kBlock, kHead, kLinear };

// A unit of the forward pass that owns a contiguous run of tensors (ZeRO-3 gathers these together).
struct LayerDesc {
  std::string name;
  LayerKind kind = LayerKind::kBlock;
  size_t first_tensor = 0;
  size_t tensor_count = 0;
  int64_t params = 0;  // elements owned by this layer's tensors
  // A tensor this layer reads that another layer owns (the tied LM head reads the token
  // embedding); -1 if none.
  int64_t shared_tensor = -1;
  // FLOPs per token (per sample for an MLP); see model.cpp for the formulas.
  double fwd_flops_per_token = 0;
  double bwd_flops_per_token = 0;
};

struct ModelDesc {
  ModelSpec spec;                   // normalized
  std::vector<TensorDesc> tensors;  // forward order
  std::vector<LayerDesc> layers;    // forward order
  int64_t total_params = 0;
  // Tokens per sample: seq for a decoder, 1 for an MLP.
  int64_t tokens_per_sample() const;
  // FLOPs of one training pass per token over all layers: forward + backward, plus the forward
  // recomputation of every block when activation checkpointing is on.
  double train_flops_per_token(bool checkpointing) const;
  // The tensor called `name`, or nullptr.
  const TensorDesc* find_tensor(std::string_view name) const;
  // The layer that owns the tensor layer `layer` reads but does not own (LayerDesc::shared_tensor: the
  // tied LM head's token embedding), or -1.
  int32_t shared_owner(size_t layer) const;
};

// A decoder's tensors by role (docs/decoder.md "Shapes and names"), nullptr where the model has none:
// what every implementation (the reference decoder, the CUDA workload) reads its weights by. Points
// into m.tensors: the ModelDesc must outlive it.
struct DecoderTensors {
  const TensorDesc *tokens = nullptr, *positions = nullptr, *project_in = nullptr;  // the embedding layer
  struct Block {
    const TensorDesc *ln1_w, *ln1_b, *qkv_w, *qkv_b, *out_w, *out_b, *ln2_w, *ln2_b, *fc1_w, *fc1_b, *fc2_w, *fc2_b;
  };
  std::vector<Block> blocks;                                                    // one per block layer
  const TensorDesc *lnf_w = nullptr, *lnf_b = nullptr, *project_out = nullptr;  // the head layer
  const TensorDesc* head = nullptr;  // the LM head's (V, e) matrix: `tokens` when tied, else lm_head.weight
  explicit DecoderTensors(const ModelDesc& m);
};

// Validates (throws InputError) and describes a model.
ModelDesc describe_model(ModelSpec spec);
int64_t parameter_count(const ModelSpec& spec);

// FLOPs per token of one decoder block (formulas in model.cpp). Causal attention counts the causal
// half: the s(s+1)/2 (query, key) pairs at or below the diagonal, which the fused kernel computes
// (it skips fully masked tiles); its backward recomputes the scores (5 products against forward's 2).
double attention_fwd_flops_per_token(const DecoderShape& d);
double attention_bwd_flops_per_token(const DecoderShape& d);
double block_fwd_flops_per_token(const DecoderShape& d);
double block_bwd_flops_per_token(const DecoderShape& d);

// Activation bytes one layer keeps from forward to backward for one micro-batch, with and without
// activation checkpointing: what docs/decoder.md's forward keeps (formulas in model.cpp; no s x s
// term: attention keeps its output and log-sum-exp). act_elem_bytes: 2 for bf16/fp16, 4 for fp32.
// Throws InputError if the count does not fit in int64.
struct ActivationBytes {
  int64_t full = 0;          // no checkpointing
  int64_t checkpointed = 0;  // block input only (blocks); other layers unchanged
};
ActivationBytes activation_bytes(const ModelDesc& model, const LayerDesc& layer, int64_t micro_batch,
                                 int act_elem_bytes);
// The same without a ModelDesc: a layer of `kind` of a valid, normalized spec; `index` is the linear
// layer's position for an MLP (unused for a decoder).
ActivationBytes activation_bytes(const ModelSpec& spec, LayerKind kind, size_t index, int64_t micro_batch,
                                 int act_elem_bytes);

}  // namespace tf::core
