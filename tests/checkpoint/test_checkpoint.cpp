// The checkpoint store: bit-exact round trips and resharding across layouts, worlds and ratios; the
// manifest's contents; latest/listing; keep and pruning; the asynchronous save; every bad-input case
// (truncated, flipped bit, missing file, newer format, another model, permissions, uncovered range).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <utility>

#include "core/checkpoint.h"
#include "core/checkpoint_format.h"
#include "core/checksum.h"
#include "core/error.h"
#include "tests/checkpoint/ckpt_test_util.h"
#include "tests/error_of.h"

using namespace tf;
using namespace tf::core;
using test::RankLayout;
namespace fs = std::filesystem;

namespace {

ModelDesc mlp() { return describe_model(make_mlp({96, 160, 128, 40})); }
ModelDesc gpt_tiny() { return describe_model(model_preset("gpt-tiny")); }

CheckpointMeta make_meta(int64_t step) {
  CheckpointMeta m;
  m.step = step;
  m.optimizer_step = step - 1;
  m.loss_scaler = {65536.0 / double(1 << (step % 4)), 1000, 1.0 / 1024, 17 + step};
  m.data = {uint64_t(0xFEEDFACECAFEBEEFull), step + 1, 8};
  m.seed = uint64_t(-1) - uint64_t(step);
  m.layout = {2, 3, 0.3};
  m.scenario_text = "model: gpt-tiny\n# \"quotes\", back\\slash, tab\t, unicode \xc3\xa9\n";
  m.ds_config_text = "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3}}";
  return m;
}

class Checkpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("tf_ckpt_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
             std::to_string(::getpid()));
    fs::remove_all(root_);
  }
  void TearDown() override {
    ::chmod(root_.c_str(), 0755);
    fs::remove_all(root_);
  }

  // Saves step `step` from one thread per layout (the ranks); returns each rank's error (null: saved).
  std::vector<std::exception_ptr> save(const ModelDesc& m, OptimizerKind k, const std::vector<RankLayout>& layouts,
                                       int64_t step, uint64_t tag, int keep = 0,
                                       const std::function<FaultHook(int)>& hook = {}) {
    const int world = int(layouts.size());
    core::AndBarrier barrier(world);
    std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
    test::on_ranks(world, [&](int r) {
      try {
        CheckpointWriterOptions o;
        o.root = root_;
        o.keep = keep;
        o.rank = r;
        o.world = world;
        o.barrier = barrier.callback();
        if (hook) o.fault_hook = hook(r);
        CheckpointWriter w(m, k, layouts[size_t(r)].spans, layouts[size_t(r)].elems, o);
        test::fill_staging(w.begin_snapshot(), layouts[size_t(r)], tag);
        w.save(make_meta(step));
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
      }
    });
    return errors;
  }
  void save_ok(const ModelDesc& m, OptimizerKind k, const std::vector<RankLayout>& layouts, int64_t step, uint64_t tag,
               int keep = 0) {
    for (const std::exception_ptr& e : save(m, k, layouts, step, tag, keep)) {
      if (!e) continue;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        FAIL() << ex.what();
      }
    }
  }
  // Every layout reads back the reference bits of `tag` for every array.
  void expect_loads(const fs::path& dir, const ModelDesc& m, OptimizerKind k, const std::vector<RankLayout>& layouts,
                    uint64_t tag) {
    const CheckpointReader reader(dir);
    reader.expect_model(m);
    reader.expect_optimizer(k);
    const std::vector<std::string> arrays = checkpoint_arrays(k);
    for (size_t l = 0; l < layouts.size(); ++l) {
      const std::vector<std::vector<float>> got = reader.read(layouts[l].spans, layouts[l].elems, arrays);
      for (size_t a = 0; a < arrays.size(); ++a)
        ASSERT_EQ(test::first_mismatch(got[a], layouts[l], tag, a), -1) << "layout " << l << " array " << arrays[a];
    }
  }
  fs::path step_dir(int64_t step) const { return root_ / ("step-" + std::to_string(step)); }

  fs::path root_;
};

// The message of the InputError `fn` throws (test::error_of).
template <class Fn>
std::string input_error(Fn&& fn) {
  return test::error_of<InputError>(std::forward<Fn>(fn));
}

void flip_bit(const fs::path& p, uint64_t byte, int bit) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(std::streamoff(byte));
  char c = 0;
  f.read(&c, 1);
  c = char(c ^ (1 << bit));
  f.seekp(std::streamoff(byte));
  f.write(&c, 1);
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}
void spit(const fs::path& p, const std::string& s) {
  fs::remove(p);
  std::ofstream(p, std::ios::binary) << s;
}

}  // namespace

