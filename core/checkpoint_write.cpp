// The checkpoint writer: staging arrays, the background save, and its three phases (prepare, write,
// commit) separated by the ranks' barrier.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <tuple>

#include "core/checkpoint.h"
#include "core/checkpoint_format.h"
#include "core/checkpoint_io.h"
#include "core/checksum.h"
#include "core/error.h"
#include "core/thread_priority.h"

namespace tf::core {

namespace fs = std::filesystem;
using ckpt::IndexEntry;
using ckpt::ShardIndex;

static_assert(std::endian::native == std::endian::little, "checkpoint data files hold little-endian fp32 as in memory");

namespace {

constexpr const char* kWriteAdvice = "choose a checkpoint.dir you can write, or fix its permissions";

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One staging array: (elems) fp32 from the caller's allocator or page-aligned heap, touched once so
// the first snapshot does not pay page faults.
class HostBuffer {
 public:
  HostBuffer(int64_t elems, const HostAllocator& alloc) : bytes_(size_t(elems) * 4), release_(alloc.release) {
    if (alloc.allocate) {
      data_ = static_cast<float*>(alloc.allocate(bytes_));
    } else {
      data_ = static_cast<float*>(std::aligned_alloc(4096, (bytes_ + 4095) / 4096 * 4096));
      release_ = [](void* p) { std::free(p); };
    }
    if (!data_ && bytes_)
      throw RuntimeFailure("checkpoint: cannot allocate " + std::to_string(bytes_) + " bytes of staging memory");
    if (bytes_) std::memset(data_, 0, bytes_);
  }
  ~HostBuffer() {
    if (data_ && release_) release_(data_);
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  float* data() const { return data_; }

 private:
  size_t bytes_ = 0;
  float* data_ = nullptr;
  std::function<void(void*)> release_;
};

// Copies with up to 8 threads, 64 MiB each at least (the snapshot is the training stall).
void copy_parallel(float* dst, const float* src, size_t n) {
  constexpr size_t kBlock = size_t(16) << 20;  // elements (64 MiB)
  const size_t blocks = (n + kBlock - 1) / kBlock;
  const size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 8);
  ckpt::parallel_for(blocks, threads, [&](size_t b, size_t) {
    const size_t begin = b * kBlock, end = std::min(n, begin + kBlock);
    std::memcpy(dst + begin, src + begin, (end - begin) * 4);
  });
}

}  // namespace

struct CheckpointWriter::State {
  State(const ModelDesc& model, OptimizerKind k, std::vector<ShardSpan> s, CheckpointWriterOptions o)
      : tensors(model),
        model_desc(ckpt::describe_model_json(model)),
        kind(k),
        spans(std::move(s)),
        opt(std::move(o)),
        fs(opt.fault_hook, kWriteAdvice) {}
  ckpt::TensorTable tensors;
  nlohmann::json model_desc;
  OptimizerKind kind;
  std::vector<ShardSpan> spans;
  CheckpointWriterOptions opt;
  ckpt::FsOps fs;
  std::vector<std::unique_ptr<HostBuffer>> staging;  // (arrays) of (elems) fp32

