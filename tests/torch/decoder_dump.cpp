// Writes one decoder micro-batch and the double reference's loss and gradients as JSON, for the
// torch cross-checks (tests/torch/decoder_vs_torch.py, decoder_vs_transformers.py).
// Usage: tf_decoder_dump PRESET SEQ BATCH SEED tied|untied [HF_WEIGHTS GRAD_OUT]
// With HF_WEIGHTS (a Hugging Face safetensors file) the weights are loaded from it (load_hf_weights)
// instead of drawn, and the gradients are also written to GRAD_OUT under Hugging Face names in F32.
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/reference/decoder_ref.h"
#include "core/error.h"
#include "core/hf_names.h"
#include "core/init.h"
#include "core/model.h"
#include "core/token_data.h"

int main(int argc, char** argv) {
  using namespace tf;
  if (argc != 6 && argc != 8) {
    std::cerr << "usage: tf_decoder_dump PRESET SEQ BATCH SEED tied|untied [HF_WEIGHTS GRAD_OUT]\n";
    return 2;
  }
  try {
    core::ModelSpec spec = core::model_preset(argv[1]);
    spec.decoder.seq = std::atoll(argv[2]);
    spec.decoder.tied_embeddings = std::string(argv[5]) == "tied";
    const core::ModelDesc m = core::describe_model(spec);
    const int64_t batch = std::atoll(argv[3]), s = m.spec.decoder.seq;
    const uint64_t seed = std::strtoull(argv[4], nullptr, 10);
    // GPT-2's initial weights plus normal(0, 0.1) on every element, so that biases and LayerNorm
    // weights are not the constants 0 and 1 and every path carries a signal
    std::vector<float> init(static_cast<size_t>(m.total_params));  // (total_params) fp32
    core::init_weights(m, seed, 0, init);
    std::vector<double> w(init.size());  // (total_params) fp64, model order
    for (size_t i = 0; i < w.size(); ++i) w[i] = init[i] + 0.1 * core::init_standard_normal(seed + 1, int64_t(i));
    if (argc == 8) {
      const std::vector<float> hf = core::load_hf_weights(m, argv[6]);  // (total_params) fp32
      w.assign(hf.begin(), hf.end());
    }
    std::vector<int32_t> tokens(static_cast<size_t>(batch * s)), targets(tokens.size());  // (B, s) int32
    core::TokenSource(m.spec.decoder.vocab, s).micro_batch(seed, 0, 0, batch, tokens, targets);
    const auto r = backend::reference::decoder_forward_backward<double>(m, w, {tokens, targets});
    if (argc == 8)
      core::export_hf_weights(m, std::vector<float>(r.grad.begin(), r.grad.end()), argv[7], core::DType::kF32);

    const core::DecoderShape& d = m.spec.decoder;
    nlohmann::json j;
    j["config"] = {{"layers", d.layers},
                   {"hidden", d.hidden},
                   {"heads", d.heads},
                   {"ffn", d.ffn},
                   {"vocab", d.vocab},
                   {"seq", d.seq},
                   {"pos_offset", d.pos_offset},
                   {"pad_token", d.pad_token},
                   {"embed_dim", core::embed_width(d)},
                   {"pre_ln", d.pre_ln},
                   {"tied", d.tied_embeddings},
                   {"activation", core::activation_name(d.activation)},
                   {"ln_eps", d.ln_eps}};
    nlohmann::json tensors = nlohmann::json::array();
    for (const core::TensorDesc& t : m.tensors)
      tensors.push_back({{"name", t.name}, {"shape", t.shape}, {"offset", t.offset}});
    j["tensors"] = tensors;
    j["batch"] = batch;
    j["weights"] = w;
    j["tokens"] = tokens;
    j["targets"] = targets;
    j["loss"] = r.loss;
    j["grad"] = r.grad;
    std::cout << j.dump() << "\n";
  } catch (const core::InputError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