TEST(CheckpointChecksum, KnownValueStreamingAndHex) {
  EXPECT_EQ(xxh3_64("", 0), 0x2D06800538D394C2ull);  // XXH3-64 of empty input (xxHash's published value)
  std::vector<uint8_t> data(100000);
  std::mt19937 rng(3);
  for (uint8_t& b : data) b = uint8_t(rng());
  const uint64_t whole = xxh3_64(data.data(), data.size());
  for (size_t cut : {size_t(0), size_t(1), size_t(240), size_t(4097), size_t(99999)}) {
    Xxh3Stream s;
    s.update(data.data(), cut);
    s.update(data.data() + cut, data.size() - cut);
    EXPECT_EQ(s.digest(), whole) << cut;
  }
  data[500] ^= 1;
  EXPECT_NE(xxh3_64(data.data(), data.size()), whole);
  EXPECT_EQ(hex64(0x00ab00000000cd01ull), "00ab00000000cd01");
  EXPECT_EQ(parse_hex64("00ab00000000cd01"), 0x00ab00000000cd01ull);
  EXPECT_FALSE(parse_hex64("00ab00000000cd0"));
  EXPECT_FALSE(parse_hex64("00ab00000000cd0g"));
}

TEST(CheckpointLayout, ShardSpansCoverEveryElementOnceAtItsShardOffset) {
  for (const ModelDesc& m : {mlp(), gpt_tiny()})
    for (int world : {1, 2, 3, 4})
      for (double ratio : {0.0, 0.3, 0.7, 1.0}) {
        const Partition part = make_partition(m, {3, world, 2048});
        std::vector<int> owners(size_t(m.total_params), 0);
        for (const RankShard& s : part.ranks) {
          const TwinFlowSplit split = split_shard(s, ratio, 2048);
          // Independent reference: walk every piece's real elements one by one.
          std::vector<int64_t> where(size_t(s.elems), -1);  // (shard elems) model index or -1 (padding)
          int64_t layer_first = 0;
          for (size_t l = 0, k = 0; l < m.layers.size(); layer_first += m.layers[l].params, ++l)
            for (; k < s.pieces.size() && s.pieces[k].layer == l; ++k)
              for (int64_t j = 0; j < s.pieces[k].real_count; ++j)
                where[size_t(s.pieces[k].shard_offset + j)] = layer_first + s.pieces[k].layer_offset + j;
          for (const auto& [pieces, base] : {std::pair(&split.gpu, int64_t(0)), std::pair(&split.cpu, split.boundary)})
            for (const ShardSpan& sp : shard_spans(part, *pieces, base))
              for (int64_t i = 0; i < sp.count; ++i) {
                ASSERT_EQ(where[size_t(base + sp.offset + i)], sp.model_begin + i);
                owners[size_t(sp.model_begin + i)]++;
              }
        }
        for (size_t e = 0; e < owners.size(); ++e) ASSERT_EQ(owners[e], 1) << e;
      }
}

TEST(CheckpointLayout, ArraysFollowTheOptimizer) {
  for (OptimizerKind k : {OptimizerKind::kAdamW, OptimizerKind::kAdam, OptimizerKind::kAdagrad, OptimizerKind::kLion}) {
    const std::vector<std::string> a = checkpoint_arrays(k);
    EXPECT_EQ(a.size(), size_t(1 + state_count(k)));
    EXPECT_EQ(a[0], "master");
  }
  EXPECT_EQ(checkpoint_arrays(OptimizerKind::kAdagrad)[1], "sum");
  EXPECT_EQ(checkpoint_arrays(OptimizerKind::kLion)[1], "exp_avg");
  EXPECT_EQ(checkpoint_arrays(OptimizerKind::kAdamW)[2], "exp_avg_sq");
}

TEST_F(Checkpoint, RoundTripsAtRandomLayoutsBitForBit) {
  const ModelDesc m = gpt_tiny();
  std::mt19937_64 rng(11);
  int64_t step = 1;
  for (OptimizerKind k : {OptimizerKind::kAdamW, OptimizerKind::kAdagrad, OptimizerKind::kLion})
    for (int trial = 0; trial < 3; ++trial, ++step) {
      const int world = 1 + int(rng() % 4);
      save_ok(m, k, test::random_layouts(m.total_params, world, rng), step, uint64_t(step));
      std::vector<RankLayout> loads = test::random_layouts(m.total_params, 1 + int(rng() % 5), rng);
      expect_loads(step_dir(step), m, k, loads, uint64_t(step));
    }
}

