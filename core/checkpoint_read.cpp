// The checkpoint reader (any layout, partial reads, per-entry checksums) and the listing of complete
// checkpoints (latest, --resume).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <tuple>
#include <unordered_map>

#include "core/checkpoint.h"
#include "core/checkpoint_format.h"
#include "core/checkpoint_io.h"
#include "core/checksum.h"
#include "core/error.h"

namespace tf::core {

namespace fs = std::filesystem;
using ckpt::IndexEntry;
using ckpt::ShardIndex;

namespace {

constexpr const char* kReadAdvice = "fix the checkpoint's permissions, or copy it somewhere readable";

fs::path without_trailing_slash(fs::path p) {
  p = p.lexically_normal();
  return p.filename().empty() && p.has_parent_path() ? p.parent_path() : p;
}

ckpt::Manifest load_manifest(const ckpt::FsOps& fs, const fs::path& dir) {
  const fs::path p = dir / ckpt::kManifestName;
  if (!fs.file_size(p))
    throw InputError(dir.string() + " is not a complete checkpoint: it has no " + std::string(ckpt::kManifestName) +
                     " (an interrupted save leaves step-N.tmp/, which is never loaded)");
  return ckpt::manifest_from_text(fs.read_file(p), p);
}

// The first file the manifest lists that is missing or has another size, described; nullopt if none.
std::optional<std::string> first_bad_file(const ckpt::FsOps& fs, const fs::path& dir, const ckpt::Manifest& m) {
  for (const ckpt::FileRecord& r : m.files) {
    const std::optional<uint64_t> size = fs.file_size(dir / r.name);
    if (!size) return (dir / r.name).string() + " is missing";
    if (*size != r.bytes)
      return (dir / r.name).string() + " is " + std::to_string(*size) + " bytes; the manifest says " +
             std::to_string(r.bytes);
  }
  return std::nullopt;
}

struct EntryRef {
  uint32_t rank = 0;
  uint32_t entry = 0;
};

// One entry to read and where its elements go: [from, from + count) of the entry to [dest, dest + count)
// of output array `out`.
struct Job {
  EntryRef ref;
  size_t out = 0;
  struct Op {
    int64_t from, count, dest;
  };
  std::vector<Op> ops;
};

}  // namespace

struct CheckpointReader::Impl {
  fs::path dir;
  ckpt::FsOps fs;
  ckpt::Manifest manifest;
  ModelDesc model;
  std::unique_ptr<ckpt::TensorTable> tensors;
  std::vector<ShardIndex> indexes;                        // (world)
  std::vector<std::vector<std::vector<EntryRef>>> cover;  // (arrays)(tensors) entries sorted by begin
  size_t threads = 1;
  mutable std::atomic<int64_t> bytes_read{0};

  Impl(fs::path d, FaultHook hook, size_t io_threads)
      : dir(without_trailing_slash(std::move(d))),
        fs(std::move(hook), kReadAdvice),
        threads(ckpt::io_threads(io_threads)) {
    try {
      manifest = load_manifest(fs, dir);
    } catch (const InputError& e) {
      damaged(e.what());
    }
    load_model();
    load_indexes();
    check_data_files();
    build_cover();
  }

  const IndexEntry& entry(EntryRef r) const { return indexes[r.rank].entries[r.entry]; }
  fs::path data_path(uint32_t rank) const { return dir / indexes[rank].data_file; }
  std::string holds(const IndexEntry& e) const {
    return manifest.arrays[e.array] + " of " + tensors->describe(e.tensor, e.begin, e.count);
  }

  // What to do about a damaged checkpoint: the newest earlier complete one beside it, if any.
  std::string hint() const {
    const std::optional<int64_t> step = ckpt::parse_step_dir_name(dir.filename().string());
    try {
      std::optional<CheckpointListing> best;
      for (const CheckpointListing& c : list_checkpoints(dir.parent_path()))
        if (c.dir != dir && (!step || c.step < *step)) best = c;
      if (best) return "resume from the earlier checkpoint " + best->dir.string() + ", or restore the file";
    } catch (const std::exception&) {
      // no listing: fall through to the generic advice
    }
    return "restore the file from a copy, or start afresh (no earlier complete checkpoint lies beside it)";
  }
  [[noreturn]] void damaged(const std::string& what) const { throw InputError(what + "; " + hint()); }

