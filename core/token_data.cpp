// Training tokens: the .bin reader, the sampler and the built-in stream (see token_data.h).
#include "core/token_data.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/model.h"
#include "core/random.h"

namespace tf::core {

namespace {

static_assert(std::endian::native == std::endian::little, "the token and header readers assume a little-endian host");

// Separates the built-in stream's draws from the file sampler's start draws.
constexpr uint64_t kStreamTag = 0x5EED'57E4'0000'0001ull;

int32_t header_int(std::span<const std::byte> bytes, int64_t index) {
  int32_t v = 0;
  std::memcpy(&v, bytes.data() + 4 * index, 4);
  return v;
}

std::string at(const std::string& what, const std::string& path, int64_t byte) {
  return what + ": '" + path + "': byte " + std::to_string(byte) + ": ";
}

void check_shape_args(int64_t vocab, int64_t seq) {
  if (vocab < 1 || vocab > kMaxVocab)
    throw InputError("token data: vocab " + std::to_string(vocab) + " is out of range; allowed [1, " +
                     std::to_string(kMaxVocab) + "]");
  if (seq < 1 || seq > kMaxSeq)
    throw InputError("token data: seq " + std::to_string(seq) + " is out of range; allowed [1, " +
                     std::to_string(kMaxSeq) + "]");
}

// The first id >= vocab among ids[0, n), or n.
int64_t first_bad_id(const uint16_t* ids, int64_t n, int64_t vocab) {
  if (vocab > 65535) return n;  // every uint16 id is valid
  const uint16_t limit = uint16_t(vocab);
  constexpr int64_t kChunk = int64_t(1) << 16;
  for (int64_t b = 0; b < n; b += kChunk) {
    const int64_t e = std::min(n, b + kChunk);
    uint16_t hi = 0;
    for (int64_t i = b; i < e; ++i) hi = std::max(hi, ids[i]);  // vectorizes; the slow path runs once
    if (hi >= limit)
      for (int64_t i = b; i < e; ++i)
        if (ids[i] >= limit) return i;
  }
  return n;
}

// The built-in stream's successor of x, chosen by the random `bits` (see token_data.h).
int32_t stream_successor(int64_t x, uint64_t bits, int64_t n) {
  const int64_t j = (bits & 1) ? 0 : (bits & 2) ? 1 : (bits & 4) ? 2 : 3;  // 1/2, 1/4, 1/8, 1/8
  return int32_t((5 * x + 1 + j * (n / 4)) % n);
}

}  // namespace

TokenFile::TokenFile(const std::filesystem::path& path, int64_t vocab, int64_t seq, std::string_view what)
    : map_(path, what, kMaxTokenFileBytes) {
  check_shape_args(vocab, seq);
  const std::string w(what), p = map_.path();
  const std::span<const std::byte> bytes = map_.bytes();
  const int64_t size = int64_t(bytes.size());
  if (size < kTokenHeaderBytes)
    throw InputError(at(w, p, 0) + "the file has " + std::to_string(size) + " bytes, fewer than the " +
                     std::to_string(kTokenHeaderBytes) + "-byte header of a llm.c/nanoGPT .bin token file");
  if (const int32_t magic = header_int(bytes, 0); magic != kTokenFileMagic)
    throw InputError(at(w, p, 0) + "magic " + std::to_string(magic) + ", expected " + std::to_string(kTokenFileMagic) +
                     " (a llm.c/nanoGPT .bin token file)");
  if (const int32_t version = header_int(bytes, 1); version != kTokenFileVersion)
    throw InputError(at(w, p, 4) + "version " + std::to_string(version) + ", expected " +
                     std::to_string(kTokenFileVersion) + " (uint16 GPT-2 token ids)");
  const int32_t count = header_int(bytes, 2);
  if (count < 1) throw InputError(at(w, p, 8) + "token count " + std::to_string(count) + "; expected >= 1");
  const int64_t expect = kTokenHeaderBytes + 2 * int64_t(count);
  if (size != expect)
    throw InputError(at(w, p, 8) + "the header says " + std::to_string(count) + " tokens (" + std::to_string(expect) +
                     " bytes), the file has " + std::to_string(size) +
                     " bytes; the file is truncated or not this format");
  if (count < seq + 1)
    throw InputError(at(w, p, 8) + std::to_string(count) + " tokens; a sample of seq " + std::to_string(seq) +
                     " needs at least " + std::to_string(seq + 1) + " (seq inputs and one more target)");
  ids_ = reinterpret_cast<const uint16_t*>(bytes.data() + kTokenHeaderBytes);
  tokens_ = count;
  if (const int64_t bad = first_bad_id(ids_, tokens_, vocab); bad < tokens_)
    throw InputError(at(w, p, kTokenHeaderBytes + 2 * bad) + "token " + std::to_string(bad) + " is id " +
                     std::to_string(ids_[bad]) + ", not below the vocabulary size " + std::to_string(vocab) +
                     "; the file was tokenized for another vocabulary");
}

int32_t TokenFile::token(int64_t i) const { return int32_t(ids_[i]); }

int64_t sample_start(uint64_t seed, int64_t step, int64_t micro_shard, int64_t sample, int64_t tokens, int64_t seq) {
  if (tokens <= seq)
    throw InputError("sample_start: " + std::to_string(tokens) + " tokens cannot hold a sample of seq " +
                     std::to_string(seq) + " and its target");
  const uint64_t key = mix(seed, uint64_t(step), uint64_t(micro_shard), uint64_t(sample));
  return int64_t(splitmix64(key) % uint64_t(tokens - seq));
}

TokenSource::TokenSource(int64_t vocab, int64_t seq) : seq_(seq), builtin_ids_(std::min(kBuiltinStreamIds, vocab)) {
  check_shape_args(vocab, seq);
  if (vocab < 4)
    throw InputError("data: the built-in token stream needs a vocabulary of at least 4 ids, the model has " +
                     std::to_string(vocab) + "; give a token file (data: {train: FILE})");
}

TokenSource::TokenSource(const std::filesystem::path& path, int64_t vocab, int64_t seq, std::string_view what)
    : file_(std::in_place, path, vocab, seq, what), seq_(seq) {}

void TokenSource::sample(uint64_t seed, int64_t step, int64_t micro_shard, int64_t sample, std::span<int32_t> inputs,
                         std::span<int32_t> targets) const {
  if (int64_t(inputs.size()) != seq_ || int64_t(targets.size()) != seq_)
    throw InputError("TokenSource::sample: inputs and targets need seq = " + std::to_string(seq_) +
                     " entries each, got " + std::to_string(inputs.size()) + " and " + std::to_string(targets.size()));
  if (file_) {
    const int64_t start = sample_start(seed, step, micro_shard, sample, file_->tokens(), seq_);
    for (int64_t t = 0; t < seq_; ++t) {
      inputs[size_t(t)] = file_->token(start + t);
      targets[size_t(t)] = file_->token(start + t + 1);
    }
    return;
  }
  const uint64_t key = mix(mix(seed, uint64_t(step), uint64_t(micro_shard), uint64_t(sample)), kStreamTag);
  const int64_t n = builtin_ids_;
  int32_t x = int32_t(splitmix64(mix(key, 0)) % uint64_t(n));
  for (int64_t t = 0; t < seq_; ++t) {
    inputs[size_t(t)] = x;
    x = stream_successor(x, splitmix64(mix(key, uint64_t(t + 1))), n);
    targets[size_t(t)] = x;
  }
}

void TokenSource::micro_batch(uint64_t seed, int64_t step, int64_t micro_shard, int64_t batch,
                              std::span<int32_t> inputs, std::span<int32_t> targets) const {
  if (batch < 1 || int64_t(inputs.size()) != batch * seq_ || int64_t(targets.size()) != batch * seq_)
    throw InputError("TokenSource::micro_batch: a batch of " + std::to_string(batch) + " needs inputs and targets of " +
                     std::to_string(batch * seq_) + " entries, got " + std::to_string(inputs.size()) + " and " +
                     std::to_string(targets.size()));
  for (int64_t b = 0; b < batch; ++b)
    sample(seed, step, micro_shard, b, inputs.subspan(size_t(b * seq_), size_t(seq_)),
           targets.subspan(size_t(b * seq_), size_t(seq_)));
}

TokenSource open_token_source(const std::filesystem::path& file, int64_t vocab, int64_t seq) {
  return file.empty() ? TokenSource(vocab, seq) : TokenSource(file, vocab, seq);
}

}  // namespace tf::core