TEST_F(Checkpoint, ReshardsAcrossWorldsRatiosAndSegments) {
  for (const ModelDesc& m : {mlp(), gpt_tiny()}) {
    fs::remove_all(root_);
    // Saved by world 2 at ratio 0.3 as the functional simulator holds it (separate GPU/CPU segments)...
    const std::vector<RankLayout> saved = test::segment_layouts(m, 2, 0.3);
    save_ok(m, OptimizerKind::kAdamW, saved, 5, 77);
    // ...loaded as the engine holds it (whole shards) at worlds 4, 1, 2, and as segments at other ratios.
    for (int world : {4, 1, 2}) expect_loads(step_dir(5), m, OptimizerKind::kAdamW, test::shard_layouts(m, world), 77);
    for (double ratio : {0.0, 0.7, 1.0})
      expect_loads(step_dir(5), m, OptimizerKind::kAdamW, test::segment_layouts(m, 4, ratio), 77);
    expect_loads(step_dir(5), m, OptimizerKind::kAdamW, test::shard_layouts(m, 3, /*stage=*/2), 77);
  }
}

TEST_F(Checkpoint, ManifestRecordsTheStateAndEveryFile) {
  const ModelDesc m = gpt_tiny();
  save_ok(m, OptimizerKind::kAdam, test::shard_layouts(m, 2), 9, 1);
  const CheckpointReader r(step_dir(9));
  const CheckpointMeta want = make_meta(9), &got = r.meta();
  EXPECT_EQ(got.step, want.step);
  EXPECT_EQ(got.optimizer_step, want.optimizer_step);
  EXPECT_EQ(got.loss_scaler.scale, want.loss_scaler.scale);
  EXPECT_EQ(got.loss_scaler.window, want.loss_scaler.window);
  EXPECT_EQ(got.loss_scaler.min_scale, want.loss_scaler.min_scale);
  EXPECT_EQ(got.loss_scaler.clean, want.loss_scaler.clean);
  EXPECT_EQ(got.data.seed, want.data.seed);
  EXPECT_EQ(got.data.next_step, want.data.next_step);
  EXPECT_EQ(got.data.micro_shards, want.data.micro_shards);
  EXPECT_EQ(got.seed, want.seed);
  EXPECT_EQ(got.layout.world, 2);  // the writer's world
  EXPECT_EQ(got.layout.stage, want.layout.stage);
  EXPECT_EQ(got.layout.ratio, want.layout.ratio);
  EXPECT_EQ(got.scenario_text, want.scenario_text);
  EXPECT_EQ(got.ds_config_text, want.ds_config_text);
  EXPECT_EQ(r.optimizer(), OptimizerKind::kAdam);
  EXPECT_EQ(r.model().total_params, m.total_params);
  const nlohmann::json j = nlohmann::json::parse(slurp(step_dir(9) / "manifest.json"));
  EXPECT_EQ(j.at("format_version"), kCheckpointFormatVersion);
  ASSERT_EQ(j.at("files").size(), 4u);  // rank-0/1 index + data
  int64_t data_bytes = 0;
  for (const auto& f : j.at("files")) {
    const fs::path p = step_dir(9) / f.at("name").get<std::string>();
    EXPECT_EQ(fs::file_size(p), f.at("bytes").get<uint64_t>()) << p;
    const std::string bytes = slurp(p);
    EXPECT_EQ(hex64(xxh3_64(bytes.data(), bytes.size())), f.at("xxh3").get<std::string>()) << p;
    if (p.extension() == ".data") data_bytes += int64_t(bytes.size());
  }
  EXPECT_EQ(data_bytes, m.total_params * 3 * 4);  // real elements only, three arrays
  EXPECT_NO_THROW(r.verify_all());
  EXPECT_EQ(r.bytes_read(), data_bytes);
}

TEST_F(Checkpoint, FileChecksumsAreWhatXxhsumPrints) {
  const std::string probe = "xxhsum -H3 /dev/null 2>/dev/null";
  FILE* p = ::popen(probe.c_str(), "r");
  char line[256] = {};
  const bool have = p && std::fgets(line, sizeof line, p) != nullptr;
  if (p) ::pclose(p);
  if (!have) GTEST_SKIP() << "xxhsum (Debian: xxhash) is not installed";
  const ModelDesc m = mlp();
  save_ok(m, OptimizerKind::kLion, test::shard_layouts(m, 2), 1, 1);
  const nlohmann::json j = nlohmann::json::parse(slurp(step_dir(1) / "manifest.json"));
  for (const auto& f : j.at("files")) {
    const fs::path path = step_dir(1) / f.at("name").get<std::string>();
    FILE* x = ::popen(("xxhsum -H3 " + path.string()).c_str(), "r");
    ASSERT_TRUE(x);
    std::string out(256, '\0');
    out.resize(std::fread(out.data(), 1, out.size(), x));
    ::pclose(x);
    // "XXH3 (FILE) = HEX" (xxhsum 0.8's BSD-style line for -H3)
    EXPECT_NE(out.find("= " + f.at("xxh3").get<std::string>()), std::string::npos) << out;
  }
}