  // Every rank calls this after a phase with its own outcome: rethrows the local error, or throws when
  // another rank failed. `what` names the phase in that message.
  void agree(std::exception_ptr err, const fs::path& dir, const char* what) const {
    const bool all_ok = opt.world == 1 ? !err : opt.barrier(!err);
    if (err) std::rethrow_exception(err);
    if (!all_ok)
      throw RuntimeFailure("checkpoint " + dir.string() + ": another rank failed while " + what +
                           " (its log says why); nothing was committed");
  }
  void prepare(const fs::path& tmp, const fs::path& final_dir) const;
  ShardIndex plan_shard(int64_t step, std::vector<const float*>& sources) const;
  int64_t write_shard(const fs::path& tmp, int64_t step) const;
  void commit(const fs::path& tmp, const fs::path& final_dir, const CheckpointMeta& meta) const;
  std::vector<std::string> prune(int64_t step) const;
};

CheckpointWriter::CheckpointWriter(const ModelDesc& model, OptimizerKind kind, std::vector<ShardSpan> spans,
                                   int64_t elems, CheckpointWriterOptions options)
    : arrays_(checkpoint_arrays(kind)), elems_(elems) {
  if (options.world < 1 || options.rank < 0 || options.rank >= options.world)
    throw InputError("checkpoint: rank " + std::to_string(options.rank) + " of world " + std::to_string(options.world) +
                     " is out of range");
  if (options.world > 1 && !options.barrier)
    throw InputError("checkpoint: world " + std::to_string(options.world) + " needs a barrier between the ranks");
  if (options.keep < 0)
    throw InputError("checkpoint.keep = " + std::to_string(options.keep) + "; expected >= 0 (0 keeps every one)");
  if (options.root.empty()) throw InputError("checkpoint.dir is empty; name a directory for the checkpoints");
  if (bool(options.staging.allocate) != bool(options.staging.release))
    throw InputError("checkpoint: a staging allocator needs both allocate and release");
  ckpt::check_layout(spans, elems, model.total_params);
  state_ = std::make_unique<State>(model, kind, std::move(spans), std::move(options));
  for (size_t a = 0; a < arrays_.size(); ++a)
    state_->staging.push_back(std::make_unique<HostBuffer>(elems, state_->opt.staging));
}

CheckpointWriter::~CheckpointWriter() {
  if (!thread_.joinable()) return;
  thread_.join();
  if (error_) {
    try {
      std::rethrow_exception(error_);
    } catch (const std::exception& e) {
      std::cerr << "warning: a checkpoint save failed and nobody waited for it: " << e.what() << "\n";
    }
  }
}

std::vector<std::span<float>> CheckpointWriter::begin_snapshot() {
  wait();
  filled_ = true;
  std::vector<std::span<float>> out;
  for (const auto& b : state_->staging) out.emplace_back(b->data(), size_t(elems_));
  return out;
}

void CheckpointWriter::snapshot(std::span<const std::span<const float>> arrays) {
  if (arrays.size() != arrays_.size())
    throw InputError("checkpoint snapshot: " + std::to_string(arrays.size()) + " arrays given; the optimizer has " +
                     std::to_string(arrays_.size()));
  for (size_t a = 0; a < arrays.size(); ++a)
    if (arrays[a].size() != size_t(elems_))
      throw InputError("checkpoint snapshot: array " + arrays_[a] + " has " + std::to_string(arrays[a].size()) +
                       " elements; the layout has " + std::to_string(elems_));
  const std::vector<std::span<float>> staging = begin_snapshot();
  for (size_t a = 0; a < arrays.size(); ++a) copy_parallel(staging[a].data(), arrays[a].data(), size_t(elems_));
}

void CheckpointWriter::save_async(const CheckpointMeta& meta) {
  if (!filled_) throw std::logic_error("CheckpointWriter::save_async: call begin_snapshot() or snapshot() first");
  if (meta.step < 0) throw InputError("checkpoint: step = " + std::to_string(meta.step) + "; expected >= 0");
  filled_ = false;
  error_ = nullptr;
  done_ = false;
  thread_ = std::thread([this, meta] {
    name_this_thread("tf-ckpt");
    lower_thread_priority(19);  // below the issuing threads; beside the CPU optimizer's idle-class workers
                                // (cpu_tuning.h pool_idle) it takes one core of the rank's share at most
    try {
      run_save(meta);
    } catch (...) {
      error_ = std::current_exception();
    }
    done_ = true;
  });
}

SaveStats CheckpointWriter::save(const CheckpointMeta& meta) {
  save_async(meta);
  return wait();
}

SaveStats CheckpointWriter::wait() {
  if (thread_.joinable()) thread_.join();
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
  return stats_;
}

void CheckpointWriter::run_save(const CheckpointMeta& meta) {
  const auto t0 = std::chrono::steady_clock::now();
  const State& s = *state_;
  const bool leader = s.opt.rank == 0;
  const fs::path final_dir = s.opt.root / ckpt::step_dir_name(meta.step);
  const fs::path tmp = s.opt.root / (ckpt::step_dir_name(meta.step) + ".tmp");
  auto phase = [&](const char* what, auto&& fn) {
    std::exception_ptr err;
    try {
      fn();
    } catch (...) {
      err = std::current_exception();
    }
    s.agree(err, final_dir, what);
  };
  SaveStats st;
  phase("preparing the directory", [&] {
    if (leader) s.prepare(tmp, final_dir);
  });
  phase("writing its shard", [&] {
    st.data_bytes = s.write_shard(tmp, meta.step);
    st.write_s = seconds_since(t0);
  });
  phase("committing (rank 0)", [&] {
    if (!leader) return;
    s.commit(tmp, final_dir, meta);
    st.warnings = s.prune(meta.step);
  });
  st.dir = final_dir;
  st.total_s = seconds_since(t0);
  stats_ = st;
}

void CheckpointWriter::State::prepare(const fs::path& tmp, const fs::path& final_dir) const {
  fs.make_dirs(opt.root);
  if (fs.file_size(final_dir))
    throw InputError("checkpoint " + final_dir.string() +
                     " already exists and is never overwritten; use another checkpoint.dir, or remove it yourself "
                     "if it is not wanted");
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(opt.root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("step-") && name.ends_with(".tmp")) fs.remove_tree(e.path());  // an interrupted save
  }
  if (ec) ckpt::throw_fs_error("cannot list", opt.root, ec.value(), kWriteAdvice);
  fs.make_dir(tmp);
  fs.fsync_dir(opt.root);
}

