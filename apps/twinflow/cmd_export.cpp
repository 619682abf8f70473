// `twinflow export CKPT --safetensors OUT [--dtype bf16|fp32]`: a checkpoint's fp32 master weights as a
// Hugging Face safetensors file with GPT-2 or OPT names (core/hf_names.h), read a tensor at a time and
// checksummed as they are read (docs/ARCHITECTURE.md, "Checkpoints").
#include <iostream>
#include <string>
#include <vector>

#include "apps/twinflow/cli.h"
#include "apps/twinflow/commands.h"
#include "core/checkpoint.h"
#include "core/error.h"
#include "core/hf_names.h"
#include "core/optim/dtype.h"

namespace tf::app {

namespace {

CommandOptions export_options() {
  CommandOptions o(
      "twinflow export CKPT --safetensors OUT [options]: a checkpoint's master weights as a Hugging Face safetensors "
      "file (GPT-2 or OPT names; transformers' from_pretrained loads it with the model's config)");
  auto add = o.desc.add_options();
  add("help,h", "show this help");
  add("checkpoint", po::value<std::string>(),
      "a checkpoint (step-N/), or a directory of them (its newest complete one)");
  add("safetensors", po::value<std::string>(), "the file to write");
  add("dtype", po::value<std::string>()->default_value("bf16"), "bf16 | fp32: the type of the written weights");
  o.pos.add("checkpoint", 1);
  return o;
}

}  // namespace

int cmd_export(const std::vector<std::string>& args) {
  const std::optional<po::variables_map> parsed = parse_command(args, export_options(), "");
  if (!parsed) return kExitOk;
  const po::variables_map& vm = *parsed;
  if (!vm.count("checkpoint"))
    throw core::InputError("export: name a checkpoint (twinflow export CKPT --safetensors OUT)");
  if (!vm.count("safetensors")) throw core::InputError("export: --safetensors OUT is required");
  const core::DType dtype = core::parse_dtype(vm["dtype"].as<std::string>(), "--dtype");
  if (dtype != core::DType::kBF16 && dtype != core::DType::kF32)
    throw core::InputError("--dtype " + vm["dtype"].as<std::string>() + ": allowed bf16, fp32");
  std::vector<std::string> skipped;
  const std::filesystem::path dir = core::resolve_checkpoint(vm["checkpoint"].as<std::string>(), &skipped);
  for (const std::string& s : skipped) std::cerr << "warning: skipped " << s << "\n";
  const core::CheckpointReader reader(dir);
  const core::ModelDesc& model = reader.model();
  if (model.spec.type != core::ModelType::kDecoder)
    throw core::InputError("export: " + dir.string() + " holds model '" + model.spec.name +
                           "', an MLP; Hugging Face names exist for GPT-2 and OPT decoders only");
  const std::string out = vm["safetensors"].as<std::string>();
  core::export_hf_weights(
      model, [&](size_t t) { return reader.read_tensor(model.tensors[t].name, "master"); }, out, dtype);
  std::cout << "export: " << dir.string() << " (step " << reader.meta().step << ", model " << model.spec.name << ", "
            << model.total_params << " parameters) -> " << out << " (" << core::dtype_name(dtype) << ", "
            << double(reader.bytes_read()) / 1e6 << " MB of master weights read and checksummed)\n";
  return kExitOk;
}

}  // namespace tf::app