TEST_F(Checkpoint, ReadsOnlyTheEntriesItNeeds) {
  const ModelDesc m = gpt_tiny();
  save_ok(m, OptimizerKind::kAdamW, test::shard_layouts(m, 4), 1, 3);
  const CheckpointReader r(step_dir(1));
  const TensorDesc& t = m.tensors[3];
  const std::vector<float> got = r.read_tensor(t.name, "exp_avg");
  EXPECT_EQ(r.bytes_read(), t.numel * 4);  // entries never straddle tensors
  int64_t first = 0;
  for (size_t i = 0; i < 3; ++i) first += m.tensors[i].numel;
  ASSERT_EQ(int64_t(got.size()), t.numel);
  for (int64_t i = 0; i < t.numel; ++i) {
    const float want = test::ref_value(3, 1, first + i);
    ASSERT_EQ(std::memcmp(&got[size_t(i)], &want, 4), 0) << i;
  }
}

TEST_F(Checkpoint, LatestIsTheNewestCompleteOneAndTmpIsIgnored) {
  const ModelDesc m = mlp();
  EXPECT_NE(input_error([&] { (void)list_checkpoints(root_); }).find("does not exist"), std::string::npos);
  save_ok(m, OptimizerKind::kLion, test::shard_layouts(m, 1), 2, 2);
  save_ok(m, OptimizerKind::kLion, test::shard_layouts(m, 1), 10, 10);
  fs::create_directories(root_ / "step-11.tmp");  // an interrupted save, with what looks like a manifest
  fs::copy_file(step_dir(10) / "manifest.json", root_ / "step-11.tmp" / "manifest.json");
  fs::create_directories(step_dir(12));  // a directory without a manifest
  fs::create_directories(root_ / "other");
  std::vector<std::string> skipped;
  const std::optional<CheckpointListing> latest = latest_checkpoint(root_, &skipped);
  ASSERT_TRUE(latest);
  EXPECT_EQ(latest->step, 10);
  EXPECT_EQ(latest->dir, step_dir(10));
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("step-12"), std::string::npos);
  EXPECT_NE(skipped[0].find("no manifest.json"), std::string::npos);
  ASSERT_EQ(list_checkpoints(root_).size(), 2u);
  EXPECT_EQ(list_checkpoints(root_)[0].step, 2);
  EXPECT_EQ(resolve_checkpoint(root_), step_dir(10));
  EXPECT_EQ(resolve_checkpoint(step_dir(2)), step_dir(2));
  EXPECT_EQ(resolve_checkpoint(root_.string() + "/step-2/"), step_dir(2));
  EXPECT_NE(input_error([&] { resolve_checkpoint(root_ / "other"); }).find("holds no complete checkpoint"),
            std::string::npos);
  // A newer checkpoint whose data file lost bytes is skipped by latest, with the reason.
  save_ok(m, OptimizerKind::kLion, test::shard_layouts(m, 1), 13, 13);
  fs::resize_file(step_dir(13) / "rank-00000.data", 100);
  skipped.clear();
  EXPECT_EQ(latest_checkpoint(root_, &skipped)->step, 10);
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_TRUE(std::any_of(skipped.begin(), skipped.end(),
                          [](const std::string& s) {
                            return s.starts_with("step-13: ") &&
                                   s.find("rank-00000.data is 100 bytes") != std::string::npos;
                          }))
      << skipped[0] << "\n"
      << skipped[1];
}

TEST_F(Checkpoint, KeepPrunesOlderOnesOnlyAfterTheNewOneIsDurable) {
  const ModelDesc m = mlp();
  save_ok(m, OptimizerKind::kAdamW, test::shard_layouts(m, 2), 100, 100);  // a newer one from an earlier run
  for (int64_t step = 1; step <= 4; ++step) save_ok(m, OptimizerKind::kAdamW, test::shard_layouts(m, 2), step, step, 2);
  std::vector<int64_t> steps;
  for (const CheckpointListing& c : list_checkpoints(root_)) steps.push_back(c.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{3, 4, 100}));  // the newer one is never pruned
  for (const fs::directory_entry& e : fs::directory_iterator(root_))
    EXPECT_FALSE(e.path().string().ends_with(".tmp")) << e.path();
  expect_loads(step_dir(3), m, OptimizerKind::kAdamW, test::shard_layouts(m, 1), 3);
}