  const ckpt::FileRecord& record(const std::string& name) const {
    for (const ckpt::FileRecord& r : manifest.files)
      if (r.name == name) return r;
    damaged((dir / ckpt::kManifestName).string() + ": lists no file " + name + " although it was written by " +
            std::to_string(manifest.world) + " ranks");
  }

  void load_model();
  void load_indexes();
  void check_data_files() const;
  void build_cover();
  void plan(std::span<const ShardSpan> spans, std::span<const uint32_t> arrays, std::vector<Job>& jobs) const;
  void run(const std::vector<Job>& jobs, std::vector<std::vector<float>>& out) const;
};

void CheckpointReader::Impl::load_model() {
  const fs::path mpath = dir / ckpt::kManifestName;
  try {
    model = describe_model(ckpt::model_spec_from_json(manifest.model, mpath));
  } catch (const InputError& e) {
    damaged(e.what());
  }
  tensors = std::make_unique<ckpt::TensorTable>(model);
  const nlohmann::json here = ckpt::describe_model_json(model);
  if (here.value("fingerprint", "") != manifest.model.value("fingerprint", ""))
    damaged(mpath.string() + ": this build lays the model out differently from the build that wrote it (" +
            ckpt::model_difference(manifest.model, here) + ") or its model description is damaged");
}

void CheckpointReader::Impl::load_indexes() {
  for (int r = 0; r < manifest.world; ++r) {
    const std::string name = ckpt::index_file_name(r);
    const fs::path path = dir / name;
    const ckpt::FileRecord& rec = record(name);
    const std::optional<uint64_t> size = fs.file_size(path);
    if (!size)
      damaged(path.string() + " is missing: it indexes rank " + std::to_string(r) +
              "'s shard, so that shard cannot be read");
    if (*size != rec.bytes)
      damaged(path.string() + " is " + std::to_string(*size) + " bytes; the manifest says " +
              std::to_string(rec.bytes) + (*size < rec.bytes ? " (truncated)" : "") + "; it indexes rank " +
              std::to_string(r) + "'s shard");
    const std::string text = fs.read_file(path);
    if (const uint64_t h = xxh3_64(text.data(), text.size()); h != rec.xxh3)
      damaged(path.string() + ": checksum mismatch (manifest " + hex64(rec.xxh3) + ", file " + hex64(h) + "): rank " +
              std::to_string(r) + "'s shard index is damaged");
    try {
      indexes.push_back(ckpt::index_from_text(text, path, *tensors, manifest.arrays));
    } catch (const InputError& e) {
      damaged(e.what());
    }
    const ShardIndex& idx = indexes.back();
    const ckpt::FileRecord& data = record(ckpt::data_file_name(r));
    if (idx.rank != r || idx.data_file != data.name || idx.data_bytes != data.bytes || idx.data_xxh3 != data.xxh3)
      damaged(path.string() + ": does not match the manifest's entry for " + data.name);
  }
}

void CheckpointReader::Impl::check_data_files() const {
  for (const ShardIndex& idx : indexes) {
    const fs::path path = dir / idx.data_file;
    const std::optional<uint64_t> size = fs.file_size(path);
    const std::string more =
        " and " + std::to_string(idx.entries.size() > 0 ? idx.entries.size() - 1 : 0) + " more runs";
    if (!size)
      damaged(path.string() + " is missing (the manifest lists it with " + std::to_string(idx.data_bytes) +
              " bytes): it holds " + (idx.entries.empty() ? std::string("nothing") : holds(idx.entries[0]) + more));
    if (*size < idx.data_bytes) {
      const auto cut = std::find_if(idx.entries.begin(), idx.entries.end(),
                                    [&](const IndexEntry& e) { return e.offset + e.bytes > *size; });
      damaged(path.string() + " is truncated: " + std::to_string(*size) + " bytes of the " +
              std::to_string(idx.data_bytes) + " the manifest lists; lost from " +
              (cut == idx.entries.end() ? std::string("its end") : holds(*cut)) + " on");
    }
    if (*size > idx.data_bytes)
      damaged(path.string() + " is " + std::to_string(*size) + " bytes, longer than the " +
              std::to_string(idx.data_bytes) + " the manifest lists: it was changed after the save");
  }
  for (const ckpt::FileRecord& r : manifest.files)  // any other file the manifest lists
    if (fs.file_size(dir / r.name) != r.bytes)
      damaged((dir / r.name).string() + " is missing or not the " + std::to_string(r.bytes) +
              " bytes the manifest lists");
}

void CheckpointReader::Impl::build_cover() {
  cover.assign(manifest.arrays.size(), std::vector<std::vector<EntryRef>>(tensors->size()));
  for (uint32_t r = 0; r < indexes.size(); ++r)
    for (uint32_t i = 0; i < indexes[r].entries.size(); ++i) {
      const IndexEntry& e = indexes[r].entries[i];
      cover[e.array][e.tensor].push_back({r, i});
    }
  for (auto& by_tensor : cover)
    for (std::vector<EntryRef>& v : by_tensor) {
      std::sort(v.begin(), v.end(), [&](EntryRef a, EntryRef b) { return entry(a).begin < entry(b).begin; });
      for (size_t i = 1; i < v.size(); ++i)
        if (entry(v[i]).begin < entry(v[i - 1]).begin + entry(v[i - 1]).count)
          damaged("checkpoint " + dir.string() + ": " + data_path(v[i].rank).string() + " and " +
                  data_path(v[i - 1].rank).string() + " both hold " + holds(entry(v[i])) +
                  ": its indexes are inconsistent");
    }
}

void CheckpointReader::Impl::plan(std::span<const ShardSpan> spans, std::span<const uint32_t> arrays,
                                  std::vector<Job>& jobs) const {
  std::unordered_map<uint64_t, size_t> job_of;  // (rank << 32 | entry) -> jobs index
  for (size_t out = 0; out < arrays.size(); ++out)
    for (const ShardSpan& span : spans)
      tensors->for_each_piece(span.model_begin, span.count, [&](size_t t, int64_t begin, int64_t n, int64_t pos) {
        const std::vector<EntryRef>& v = cover[arrays[out]][t];
        auto it = std::partition_point(v.begin(), v.end(),
                                       [&](EntryRef r) { return entry(r).begin + entry(r).count <= begin; });
        for (int64_t at = begin; at < begin + n; ++it) {
          if (it == v.end() || entry(*it).begin > at) {
            const int64_t gap_end = it == v.end() ? begin + n : std::min(begin + n, entry(*it).begin);
            damaged("checkpoint " + dir.string() + ": no file holds " + manifest.arrays[arrays[out]] + " of " +
                    tensors->describe(t, at, gap_end - at) + " (the checkpoint is incomplete)");
          }
          const IndexEntry& e = entry(*it);
          const int64_t take = std::min(begin + n, e.begin + e.count) - at;
          const uint64_t key = uint64_t(it->rank) << 32 | it->entry;
          auto [slot, fresh] = job_of.try_emplace(key, jobs.size());
          if (fresh) jobs.push_back({*it, out, {}});
          jobs[slot->second].ops.push_back({at - e.begin, take, span.offset + pos + (at - begin)});
          at += take;
        }
      });
  std::sort(jobs.begin(), jobs.end(), [&](const Job& a, const Job& b) {
    return std::tie(a.ref.rank, entry(a.ref).offset) < std::tie(b.ref.rank, entry(b.ref).offset);
  });
}

void CheckpointReader::Impl::run(const std::vector<Job>& jobs, std::vector<std::vector<float>>& out) const {
  std::vector<ckpt::Fd> fds(indexes.size());  // (world) data files, opened before the workers start
  for (const Job& job : jobs)
    if (fds[job.ref.rank].get() < 0) fds[job.ref.rank] = fs.open_read(data_path(job.ref.rank));
  std::vector<std::vector<float>> scratch(threads);  // (threads)(entry count) fp32 for entries partly needed
  ckpt::parallel_for(jobs.size(), threads, [&](size_t j, size_t worker) {
    const Job& job = jobs[j];
    const IndexEntry& e = entry(job.ref);
    const fs::path path = data_path(job.ref.rank);
    const bool direct = job.ops.size() == 1 && job.ops[0].from == 0 && job.ops[0].count == e.count;
    if (!direct) scratch[worker].resize(size_t(e.count));
    float* buf = direct ? out[job.out].data() + job.ops[0].dest : scratch[worker].data();
    if (!fs.read_exact(fds[job.ref.rank], buf, e.bytes, e.offset, path))
      damaged(path.string() + " ends before " + holds(e) + " (bytes [" + std::to_string(e.offset) + ", " +
              std::to_string(e.offset + e.bytes) + ")): it was truncated after the checks");
    bytes_read += int64_t(e.bytes);
    if (const uint64_t h = xxh3_64(buf, e.bytes); h != e.xxh3)
      damaged(path.string() + ": " + holds(e) + " (bytes [" + std::to_string(e.offset) + ", " +
              std::to_string(e.offset + e.bytes) + ")) fails its checksum (index " + hex64(e.xxh3) + ", data " +
              hex64(h) + "): the file is damaged");
    if (!direct)
      for (const Job::Op& op : job.ops) std::memcpy(out[job.out].data() + op.dest, buf + op.from, size_t(op.count) * 4);
  });
}

CheckpointReader::CheckpointReader(fs::path dir, FaultHook fault_hook, size_t io_threads)
    : impl_(std::make_unique<Impl>(std::move(dir), std::move(fault_hook), io_threads)) {}
CheckpointReader::~CheckpointReader() = default;

const fs::path& CheckpointReader::dir() const { return impl_->dir; }
const CheckpointMeta& CheckpointReader::meta() const { return impl_->manifest.meta; }
OptimizerKind CheckpointReader::optimizer() const { return impl_->manifest.optimizer; }
const std::vector<std::string>& CheckpointReader::arrays() const { return impl_->manifest.arrays; }
const ModelDesc& CheckpointReader::model() const { return impl_->model; }
int64_t CheckpointReader::bytes_read() const { return impl_->bytes_read; }

void CheckpointReader::expect_model(const ModelDesc& run_model) const {
  const nlohmann::json run = ckpt::describe_model_json(run_model);
  if (run.value("fingerprint", "") == impl_->manifest.model.value("fingerprint", "")) return;
  const std::string diff = ckpt::model_difference(impl_->manifest.model, run);
  throw InputError("checkpoint " + impl_->dir.string() + " holds another model (" +
                   (diff.empty() ? std::string("its description differs") : diff) + "; fingerprint " +
                   impl_->manifest.model.value("fingerprint", "?") + " there, " + run.value("fingerprint", "?") +
                   " here): resume with the model it was written for (its scenario is in the manifest), or start "
                   "afresh");
}

void CheckpointReader::expect_optimizer(OptimizerKind kind) const {
  if (kind == impl_->manifest.optimizer) return;
  throw InputError("checkpoint " + impl_->dir.string() + " was written by optimizer " +
                   std::string(optimizer_name(impl_->manifest.optimizer)) + "; this run uses " +
                   std::string(optimizer_name(kind)) + ": resume with " +
                   std::string(optimizer_name(impl_->manifest.optimizer)) + ", or start afresh");
}

std::vector<std::vector<float>> CheckpointReader::read(std::span<const ShardSpan> spans, int64_t elems,
                                                       std::span<const std::string> arrays) const {
  ckpt::check_layout(spans, elems, impl_->tensors->total());
  std::vector<uint32_t> ids;  // (arrays) indexes into the checkpoint's arrays
  for (const std::string& name : arrays) {
    const auto it = std::find(impl_->manifest.arrays.begin(), impl_->manifest.arrays.end(), name);
    if (it == impl_->manifest.arrays.end() || std::count(arrays.begin(), arrays.end(), name) > 1) {
      std::string have;
      for (const std::string& a : impl_->manifest.arrays) have += (have.empty() ? "" : ", ") + a;
      throw InputError("checkpoint " + impl_->dir.string() + ": array '" + name + "' is " +
                       (it == impl_->manifest.arrays.end() ? "not in it" : "asked for twice") + "; it holds " + have +
                       " (optimizer " + std::string(optimizer_name(impl_->manifest.optimizer)) + ")");
    }
    ids.push_back(uint32_t(it - impl_->manifest.arrays.begin()));
  }
  std::vector<Job> jobs;
  impl_->plan(spans, ids, jobs);
  std::vector<std::vector<float>> out(arrays.size(), std::vector<float>(size_t(elems), 0.f));  // (arrays)(elems) fp32
  impl_->run(jobs, out);
  return out;
}

std::vector<float> CheckpointReader::read_tensor(std::string_view tensor, std::string_view array) const {
  const std::optional<size_t> t = impl_->tensors->find(tensor);
  if (!t)
    throw InputError("checkpoint " + impl_->dir.string() + ": its model has no tensor '" + std::string(tensor) + "'");
  const ShardSpan span{impl_->tensors->first(*t), impl_->tensors->numel(*t), 0};
  const std::string name(array);
  return std::move(read(std::span(&span, 1), span.count, std::span(&name, 1))[0]);
}

void CheckpointReader::verify_all() const {
  // (kMaxEntryElems) fp32: one entry, or a gap, at a time
  std::vector<float> buf(static_cast<size_t>(ckpt::kMaxEntryElems));
  for (uint32_t r = 0; r < impl_->indexes.size(); ++r) {
    const ShardIndex& idx = impl_->indexes[r];
    const fs::path path = impl_->data_path(r);
    std::vector<EntryRef> order;
    for (uint32_t i = 0; i < idx.entries.size(); ++i) order.push_back({r, i});
    std::sort(order.begin(), order.end(),
              [&](EntryRef a, EntryRef b) { return impl_->entry(a).offset < impl_->entry(b).offset; });
    // Entries tile the file from byte 0 in a file this build wrote; a gap is read and hashed all the same.
    Xxh3Stream file_hash;
    const ckpt::Fd fd = impl_->fs.open_read(path);
    uint64_t at = 0;
    for (EntryRef ref : order) {
      const IndexEntry& e = impl_->entry(ref);
      for (const bool gap : {true, false}) {
        const uint64_t from = gap ? at : e.offset, n = gap ? (e.offset > at ? e.offset - at : 0) : e.bytes;
        for (uint64_t done = 0; done < n;) {
          const uint64_t step = std::min<uint64_t>(n - done, buf.size() * 4);
          if (!impl_->fs.read_exact(fd, buf.data(), step, from + done, path))
            impl_->damaged(path.string() + " ends before " + impl_->holds(e) + ": it was truncated after the checks");
          impl_->bytes_read += int64_t(step);
          file_hash.update(buf.data(), step);
          done += step;
        }
        if (!gap && xxh3_64(buf.data(), e.bytes) != e.xxh3)
          impl_->damaged(path.string() + ": " + impl_->holds(e) + " fails its checksum: the file is damaged");
      }
      at = std::max(at, e.offset + e.bytes);
    }
    if (file_hash.digest() != idx.data_xxh3)
      impl_->damaged(path.string() + ": checksum mismatch over the whole file (manifest " + hex64(idx.data_xxh3) +
                     ", file " + hex64(file_hash.digest()) + "): the file is damaged");
  }
}

std::vector<CheckpointListing> list_checkpoints(const fs::path& root, std::vector<std::string>* skipped) {
  const ckpt::FsOps fs({}, kReadAdvice);
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    throw InputError("checkpoint directory " + root.string() + " does not exist or is not a directory");
  std::vector<CheckpointListing> out;
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    const std::optional<int64_t> step = ckpt::parse_step_dir_name(name);
    if (!step || !e.is_directory(ec)) continue;  // *.tmp and other files
    try {
      const ckpt::Manifest m = load_manifest(fs, e.path());
      if (const std::optional<std::string> bad = first_bad_file(fs, e.path(), m)) throw InputError(*bad);
      if (m.meta.step != *step)
        throw InputError(name + " holds step " + std::to_string(m.meta.step) + " by its manifest (renamed?)");
      out.push_back({e.path(), *step});
    } catch (const InputError& err) {
      if (skipped) skipped->push_back(name + ": " + err.what());
    }
  }
  if (ec) ckpt::throw_fs_error("cannot list", root, ec.value(), kReadAdvice);
  std::sort(out.begin(), out.end(),
            [](const CheckpointListing& a, const CheckpointListing& b) { return a.step < b.step; });
  return out;
}

std::optional<CheckpointListing> latest_checkpoint(const fs::path& root, std::vector<std::string>* skipped) {
  std::vector<CheckpointListing> all = list_checkpoints(root, skipped);
  if (all.empty()) return std::nullopt;
  return all.back();
}

fs::path resolve_checkpoint(const fs::path& path, std::vector<std::string>* skipped) {
  std::error_code ec;
  if (fs::exists(path / ckpt::kManifestName, ec)) return without_trailing_slash(path);
  std::vector<std::string> why;
  if (const std::optional<CheckpointListing> c = latest_checkpoint(path, &why)) {
    if (skipped) skipped->insert(skipped->end(), why.begin(), why.end());
    return c->dir;
  }
  std::string msg = path.string() + " holds no complete checkpoint (a checkpoint is a step-N/ directory with " +
                    std::string(ckpt::kManifestName) + "; step-N.tmp/ is an interrupted save and never loaded)";
  for (const std::string& w : why) msg += "\n  skipped " + w;
  throw InputError(msg + "\nstart without --resume, or name another directory");
}

}  // namespace tf::core
