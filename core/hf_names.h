// Hugging Face tensor names of GPT-2 (GPT2LMHeadModel) and OPT (OPTForCausalLM) mapped onto the
// decoder's tensors (docs/decoder.md), and loading/exporting whole models as safetensors.
//
// Names as save_pretrained writes them: GPT-2 "transformer.wte.weight", "transformer.wpe.weight",
// "transformer.h.{i}.ln_1", ".attn.c_attn", ".attn.c_proj", ".ln_2", ".mlp.c_fc", ".mlp.c_proj",
// "transformer.ln_f" (Conv1D weights are stored (in, out): transposed against ours); OPT
// "model.decoder.embed_tokens.weight", ".embed_positions.weight", ".project_in.weight",
// ".layers.{i}.self_attn.{q,k,v}_proj" (stacked into our qkv in that order), ".self_attn.out_proj",
// ".self_attn_layer_norm", ".fc1", ".fc2", ".final_layer_norm" (per layer: our ln2),
// "model.decoder.final_layer_norm", ".project_out.weight"; "lm_head.weight" for an untied head.
// Files without the "transformer." / "model." prefix (GPT2Model / OPTModel checkpoints, the hub's
// original gpt2 file) load too. GPT-2 files' causal-mask buffers (h.{i}.attn.bias, 4-D, and
// h.{i}.attn.masked_bias) are not parameters and are skipped.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/model.h"
#include "core/optim/dtype.h"

namespace tf::core {

// One Hugging Face tensor and where its values go in ours.
struct HfTensor {
  std::string hf_name;            // with the prefix save_pretrained writes
  std::vector<int64_t> hf_shape;  // as stored
  size_t tensor = 0;              // index into ModelDesc::tensors
  int64_t first_row = 0;          // fills our rows [first_row, first_row + its rows) (OPT's q, k, v)
  bool transposed = false;        // GPT-2 Conv1D: stored (in, out), ours (out, in)
};

// Every Hugging Face tensor of `model` (its family's names), covering each of our elements once.
// Throws InputError when the family cannot name the model (GPT-2 has no project_in/project_out).
std::vector<HfTensor> hf_tensors(const ModelDesc& model);

// A name as found in a file, with the family's prefix added when it is missing.
std::string canonical_hf_name(ModelFamily family, std::string_view name);

// The model's weights from a Hugging Face safetensors file: a flat model-order float vector
// (total_params). Throws InputError naming the file and the tensor: a missing tensor, a wrong shape
// (both shapes given), a tensor this model does not have, a name given twice (with and without the
// prefix), a dtype other than F32/BF16/F16, or a tied model's lm_head.weight that differs from the
// token embedding.
std::vector<float> load_hf_weights(const ModelDesc& model, const std::filesystem::path& path);

// Writes `flat` (total_params, model order) as a Hugging Face safetensors file in `dtype` (F32, BF16
// or F16), with the names and layouts save_pretrained writes (a tied head is not written).
void export_hf_weights(const ModelDesc& model, std::span<const float> flat, const std::filesystem::path& path,
                       DType dtype);
// The same, one of our tensors at a time: tensor_values(t) returns ModelDesc::tensors[t]'s values
// (numel, row-major), asked for in file order (once per tensor, or once for OPT's q, k, v together),
// so only one tensor is in memory (`twinflow export` reads them from a checkpoint).
using TensorValues = std::function<std::vector<float>(size_t tensor)>;
void export_hf_weights(const ModelDesc& model, const TensorValues& tensor_values, const std::filesystem::path& path,
                       DType dtype);

}  // namespace tf::core