TEST_F(Checkpoint, AnExistingCheckpointIsNeverOverwritten) {
  const ModelDesc m = mlp();
  save_ok(m, OptimizerKind::kAdamW, test::shard_layouts(m, 2), 3, 1);
  const std::vector<std::exception_ptr> errors = save(m, OptimizerKind::kAdamW, test::shard_layouts(m, 2), 3, 2);
  ASSERT_TRUE(errors[0]);
  EXPECT_NE(input_error([&] { std::rethrow_exception(errors[0]); }).find("already exists"), std::string::npos);
  ASSERT_TRUE(errors[1]);  // rank 1 hears of rank 0's failure through the barrier
  EXPECT_THROW(std::rethrow_exception(errors[1]), RuntimeFailure);
  expect_loads(step_dir(3), m, OptimizerKind::kAdamW, test::shard_layouts(m, 1), 1);
}

TEST_F(Checkpoint, AsyncSaveWritesTheSnapshotWhileTheCallerMovesOn) {
  const ModelDesc m = gpt_tiny();
  const RankLayout layout = test::shard_layouts(m, 1)[0];
  CheckpointWriterOptions o;
  o.root = root_;
  CheckpointWriter w(m, OptimizerKind::kAdamW, layout.spans, layout.elems, o);
  // The caller's own arrays, copied by snapshot(); then overwritten while the writer runs.
  std::vector<std::vector<float>> state(3, std::vector<float>(size_t(layout.elems)));
  for (int64_t step : {1, 2, 3}) {
    for (size_t a = 0; a < 3; ++a)
      for (const ShardSpan& s : layout.spans)
        for (int64_t i = 0; i < s.count; ++i)
          state[a][size_t(s.offset + i)] = test::ref_value(uint64_t(step), a, s.model_begin + i);
    const std::vector<std::span<const float>> views(state.begin(), state.end());
    w.snapshot(views);  // waits for the previous save (they share the staging arrays)
    EXPECT_FALSE(w.in_flight());
    w.save_async(make_meta(step));
    for (auto& a : state) std::fill(a.begin(), a.end(), -1.f);  // training goes on
  }
  const SaveStats st = w.wait();
  EXPECT_FALSE(w.in_flight());
  EXPECT_EQ(st.dir, step_dir(3));
  EXPECT_EQ(st.data_bytes, m.total_params * 12);
  for (int64_t step : {1, 2, 3}) expect_loads(step_dir(step), m, OptimizerKind::kAdamW, {layout}, uint64_t(step));
  EXPECT_THROW(w.save_async(make_meta(4)), std::logic_error);  // no snapshot since the last save
}

TEST_F(Checkpoint, BadLayoutsAndOptionsAreInputErrors) {
  const ModelDesc m = mlp();
  CheckpointWriterOptions o;
  o.root = root_;
  auto make = [&](std::vector<ShardSpan> spans, int64_t elems) {
    CheckpointWriter(m, OptimizerKind::kAdamW, std::move(spans), elems, o);
  };
  EXPECT_NE(input_error([&] { make({{m.total_params - 1, 2, 0}}, 2); }).find("outside"), std::string::npos);
  EXPECT_NE(input_error([&] { make({{0, 4, 0}, {2, 4, 8}}, 12); }).find("overlap in the model"), std::string::npos);
  EXPECT_NE(input_error([&] { make({{0, 4, 0}, {8, 4, 2}}, 12); }).find("overlap in the arrays"), std::string::npos);
  o.world = 2;
  EXPECT_NE(input_error([&] { make({{0, 4, 0}}, 4); }).find("barrier"), std::string::npos);
  // Two ranks whose layouts leave a hole: rank 0 refuses to commit.
  std::vector<RankLayout> holes = {{{{0, 100, 0}}, 100}, {{{101, m.total_params - 101, 0}}, m.total_params - 101}};
  const std::vector<std::exception_ptr> errors = save(m, OptimizerKind::kAdamW, holes, 1, 1);
  EXPECT_NE(input_error([&] { std::rethrow_exception(errors[0]); }).find("[100, 101) uncovered"), std::string::npos);
  EXPECT_TRUE(list_checkpoints(root_).empty());
}