// The data file's entries (array-major, then the layout's spans cut at tensor boundaries and at
// kMaxEntryElems) at consecutive offsets, without checksums; sources[i] is entry i's first element.
ShardIndex CheckpointWriter::State::plan_shard(int64_t step, std::vector<const float*>& sources) const {
  ShardIndex idx;
  idx.rank = opt.rank;
  idx.world = opt.world;
  idx.step = step;
  idx.data_file = ckpt::data_file_name(opt.rank);
  for (size_t a = 0; a < staging.size(); ++a)
    for (const ShardSpan& span : spans)
      tensors.for_each_piece(span.model_begin, span.count, [&](size_t t, int64_t begin, int64_t n, int64_t pos) {
        for (int64_t c = 0; c < n; c += ckpt::kMaxEntryElems) {
          const int64_t count = std::min(ckpt::kMaxEntryElems, n - c);
          idx.entries.push_back({uint32_t(t), uint32_t(a), begin + c, count, idx.data_bytes, uint64_t(count) * 4, 0});
          sources.push_back(staging[a]->data() + span.offset + pos + c);
          idx.data_bytes += uint64_t(count) * 4;
        }
      });
  return idx;
}

int64_t CheckpointWriter::State::write_shard(const fs::path& tmp, int64_t step) const {
  std::vector<const float*> sources;  // (entries) where each entry's data lies in the staging arrays
  ShardIndex idx = plan_shard(step, sources);
  const fs::path data_path = tmp / idx.data_file;
  const ckpt::Fd data = fs.create_exclusive(data_path);
  // Item 0, taken first, hashes the whole file in order from memory while the other workers checksum
  // and pwrite the entries at their offsets.
  ckpt::parallel_for(idx.entries.size() + 1, ckpt::io_threads(opt.io_threads) + 1, [&](size_t i, size_t) {
    if (i == 0) {
      Xxh3Stream file_hash;
      for (size_t k = 0; k < sources.size(); ++k) file_hash.update(sources[k], idx.entries[k].bytes);
      idx.data_xxh3 = file_hash.digest();
      return;
    }
    IndexEntry& e = idx.entries[i - 1];
    e.xxh3 = xxh3_64(sources[i - 1], e.bytes);
    fs.pwrite_all(data, sources[i - 1], e.bytes, e.offset, data_path);
  });
  fs.fsync_file(data, data_path);
  const std::string text = ckpt::index_to_text(idx, tensors, checkpoint_arrays(kind));
  const fs::path index_path = tmp / ckpt::index_file_name(opt.rank);
  const ckpt::Fd index = fs.create_exclusive(index_path);
  fs.write_all(index, text.data(), text.size(), index_path);
  fs.fsync_file(index, index_path);
  fs.fsync_dir(tmp);
  return int64_t(idx.data_bytes);
}

