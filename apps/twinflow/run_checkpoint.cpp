// `twinflow run`'s checkpoints: resume, background saves, the stop vote.
#include "apps/twinflow/run_checkpoint.h"

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include "apps/twinflow/cli.h"
#include "core/error.h"
#include "core/training_checkpoint.h"

namespace tf::app {

RunCheckpoints::RunCheckpoints(backend::cuda::Engine& engine, const core::RunSettings& s, RunCheckpointOptions options)
    : engine_(engine), o_(std::move(options)) {
  const core::Partition& part = engine_.partition();
  const core::RankShard& shard = part.ranks[size_t(o_.rank)];
  const int64_t micro_shards = int64_t(s.world) * s.step.grad_accum;  // core::global_micro_shard's index space
  record_ = {s.seed, micro_shards, {s.world, s.partition.stage, o_.ratio}, o_.texts.scenario, o_.texts.ds_config};
  const std::vector<core::ShardSpan> spans = core::shard_spans(part, shard.pieces);
  if (o_.resume) {
    const auto t0 = std::chrono::steady_clock::now();
    const core::CheckpointReader reader(*o_.resume);
    const core::TrainingPosition pos =
        core::check_resume(reader, {&s.model, s.policy.kind, s.seed, micro_shards, o_.total_steps, s.loss_scaler});
    engine_.restore_optimizer(reader.read(spans, shard.elems, reader.arrays()), pos);
    first_step_ = pos.step + 1;
    const double load_s = seconds_since(t0);
    if (o_.rank == 0)
      std::cerr << "resumed from " << reader.dir().string() << " at step " << pos.step << ": "
                << double(reader.bytes_read()) / 1e9 << " GB (this rank) read and checked in " << load_s << " s ("
                << (load_s > 0 ? double(reader.bytes_read()) / 1e9 / load_s : 0.0) << " GB/s)\n";
  }
  if (o_.config.dir.empty()) return;
  core::CheckpointWriterOptions wo;
  wo.root = o_.config.dir;
  wo.keep = o_.config.keep;
  wo.rank = o_.rank;
  wo.world = s.world;
  wo.barrier = o_.barrier;
  wo.staging = backend::cuda::pinned_host_allocator();
  writer_ = std::make_unique<core::CheckpointWriter>(s.model, s.policy.kind, spans, shard.elems, std::move(wo));
}

RunCheckpoints::~RunCheckpoints() {
  try {
    report_pending();
  } catch (const std::exception& e) {
    std::cerr << "warning: rank " << o_.rank << ": the last background checkpoint failed: " << e.what() << "\n";
  }
}

bool RunCheckpoints::after_step(int64_t step) {
  const bool last = step >= o_.total_steps;
  bool stop = !last && o_.signals && o_.signals->requested();
  if (!last && o_.signals && o_.continue_vote) stop = !o_.continue_vote(!stop);  // every rank after the same step
  if (writer_ && (stop || core::checkpoint_due(o_.config.every_steps, step, o_.total_steps))) save(step, stop || last);
  if (stop && o_.rank == 0)
    std::cerr << "stopped after step " << step << " on a signal"
              << (writer_ ? "; continue with --resume latest\n" : " (no checkpoint.dir: nothing saved)\n");
  return stop;
}

// The stall is what training waits for: the previous save (if still writing) and the snapshot; the two
// are reported apart, since the first only means saves come faster than the disk writes them.
void RunCheckpoints::save(int64_t step, bool synchronous) {
  const auto t0 = std::chrono::steady_clock::now();
  report_pending();
  const double wait_s = seconds_since(t0);
  const auto t1 = std::chrono::steady_clock::now();
  const std::vector<std::span<float>> staging = writer_->begin_snapshot();
  engine_.snapshot_optimizer(staging);
  const double stall_s = seconds_since(t1);
  const core::TrainingPosition pos = engine_.position();
  if (pos.step != step)
    throw core::RuntimeFailure("checkpoint: the engine is at step " + std::to_string(pos.step) + ", not step " +
                               std::to_string(step) + " (a save between steps only)");
  writer_->save_async(core::checkpoint_meta(pos, record_));
  pending_ = true;
  pending_stall_s_ = stall_s;
  pending_wait_s_ = wait_s;
  if (synchronous) report_pending();
}

// Waits for the save in flight and prints its figures (rank 0): with the snapshot's stall against a
// synchronous save (snapshot + write + commit).
void RunCheckpoints::report_pending() {
  if (!pending_) return;
  pending_ = false;
  const core::SaveStats st = writer_->wait();
  if (o_.rank != 0) return;
  const double sync_s = pending_stall_s_ + st.total_s;
  char b[128];  // fixed notation: bench/device/issue17-ckpt.sh parses the line
  std::snprintf(b, sizeof b, " (%.2f%% of a synchronous save's %.3f s)",
                sync_s > 0 ? 100.0 * pending_stall_s_ / sync_s : 0.0, sync_s);
  std::cerr << save_summary(st, pending_stall_s_) << b;
  if (pending_wait_s_ >= 1e-3)
    std::fprintf(stderr, "; before it, %.1f ms waiting for the previous save still writing", 1e3 * pending_wait_s_);
  std::cerr << "\n";
  if (pending_wait_s_ >= 0.01 && !warned_cadence_) {
    warned_cadence_ = true;
    std::cerr << "warning: checkpoint.every_steps " << o_.config.every_steps
              << ": a save began before the previous one had finished writing, and training waited for it; "
                 "raise checkpoint.every_steps so that the steps between saves outlast one save's write\n";
  }
}

}  // namespace tf::app