TEST_F(Checkpoint, AFailingRankCommitsNothingAndTheNextSaveSucceeds) {
  const ModelDesc m = mlp();
  save_ok(m, OptimizerKind::kAdamW, test::shard_layouts(m, 3), 1, 1);
  for (const int err : {ENOSPC, EIO, EACCES}) {
    const auto hook = [err](int rank) -> FaultHook {
      if (rank != 1) return {};
      return [err](const FaultPoint& p) { return p.op == "write" ? err : 0; };
    };
    const std::vector<std::exception_ptr> errors =
        save(m, OptimizerKind::kAdamW, test::shard_layouts(m, 3), 2, 2, 0, hook);
    for (const std::exception_ptr& e : errors) ASSERT_TRUE(e);
    try {
      std::rethrow_exception(errors[1]);
    } catch (const InputError& e) {
      EXPECT_EQ(err, EACCES) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank-00001.data"), std::string::npos) << e.what();
    } catch (const RuntimeFailure& e) {
      EXPECT_NE(err, EACCES) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank-00001.data"), std::string::npos) << e.what();
    }
    EXPECT_THROW(std::rethrow_exception(errors[0]), RuntimeFailure);  // "another rank failed"
    EXPECT_EQ(latest_checkpoint(root_)->step, 1);
  }
  save_ok(m, OptimizerKind::kAdamW, test::shard_layouts(m, 3), 2, 2);  // the stale step-2.tmp is cleared
  expect_loads(step_dir(2), m, OptimizerKind::kAdamW, test::shard_layouts(m, 2), 2);
}

TEST_F(Checkpoint, TruncatedFileNamesTheFileAndTheTensor) {
  const ModelDesc m = gpt_tiny();
  save_ok(m, OptimizerKind::kAdamW, test::shard_layouts(m, 2), 1, 1);
  save_ok(m, OptimizerKind::kAdamW, test::shard_layouts(m, 2), 2, 2);
  fs::resize_file(step_dir(2) / "rank-00001.data", fs::file_size(step_dir(2) / "rank-00001.data") - 5);
  const std::string msg = input_error([&] { CheckpointReader r(step_dir(2)); });
  EXPECT_NE(msg.find("rank-00001.data is truncated"), std::string::npos) << msg;
  // The last run rank 1 wrote: exp_avg_sq of the tensor holding its last span's last element.
  const ShardSpan last = test::shard_layouts(m, 2)[1].spans.back();
  size_t t = 0;
  for (int64_t first = 0; first + m.tensors[t].numel < last.model_begin + last.count; first += m.tensors[t++].numel) {
  }
  EXPECT_NE(msg.find("exp_avg_sq of " + m.tensors[t].name), std::string::npos) << msg;
  EXPECT_NE(msg.find("resume from the earlier checkpoint " + step_dir(1).string()), std::string::npos) << msg;
}

TEST_F(Checkpoint, FlippedBitFailsItsChecksumAndNothingIsHandedOut) {
  const ModelDesc m = gpt_tiny();
  save_ok(m, OptimizerKind::kAdagrad, test::shard_layouts(m, 2), 1, 1);
  const fs::path data = step_dir(1) / "rank-00000.data";
  flip_bit(data, fs::file_size(data) - 3, 6);  // in the last entry: "sum" of the last tensor rank 0 holds
  const CheckpointReader r(step_dir(1));       // sizes are fine
  const std::vector<RankLayout> whole = test::shard_layouts(m, 1);
  const std::vector<std::string> arrays = checkpoint_arrays(OptimizerKind::kAdagrad);
  const std::string msg = input_error([&] { (void)r.read(whole[0].spans, whole[0].elems, arrays); });
  EXPECT_NE(msg.find("rank-00000.data: sum of "), std::string::npos) << msg;
  EXPECT_NE(msg.find("fails its checksum"), std::string::npos) << msg;
  EXPECT_NE(input_error([&] { r.verify_all(); }).find("rank-00000.data"), std::string::npos);
  // Master is untouched by the flip and still reads.
  const std::vector<std::string> master = {"master"};
  EXPECT_EQ(test::first_mismatch(r.read(whole[0].spans, whole[0].elems, master)[0], whole[0], 1, 0), -1);
  // A flip in an index or the manifest is caught by their checksums.
  flip_bit(step_dir(1) / "rank-00001.index.json", 40, 0);
  EXPECT_NE(input_error([&] { CheckpointReader r2(step_dir(1)); }).find("rank-00001.index.json: checksum mismatch"),
            std::string::npos);
  flip_bit(step_dir(1) / "rank-00001.index.json", 40, 0);
  const std::string manifest = slurp(step_dir(1) / "manifest.json");
  const size_t pos = manifest.find("\"optimizer_step\": 0");
  ASSERT_NE(pos, std::string::npos);
  spit(step_dir(1) / "manifest.json", manifest.substr(0, pos) + "\"optimizer_step\": 1" + manifest.substr(pos + 19));
  EXPECT_NE(input_error([&] { CheckpointReader r3(step_dir(1)); }).find("manifest.json: checksum mismatch"),
            std::string::npos);
}

