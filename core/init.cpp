// Initial decoder weights: the per-tensor rule and the counter-based, multithreaded fill (see init.h).
#include "core/init.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/optim/dtype.h"
#include "core/random.h"

namespace tf::core {

namespace {

// Separates the initialisation's draws from other users of the same seed (data sampling).
constexpr uint64_t kInitStream = 0x1A17'0000'0000'0001ull;
// A thread gets at least this many elements.
constexpr int64_t kMinElementsPerThread = int64_t(1) << 16;

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Fills out[0, n) with elements [first, first + n), which lie inside `tensors` (ascending offsets), and
// lp[0, n) with their bf16 roundings unless lp is null.
void fill_range(const ModelDesc& model, const std::vector<TensorInit>& rules, uint64_t seed, int64_t first, float* out,
                uint16_t* lp, int64_t n) {
  const auto& ts = model.tensors;
  // the tensor holding `first`: the last whose offset is <= first
  size_t t = size_t(std::upper_bound(ts.begin(), ts.end(), first,
                                     [](int64_t v, const TensorDesc& d) { return v < d.offset; }) -
                    ts.begin()) -
             1;
  for (int64_t i = 0; i < n;) {
    const TensorDesc& td = ts[t];
    const int64_t end = std::min(first + n, td.offset + td.numel);
    const TensorInit& r = rules[t];
    for (int64_t e = first + i; e < end; ++e, ++i) {
      out[i] = r.normal ? float(r.std * init_standard_normal(seed, e)) : float(r.value);
      if (lp) lp[i] = f32_to_bf16(out[i]);
    }
    ++t;
  }
}

}  // namespace

TensorInit tensor_init(const ModelDesc& model, const TensorDesc& tensor) {
  if (model.spec.type != ModelType::kDecoder)
    throw InputError("init: model '" + model.spec.name + "' is not a decoder; the initial weights of docs/decoder.md " +
                     "are defined for decoders only");
  const TensorDesc* own = model.find_tensor(tensor.name);
  if (own == nullptr || own->offset != tensor.offset || own->numel != tensor.numel)
    throw InputError("init: tensor '" + tensor.name + "' is not a tensor of model '" + model.spec.name + "'");
  const std::string_view n = tensor.name;
  if (ends_with(n, "ln1.weight") || ends_with(n, "ln2.weight") || n == "final_ln.weight") return {false, 0, 1};
  if (ends_with(n, ".bias")) return {false, 0, 0};
  if (ends_with(n, "attn.out.weight") || ends_with(n, "mlp.fc2.weight"))
    return {true, kInitStd / std::sqrt(2.0 * double(model.spec.decoder.layers)), 0};
  return {true, kInitStd, 0};
}

double init_standard_normal(uint64_t seed, int64_t element) {
  const uint64_t key = mix(seed, kInitStream);
  const double u1 = uniform_open0(splitmix64(mix(key, 2 * uint64_t(element))));
  const double u2 = uniform_open0(splitmix64(mix(key, 2 * uint64_t(element) + 1)));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

void init_weights(const ModelDesc& model, uint64_t seed, int64_t first, std::span<float> out, int threads) {
  init_weights(model, seed, first, out, {}, threads);
}

void init_weights(const ModelDesc& model, uint64_t seed, int64_t first, std::span<float> out, std::span<uint16_t> lp,
                  int threads) {
  const int64_t n = int64_t(out.size());
  if (!lp.empty() && lp.size() != out.size())
    throw InputError("init: " + std::to_string(lp.size()) + " bf16 outputs for " + std::to_string(out.size()) +
                     " values; pass as many of each (or no bf16 output)");
  if (first < 0 || first > model.total_params || n > model.total_params - first)
    throw InputError("init: elements [" + std::to_string(first) + ", " + std::to_string(first + n) +
                     ") are outside model '" + model.spec.name + "''s " + std::to_string(model.total_params) +
                     " parameters; pass a range inside [0, total parameters)");
  if (n == 0) return;
  std::vector<TensorInit> rules;
  rules.reserve(model.tensors.size());
  for (const TensorDesc& t : model.tensors) rules.push_back(tensor_init(model, t));
  if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  const int64_t parts = std::clamp<int64_t>(n / kMinElementsPerThread, 1, threads);
  std::vector<std::jthread> pool;
  pool.reserve(size_t(parts - 1));
  auto part = [&](int64_t p) {
    const int64_t b = n * p / parts, e = n * (p + 1) / parts;
    fill_range(model, rules, seed, first + b, out.data() + b, lp.empty() ? nullptr : lp.data() + b, e - b);
  };
  try {
    for (int64_t p = 1; p < parts; ++p) pool.emplace_back(part, p);
  } catch (const std::system_error& e) {
    throw RuntimeFailure(std::string("init: cannot start a thread: ") + e.what());
  }
  part(0);
}

}  // namespace tf::core
