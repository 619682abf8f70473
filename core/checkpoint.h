// The checkpoint store: optimizer state saved by model tensor and element range (never by rank), written
// atomically (step-N.tmp/ -> step-N/) by every rank in the background, and read back for any layout.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/io_hooks.h"
#include "core/model.h"
#include "core/optim/optimizer.h"
#include "core/partition.h"
#include "core/step_decision.h"

namespace tf::core {

// The manifest's format version this build writes; it reads versions 1..kCheckpointFormatVersion.
inline constexpr int kCheckpointFormatVersion = 1;

// Model-order elements [model_begin, model_begin + count) held at [offset, offset + count) of a rank's
// flat arrays. A rank's layout is a list of spans: they may cut tensors anywhere and need not be sorted.
struct ShardSpan {
  int64_t model_begin = 0;
  int64_t count = 0;
  int64_t offset = 0;
};

// The spans of `pieces` (a rank's shard pieces, or the GPU/CPU part of a Twin-Flow split) in an array
// that starts at shard offset `base` (0 for the whole shard; split.boundary for a CPU segment). Padding
// is left out; pieces adjacent in both the model and the array merge into one span.
std::vector<ShardSpan> shard_spans(const Partition& part, std::span<const ShardPiece> pieces, int64_t base = 0);

// The optimizer's fp32 arrays in checkpoint order: "master" then its states (torch.optim's names):
// AdamW/Adam exp_avg, exp_avg_sq; Adagrad sum; Lion exp_avg.
std::vector<std::string> checkpoint_arrays(OptimizerKind kind);

// Where the sampler stands: it draws (seed, step, micro-shard), so these are the data position.
struct DataPosition {
  uint64_t seed = 0;         // the sampler's seed
  int64_t next_step = 1;     // 1-based step whose batch is drawn next
  int64_t micro_shards = 0;  // the global batch's cut into micro-shards (the sampler's index space)
};

// The layout the checkpoint was written with (informational: any layout can load it).
struct WrittenLayout {
  int world = 1;
  int stage = 3;
  double ratio = 0;
};

// Everything besides the arrays that a resumed run needs to continue as if nothing happened.
struct CheckpointMeta {
  int64_t step = 0;            // training steps completed (the directory is step-<step>/)
  int64_t optimizer_step = 0;  // updates applied (skipped fp16 steps excluded): the next update is +1
  LossScaler loss_scaler;      // scale, growth window, minimum, clean-step counter
  DataPosition data;
  uint64_t seed = 0;  // the run's seed (initial weights, synthetic workload)
  WrittenLayout layout;
  std::string scenario_text;   // the scenario as given
  std::string ds_config_text;  // the resolved ds_config
};

// The save's phases are separated by a core::RankBarrier (core/io_hooks.h: an AND over ranks; this is
// its name here): directory ready, all shards durable, manifest committed.
using CheckpointBarrier = RankBarrier;

// Where the staging arrays live. The CUDA engine passes page-locked allocations so that its GPU
// segment's device-to-host copies run at full PCIe speed; both null: page-aligned heap.
struct HostAllocator {
  std::function<void*(size_t bytes)> allocate;
  std::function<void(void*)> release;
};

struct CheckpointWriterOptions {
  std::filesystem::path root;  // checkpoint.dir: holds step-N/ (created if missing)
  int keep = 0;                // complete checkpoints kept, the new one included; 0: all
  int rank = 0;
  int world = 1;
  CheckpointBarrier barrier;  // required when world > 1
  HostAllocator staging;
  size_t io_threads = 0;  // threads writing this rank's file (pwrite at precomputed offsets); 0: min(4, CPUs)
  FaultHook fault_hook;
};

// What one save did (the writing rank's figures).
struct SaveStats {
  std::filesystem::path dir;          // the committed step-N/
  int64_t data_bytes = 0;             // this rank's shard data
  double write_s = 0;                 // this rank's data + index written and fsynced
  double total_s = 0;                 // from save start to the commit seen by this rank
  std::vector<std::string> warnings;  // rank 0: old checkpoints it could not prune (the save itself succeeded)
};

// One rank's checkpoint writer. It owns staging arrays (one per optimizer array, `elems` fp32 each)
// that the caller fills at a step boundary (the engine: device-to-host copies of its GPU segment and
// a memcpy of its CPU segment); a background thread (nice 19, below the CPU optimizer's workers; with io_threads
// helpers) then writes them while training goes on. Save protocol (every rank, in the writer thread):
//   1. rank 0 refuses an existing step-N/, removes stale *.tmp, creates step-N.tmp/ and fsyncs root;
//      barrier;
//   2. each rank writes rank-R.data (raw little-endian fp32) and rank-R.index.json into step-N.tmp/,
//      fsyncs both and the directory; barrier;
//   3. rank 0 reads every index, checks that the ranks together cover every element of every array
//      exactly once, writes manifest.json LAST (files, sizes, XXH3 checksums), fsyncs it and the
//      directory, renames step-N.tmp/ to step-N/ (never replacing one), fsyncs root, then prunes to
//      `keep`; barrier.
// A kill at any moment leaves the previous checkpoints and at most a *.tmp that loaders ignore.
class CheckpointWriter {
 public:
  // Throws InputError for a bad layout (a span outside the model or the arrays, overlapping spans),
  // world > 1 without a barrier, or keep < 0.
  CheckpointWriter(const ModelDesc& model, OptimizerKind kind, std::vector<ShardSpan> spans, int64_t elems,
                   CheckpointWriterOptions options);
  ~CheckpointWriter();  // waits for a save in flight (an error it met is printed to stderr)
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  const std::vector<std::string>& arrays() const { return arrays_; }
  int64_t elems() const { return elems_; }