TEST_F(Checkpoint, MissingShardFileNamesTheFileAndWhatItHeld) {
  const ModelDesc m = mlp();
  save_ok(m, OptimizerKind::kAdamW, test::shard_layouts(m, 2), 1, 1);
  fs::remove(step_dir(1) / "rank-00001.data");
  const std::string msg = input_error([&] { CheckpointReader r(step_dir(1)); });
  EXPECT_NE(msg.find("rank-00001.data is missing"), std::string::npos) << msg;
  EXPECT_NE(msg.find("master of " + m.tensors[0].name), std::string::npos) << msg;
  EXPECT_NE(msg.find("start afresh"), std::string::npos) << msg;  // no earlier checkpoint
  fs::remove(step_dir(1) / "rank-00000.index.json");
  EXPECT_NE(input_error([&] { CheckpointReader r(step_dir(1)); }).find("rank-00000.index.json is missing"),
            std::string::npos);
  fs::remove(step_dir(1) / "manifest.json");
  EXPECT_NE(input_error([&] { CheckpointReader r(step_dir(1)); }).find("no manifest.json"), std::string::npos);
}

TEST_F(Checkpoint, ManifestFromANewerFormatIsRefused) {
  const ModelDesc m = mlp();
  save_ok(m, OptimizerKind::kAdamW, test::shard_layouts(m, 1), 1, 1);
  nlohmann::json j = nlohmann::json::parse(slurp(step_dir(1) / "manifest.json"));
  j["format_version"] = kCheckpointFormatVersion + 1;
  spit(step_dir(1) / "manifest.json", j.dump(2));
  const std::string msg = input_error([&] { CheckpointReader r(step_dir(1)); });
  EXPECT_NE(msg.find("format version " + std::to_string(kCheckpointFormatVersion + 1)), std::string::npos) << msg;
  EXPECT_NE(msg.find("newer Twin-Flow"), std::string::npos) << msg;
  std::vector<std::string> skipped;
  EXPECT_FALSE(latest_checkpoint(root_, &skipped));
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("newer"), std::string::npos);
}

TEST_F(Checkpoint, AnotherModelOrOptimizerIsNamed) {
  save_ok(mlp(), OptimizerKind::kAdamW, test::shard_layouts(mlp(), 1), 1, 1);
  const CheckpointReader r(step_dir(1));
  std::string msg = input_error([&] { r.expect_model(describe_model(make_mlp({96, 160, 128, 41}))); });
  EXPECT_NE(msg.find("mlp.dims: [96,160,128,40] in the checkpoint, [96,160,128,41] in this run"), std::string::npos)
      << msg;
  msg = input_error([&] { r.expect_model(gpt_tiny()); });
  EXPECT_NE(msg.find("type: \"mlp\" in the checkpoint, \"decoder\" in this run"), std::string::npos) << msg;
  msg = input_error([&] { r.expect_optimizer(OptimizerKind::kLion); });
  EXPECT_NE(msg.find("written by optimizer adamw; this run uses lion"), std::string::npos) << msg;
  r.expect_model(describe_model(make_mlp({96, 160, 128, 40}, true, "another-name")));  // the name is not the model

  fs::remove_all(root_);
  save_ok(gpt_tiny(), OptimizerKind::kAdamW, test::shard_layouts(gpt_tiny(), 1), 1, 1);
  ModelSpec deeper = model_preset("gpt-tiny");
  deeper.decoder.layers = 3;
  msg = input_error([&] { CheckpointReader(step_dir(1)).expect_model(describe_model(deeper)); });
  EXPECT_NE(msg.find("decoder.layers: 2 in the checkpoint, 3 in this run"), std::string::npos) << msg;
  const std::vector<std::string> arrays = {"sum"};
  msg = input_error([&] { (void)CheckpointReader(step_dir(1)).read({}, 0, arrays); });
  EXPECT_NE(msg.find("array 'sum' is not in it; it holds master, exp_avg, exp_avg_sq"), std::string::npos) << msg;
}

// The model description a checkpoint carries restores every decoder field (an OPT model must not come
// back as GPT-2): the post-LN, projected, ReLU, offset-2 tiny OPT round-trips field by field.
TEST_F(Checkpoint, DecoderDescriptionRoundTripsEveryField) {
  const ModelDesc opt = describe_model(model_preset("opt-tiny-proj"));
  save_ok(opt, OptimizerKind::kAdamW, test::shard_layouts(opt, 1), 1, 1);
  const CheckpointReader r(step_dir(1));
  r.expect_model(opt);
  const DecoderShape& a = r.model().spec.decoder;
  const DecoderShape& b = opt.spec.decoder;
  EXPECT_EQ(a.activation, b.activation);
  EXPECT_EQ(a.pre_ln, b.pre_ln);
  EXPECT_EQ(a.pos_offset, b.pos_offset);
  EXPECT_EQ(a.pad_token, b.pad_token);
  EXPECT_EQ(a.embed_dim, b.embed_dim);
  EXPECT_EQ(a.ln_eps, b.ln_eps);
  EXPECT_EQ(a.family, b.family);
  EXPECT_EQ(r.model().total_params, opt.total_params);
  ModelSpec gelu = model_preset("opt-tiny-proj");
  gelu.decoder.activation = Activation::kGeluTanh;
  const std::string msg = input_error([&] { r.expect_model(describe_model(gelu)); });
  EXPECT_NE(msg.find("decoder.activation"), std::string::npos) << msg;
}