namespace {

// The ranks' entries must cover every element of every array exactly once: a layout bug (a rank
// missing, spans overlapping across ranks) is caught before anything is committed.
void check_coverage(const std::vector<ShardIndex>& indexes, const ckpt::TensorTable& tensors,
                    const std::vector<std::string>& arrays, const fs::path& dir) {
  struct Run {
    uint32_t array, tensor;
    int64_t begin, count;
  };
  std::vector<Run> runs;
  for (const ShardIndex& idx : indexes)
    for (const IndexEntry& e : idx.entries) runs.push_back({e.array, e.tensor, e.begin, e.count});
  std::sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) {
    return std::tie(a.array, a.tensor, a.begin) < std::tie(b.array, b.tensor, b.begin);
  });
  size_t i = 0;
  for (uint32_t a = 0; a < arrays.size(); ++a)
    for (uint32_t t = 0; t < tensors.size(); ++t) {
      int64_t next = 0;  // first element not yet covered
      for (; i < runs.size() && runs[i].array == a && runs[i].tensor == t; ++i) {
        if (runs[i].begin != next)
          throw InputError(
              "checkpoint " + dir.string() + ": the ranks' layouts " +
              (runs[i].begin < next
                   ? "cover " + arrays[a] + " of " + tensors.describe(t, runs[i].begin, next - runs[i].begin) + " twice"
                   : "leave " + arrays[a] + " of " + tensors.describe(t, next, runs[i].begin - next) + " uncovered") +
              "; the ShardSpans handed to CheckpointWriter are wrong (nothing was committed)");
        next += runs[i].count;
      }
      if (next != tensors.numel(t))
        throw InputError("checkpoint " + dir.string() + ": the ranks' layouts leave " + arrays[a] + " of " +
                         tensors.describe(t, next, tensors.numel(t) - next) +
                         " uncovered; the ShardSpans handed to CheckpointWriter are wrong (nothing was committed)");
    }
}

}  // namespace

void CheckpointWriter::State::commit(const fs::path& tmp, const fs::path& final_dir, const CheckpointMeta& meta) const {
  const std::vector<std::string> arrays = checkpoint_arrays(kind);
  ckpt::Manifest m;
  m.meta = meta;
  m.meta.layout.world = opt.world;
  m.optimizer = kind;
  m.arrays = arrays;
  m.world = opt.world;
  m.model = model_desc;
  std::vector<ShardIndex> indexes;
  for (int r = 0; r < opt.world; ++r) {
    const fs::path index_path = tmp / ckpt::index_file_name(r);
    const std::string text = fs.read_file(index_path);
    indexes.push_back(ckpt::index_from_text(text, index_path, tensors, arrays));
    const ShardIndex& idx = indexes.back();
    if (idx.rank != r || idx.world != opt.world || idx.step != meta.step || idx.data_file != ckpt::data_file_name(r))
      throw RuntimeFailure(index_path.string() + ": written for rank " + std::to_string(idx.rank) + " of " +
                           std::to_string(idx.world) + " at step " + std::to_string(idx.step) +
                           "; another job is writing into " + opt.root.string() + "?");
    const fs::path data_path = tmp / idx.data_file;
    if (fs.file_size(data_path) != idx.data_bytes)
      throw RuntimeFailure(data_path.string() + ": not the " + std::to_string(idx.data_bytes) +
                           " bytes its rank wrote and fsynced; check the file system");
    m.files.push_back({ckpt::index_file_name(r), text.size(), xxh3_64(text.data(), text.size())});
    m.files.push_back({idx.data_file, idx.data_bytes, idx.data_xxh3});
  }
  check_coverage(indexes, tensors, arrays, final_dir);
  const std::string text = ckpt::manifest_to_text(m);
  const fs::path manifest_path = tmp / ckpt::kManifestName;
  {
    const ckpt::Fd fd = fs.create_exclusive(manifest_path);
    fs.write_all(fd, text.data(), text.size(), manifest_path);
    fs.fsync_file(fd, manifest_path);
  }
  fs.fsync_dir(tmp);
  fs.rename_noreplace(tmp, final_dir);
  fs.fsync_dir(opt.root);
}

std::vector<std::string> CheckpointWriter::State::prune(int64_t step) const {
  std::vector<std::string> warnings;
  if (opt.keep == 0) return warnings;
  try {
    std::vector<CheckpointListing> older;
    for (const CheckpointListing& c : list_checkpoints(opt.root))
      if (c.step < step) older.push_back(c);  // never a newer one (a run resumed from an earlier step)
    const size_t drop = older.size() + 1 > size_t(opt.keep) ? older.size() + 1 - size_t(opt.keep) : 0;
    for (size_t i = 0; i < drop && i < older.size(); ++i) {
      // Renamed first so that a kill mid-removal leaves a *.tmp that loaders ignore, not a broken step-N/.
      const fs::path doomed = opt.root / (ckpt::step_dir_name(older[i].step) + ".prune.tmp");
      fs.rename_noreplace(older[i].dir, doomed);
      fs.fsync_dir(opt.root);
      fs.remove_tree(doomed);
    }
  } catch (const std::exception& e) {
    warnings.push_back(std::string("checkpoint saved, but pruning old ones failed: ") + e.what());
  }
  return warnings;
}

}  // namespace tf::core