  // Waits for a save in flight (a second save waits for the first: they share these buffers) and
  // rethrows its error; then returns the staging arrays to fill: (arrays()) spans of (elems) fp32.
  std::vector<std::span<float>> begin_snapshot();
  // Copies `arrays` ((arrays()) spans of (elems) fp32) into the staging arrays: begin_snapshot + memcpy.
  void snapshot(std::span<const std::span<const float>> arrays);
  // Starts writing the filled staging arrays as step-<meta.step>/ in the background and returns.
  void save_async(const CheckpointMeta& meta);
  // save_async + wait.
  SaveStats save(const CheckpointMeta& meta);
  // Joins the writer; rethrows its InputError/RuntimeFailure. Stats of the last completed save.
  SaveStats wait();
  // A save is being written (false once it finished, before wait() is called).
  bool in_flight() const { return thread_.joinable() && !done_; }

 private:
  struct State;
  void run_save(const CheckpointMeta& meta);
  std::vector<std::string> arrays_;
  int64_t elems_ = 0;
  std::unique_ptr<State> state_;
  std::thread thread_;
  std::exception_ptr error_;
  SaveStats stats_;
  bool filled_ = false;
  std::atomic<bool> done_{true};
};

// A complete checkpoint: step-N/ whose manifest parses, passes its checksum, has a readable format
// version, and whose listed files all exist with their sizes.
struct CheckpointListing {
  std::filesystem::path dir;
  int64_t step = 0;
};
// Complete checkpoints under `root`, oldest first; *.tmp is ignored. Every step-N/ left out is
// described in `skipped` (why) when given. Throws InputError if root is missing or unreadable.
std::vector<CheckpointListing> list_checkpoints(const std::filesystem::path& root,
                                                std::vector<std::string>* skipped = nullptr);
// The newest complete checkpoint under `root`, if any.
std::optional<CheckpointListing> latest_checkpoint(const std::filesystem::path& root,
                                                   std::vector<std::string>* skipped = nullptr);
// `--resume PATH`: a checkpoint (a directory with manifest.json) or a root of them (its newest complete
// one). Throws InputError naming PATH when it holds no complete checkpoint.
std::filesystem::path resolve_checkpoint(const std::filesystem::path& path,
                                         std::vector<std::string>* skipped = nullptr);

// Reads a checkpoint for any layout. Construction reads and checks the manifest (checksum, format
// version, model description), stats every file it lists (sizes) and reads every rank's index
// (checksummed); read() then fetches only the entries a layout needs and verifies each one's checksum.
// Bad checkpoints throw InputError naming the file, the tensor and what to do; I/O failures throw
// RuntimeFailure. Nothing is handed out unless it all verified.
class CheckpointReader {
 public:
  // io_threads: threads reading entries (0: min(4, CPUs)).
  explicit CheckpointReader(std::filesystem::path dir, FaultHook fault_hook = {}, size_t io_threads = 0);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const std::filesystem::path& dir() const;
  const CheckpointMeta& meta() const;
  OptimizerKind optimizer() const;
  const std::vector<std::string>& arrays() const;
  // The model as the manifest describes it (rebuilt with this build's describe_model).
  const ModelDesc& model() const;

  // InputError naming what differs (a shape field, the tensor count, a tensor's name or shape).
  void expect_model(const ModelDesc& run_model) const;
  // InputError unless the checkpoint was written with `kind`.
  void expect_optimizer(OptimizerKind kind) const;

  // Assembles `arrays` over a layout: (arrays.size()) arrays of (elems) fp32; positions no span names
  // are 0. InputError for a span outside the model or the arrays, an array the checkpoint lacks, or a
  // range no file covers.
  std::vector<std::vector<float>> read(std::span<const ShardSpan> spans, int64_t elems,
                                       std::span<const std::string> arrays) const;
  // One whole tensor of one array: (numel) fp32 (for export).
  std::vector<float> read_tensor(std::string_view tensor, std::string_view array) const;
  // Reads every file in full: the manifest's whole-file checksums and every entry's checksum.
  void verify_all() const;
  // Data bytes read so far (read_tensor, read, verify_all).
  int64_t bytes_read() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tf::core