TEST_F(Checkpoint, PermissionErrorsAreInputErrors) {
  const ModelDesc m = mlp();
  const std::vector<RankLayout> one = test::shard_layouts(m, 1);
  save_ok(m, OptimizerKind::kAdamW, one, 1, 1);
  // Injected (this runs as root too): a permission error is bad input (exit 2), writing and reading.
  const auto deny = [](int) -> FaultHook { return [](const FaultPoint& p) { return p.op == "mkdir" ? EACCES : 0; }; };
  std::vector<std::exception_ptr> errors = save(m, OptimizerKind::kAdamW, one, 2, 2, 0, deny);
  std::string msg = input_error([&] { std::rethrow_exception(errors[0]); });
  EXPECT_NE(msg.find("Permission denied; choose a checkpoint.dir you can write"), std::string::npos) << msg;
  msg = input_error(
      [&] { CheckpointReader(step_dir(1), [](const FaultPoint& p) { return p.op == "open" ? EACCES : 0; }); });
  EXPECT_NE(msg.find("manifest.json: Permission denied; fix the checkpoint's permissions"), std::string::npos) << msg;
  expect_loads(step_dir(1), m, OptimizerKind::kAdamW, one, 1);
}

TEST_F(Checkpoint, DirectoryWithoutPermission) {
  if (::geteuid() == 0)
    GTEST_SKIP() << "running as root: permission bits do not bind (PermissionErrorsAreInputErrors injects them)";
  const ModelDesc m = mlp();
  const std::vector<RankLayout> one = test::shard_layouts(m, 1);
  save_ok(m, OptimizerKind::kAdamW, one, 1, 1);
  ::chmod(root_.c_str(), 0500);
  const std::vector<std::exception_ptr> errors = save(m, OptimizerKind::kAdamW, one, 2, 2);
  EXPECT_NE(input_error([&] { std::rethrow_exception(errors[0]); }).find("Permission denied"), std::string::npos);
  ::chmod(step_dir(1).c_str(), 0);
  EXPECT_NE(input_error([&] { CheckpointReader r(step_dir(1)); }).find("Permission denied"), std::string::npos);
  ::chmod(step_dir(1).c_str(), 0755);
  ::chmod(root_.c_str(), 0755);
  expect_loads(step_dir(1), m, OptimizerKind::kAdamW, one, 1);
}

TEST_F(Checkpoint, RangeThatNoFileCoversIsNamed) {
  const ModelDesc m = mlp();
  save_ok(m, OptimizerKind::kAdamW, test::shard_layouts(m, 2), 1, 1);
  // Drop one entry from rank 1's index and re-seal index and manifest: a consistent but incomplete checkpoint.
  const fs::path dir = step_dir(1), index = dir / "rank-00001.index.json", manifest = dir / "manifest.json";
  nlohmann::json idx = nlohmann::json::parse(slurp(index));
  const nlohmann::json dropped = idx["entries"][1];
  idx["entries"].erase(1);
  const std::string text = idx.dump(1);
  spit(index, text);
  ckpt::Manifest man = ckpt::manifest_from_text(slurp(manifest), manifest);
  for (ckpt::FileRecord& f : man.files)
    if (f.name == "rank-00001.index.json") f = {f.name, text.size(), xxh3_64(text.data(), text.size())};
  spit(manifest, ckpt::manifest_to_text(man));
  const CheckpointReader r(dir);
  const std::string want = "no file holds " + dropped["array"].get<std::string>() + " of " +
                           dropped["tensor"].get<std::string>() + " [" +
                           std::to_string(dropped["begin"].get<int64_t>());
  const std::vector<RankLayout> whole = test::shard_layouts(m, 1);
  const std::vector<std::string> arrays = checkpoint_arrays(OptimizerKind::kAdamW);
  const std::string msg = input_error([&] { (void)r.read(whole[0].spans, whole[0].elems, arrays); });
  EXPECT_NE(msg.find(want), std::string::npos) << msg;
  // The other arrays, still covered, read.
  const size_t other = dropped["array"] == "master" ? 1 : 0;
  const std::vector<std::string> one = {arrays[other]};
  EXPECT_EQ(test::first_mismatch(r.read(whole[0].spans, whole[0].elems, one)[0], whole[0], 1, other), -1);
}
