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

// A pre-LayerNorm GPT/OPT decoder: learned token and position embeddings, `layers` blocks of
// (LN, fused QKV, attention, out-projection, LN, fc1, GeLU/ReLU, fc2), a final LN, and an LM head
// tied to the token embedding unless tied_embeddings is false.
struct DecoderShape {
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t ffn = 0;  // 0 in a spec being built means 4 * hidden (filled by normalize_model)
  int64_t vocab = 0;
  int64_t seq = 0;            // training sequence length
  int64_t max_positions = 0;  // rows of the position table; 0 means seq (filled by normalize_model)
  bool tied_embeddings = true;
};

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
// "gpt-350m" and "gpt2-medium" for gpt2-350m, "gpt-10b" for gpt2-10b.
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
  int32_t layer = 0;  // index into ModelDesc::layers
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
};

// Validates (throws InputError) and describes a model.
ModelDesc describe_model(ModelSpec spec);
int64_t parameter_count(const ModelSpec& spec);

// Activation bytes one layer keeps from forward to backward for one micro-batch, with and without
// activation checkpointing (formulas in model.cpp). act_elem_bytes: 2 for bf16/fp16, 4 for fp32.
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
