// Training tokens (docs/decoder.md, "Data"): the llm.c/nanoGPT .bin token file, the sampler of
// (seed, step, micro-shard, sample), and the built-in deterministic stream used without a file.
//
// The built-in stream: a Markov chain over n = min(4096, V) ids. A sample's first token is uniform
// over the n ids; each next token follows the previous x as one of four successors
//   succ(x, j) = (5 x + 1 + j * (n / 4)) mod n,   j = 0, 1, 2, 3 with probability 1/2, 1/4, 1/8, 1/8
// (distinct for n >= 4). The draws are counter-based: sample i of micro-shard k at step t has the key
// K = mix(mix(seed, t, k, i), tag); its first token is splitmix64(mix(K, 0)) mod n and the choice j
// after position p comes from splitmix64(mix(K, p + 1)), so a sample depends on nothing else. The
// chain's conditional entropy is 1.75 bits =
// 1.213 nats per target (kBuiltinStreamEntropyNats): a model that learns the transition table (a
// bigram suffices) reaches that loss, against ln n (8.32 nats at n = 4096) for a uniform guess.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/mapped_file.h"

namespace tf::core {

// The .bin format: 256 little-endian int32 [magic, version, token count, 0...], then count uint16 ids.
inline constexpr int32_t kTokenFileMagic = 20240520;
inline constexpr int32_t kTokenFileVersion = 1;
inline constexpr int64_t kTokenHeaderBytes = 256 * 4;
// The header's count is an int32, so a file holds at most 2^31 - 1 tokens.
inline constexpr uint64_t kMaxTokenFileBytes = uint64_t(kTokenHeaderBytes) + 2 * uint64_t(INT32_MAX);

inline constexpr int64_t kBuiltinStreamIds = 4096;
inline constexpr double kBuiltinStreamEntropyNats = 1.75 * 0.69314718055994530942;  // 1.75 bits

// A validated token file: header, size, and every id < vocab, checked when it is opened.
class TokenFile {
 public:
  // Throws InputError naming the file, the byte offset and what is wrong: missing, not a regular
  // file, shorter than the header, bad magic or version, a count that disagrees with the size, an id
  // >= vocab, or fewer than seq + 1 tokens (a sample needs seq inputs and the next token's target).
  // `what` names the file's role ("data.train").
  TokenFile(const std::filesystem::path& path, int64_t vocab, int64_t seq, std::string_view what = "data.train");
  int64_t tokens() const { return tokens_; }  // N
  int32_t token(int64_t i) const;             // id i, for i in [0, tokens())
  const std::string& path() const { return map_.path(); }

 private:
  MappedFile map_;
  const uint16_t* ids_ = nullptr;  // (N) uint16 little-endian, inside the map
  int64_t tokens_ = 0;
};

// Where sample `sample` of global micro-shard `micro_shard` at step `step` starts in a file of
// `tokens` tokens: splitmix64(mix(seed, step, micro_shard, sample)) mod (tokens - seq).
int64_t sample_start(uint64_t seed, int64_t step, int64_t micro_shard, int64_t sample, int64_t tokens, int64_t seq);

// The global micro-shard that rank `rank` computes at micro-step `micro_step` of `world` ranks:
// micro_step * world + rank (the functional simulator's batch-invariant order).
inline int64_t global_micro_shard(int64_t rank, int64_t micro_step, int64_t world) { return micro_step * world + rank; }

// The training data: a token file, or the built-in stream when there is none. Samples depend on
// (seed, step, micro-shard, sample) only, never on the world size.
class TokenSource {
 public:
  // The built-in stream over min(4096, vocab) ids; vocab >= 4 (throws InputError otherwise).
  TokenSource(int64_t vocab, int64_t seq);
  // The token file at `path` (validated now; see TokenFile).
  TokenSource(const std::filesystem::path& path, int64_t vocab, int64_t seq, std::string_view what = "data.train");

  // One sample: inputs (seq) int32 = tokens [start, start + seq), targets (seq) int32 shifted by one.
  void sample(uint64_t seed, int64_t step, int64_t micro_shard, int64_t sample, std::span<int32_t> inputs,
              std::span<int32_t> targets) const;
  // Samples 0 .. batch-1 of a micro-shard, row b * seq + t: inputs, targets (batch * seq) int32.
  void micro_batch(uint64_t seed, int64_t step, int64_t micro_shard, int64_t batch, std::span<int32_t> inputs,
                   std::span<int32_t> targets) const;
  int64_t seq() const { return seq_; }
  bool builtin() const { return !file_.has_value(); }
  int64_t builtin_ids() const { return builtin_ids_; }  // n of the built-in stream

 private:
  std::optional<TokenFile> file_;
  int64_t seq_ = 0;
  int64_t builtin_ids_ = 0;
};

// The token file at `file`, or the built-in stream when `file` is empty (a scenario's data.train, as
// core::RunSettings::data_train carries it).
TokenSource open_token_source(const std::filesystem::path& file, int64_t vocab, int64_t seq);

}  // namespace tf::core
