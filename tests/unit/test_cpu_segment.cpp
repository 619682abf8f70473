// The engine's CPU half without CUDA: huge-page host regions, the CPU segment's per-layer passes (bit
// for bit the backend's fused pass on each layer's chunk, whatever the threads and the work stealing),
// and the CPU rank worker that the multi-process measurements run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include "apps/twinflow/cpu_ranks.h"
#include "backends/cpu/cpu_segment.h"
#include "backends/cpu/host_region.h"
#include "core/error.h"
#include "core/model.h"
#include "core/optim/dtype.h"
#include "core/partition.h"
#include "core/step.h"
#include "core/twinflow.h"

namespace tf::backend::cpu {
namespace {

TEST(HostRegion, TwoMebibyteAlignedZeroedAndMovable) {
  HostRegion r(3u << 20);
  ASSERT_NE(r.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(r.data()) % (2u << 20), 0u);
  EXPECT_EQ(r.bytes(), 3u << 20);
  const auto* b = r.as<unsigned char>();
  for (size_t i = 0; i < r.bytes(); i += 4093) ASSERT_EQ(b[i], 0) << i;
  r.as<float>()[7] = 1.5f;
  HostRegion m = std::move(r);
  EXPECT_EQ(r.data(), nullptr);
  EXPECT_EQ(m.as<float>()[7], 1.5f);
  EXPECT_EQ(HostRegion(0).data(), nullptr);
}

// A segment's buffers: (n) fp32 master, m, v; (n) bf16 gradient and copy.
struct Buffers {
  explicit Buffers(size_t n) : master(n * 4), s1(n * 4), s2(n * 4), grad(n * 2), copy(n * 2), n(n) {
    for (size_t i = 0; i < n; ++i) {
      master.as<float>()[i] = cpu_fill_value(i);
      grad.as<uint16_t>()[i] = core::f32_to_bf16(cpu_fill_value(i + n));
    }
  }
  SegmentBuffers views() const {
    return {master.as<float>(),
            s1.as<float>(),
            s2.as<float>(),
            grad.data(),
            copy.data(),
            core::DType::kBF16,
            core::DType::kBF16,
            {},
            {}};
  }
  HostRegion master, s1, s2, grad, copy;
  size_t n;
};

// Uneven layers, one of them empty and one not a whole tile, run out of order.
const std::vector<SegmentRange> kRanges = {{0, 0, 6144}, {3, 6144, 6144}, {1, 6144, 20000}, {2, 20000, 30000}};
const std::vector<size_t> kOrder = {2, 1, 3, 0};

core::StepScalars scalars(int64_t step) {
  return core::make_step_scalars(core::OptimizerKind::kAdamW, core::default_hyper_params(core::OptimizerKind::kAdamW),
                                 step, 1.0);
}

TEST(CpuSegment, EachLayerIsTheBackendsFusedPassOnItsChunkBitForBit) {
  CpuOptions one;
  one.threads = 1;
  one.steal_block_tiles = 0;
  CpuBackend plain(one);
  for (const auto& [threads, block] : std::vector<std::pair<size_t, size_t>>{{1, 0}, {3, 0}, {3, 1}, {4, 16}}) {
    Buffers s(30000), r(30000);
    CpuOptions co;
    co.threads = threads;
    co.steal_block_tiles = block;
    CpuSegment segment(co, core::OptimizerKind::kAdamW, s.views(), kRanges);
    CpuSegment reference(one, core::OptimizerKind::kAdamW, r.views(), kRanges);
    for (int64_t step = 1; step <= 3; ++step)
      for (size_t layer : kOrder) {
        const GradStats a = segment.update_layer(layer, scalars(step));
        const SegmentRange& rg =
            *std::find_if(kRanges.begin(), kRanges.end(), [&](auto& x) { return x.layer == layer; });
        const OptimChunk c = reference.chunk(rg.begin, rg.end);
        const GradStats b =
            rg.end > rg.begin ? plain.step(core::OptimizerKind::kAdamW, std::span(&c, 1), scalars(step)) : GradStats{};
        EXPECT_EQ(std::memcmp(&a.sumsq, &b.sumsq, sizeof a.sumsq), 0) << threads << "/" << block << " layer " << layer;
        EXPECT_EQ(a.nonfinite, b.nonfinite);
      }
    for (const auto& [x, y] : {std::pair{&s.master, &r.master}, {&s.s1, &r.s1}, {&s.s2, &r.s2}, {&s.copy, &r.copy}})
      EXPECT_EQ(std::memcmp(x->data(), y->data(), x->bytes()), 0) << threads << " threads, block " << block;
  }
}

// With staging rings, a layer's gradient is read from and its copy written to its slot: staged in and
// out by hand, the result is the full-size segment's bit for bit.
TEST(CpuSegment, StagingRingsGiveTheFullSizeBits) {
  Buffers full(30000), ring(30000);
  // kRanges in backward order: layer 2 (10000 elements) slot 0, layer 1 (13856) slot 1, layer 0 (6144)
  // slot 0 again; slot 0 holds the larger of its two layers
  const std::vector<int64_t> offsets = {0, 10000, 23856};
  const std::map<size_t, int32_t> slot_of = {{2, 0}, {1, 1}, {0, 0}, {3, 0}};
  SegmentBuffers rv = ring.views();
  HostRegion grad_ring(size_t(offsets.back()) * 2), copy_ring(size_t(offsets.back()) * 2);
  rv.grad = grad_ring.data();
  rv.copy = copy_ring.data();
  rv.staging_offsets = offsets;
  rv.staging_slots = {0, 1, 0};  // the ranges with elements from the segment's end: layers 2, 1, 0
  CpuSegment a(CpuOptions(2), core::OptimizerKind::kAdamW, rv, kRanges);
  CpuSegment b(CpuOptions(2), core::OptimizerKind::kAdamW, full.views(), kRanges);
  for (int64_t step = 1; step <= 3; ++step)
    for (size_t layer : kOrder) {
      const SegmentRange& rg = *std::find_if(kRanges.begin(), kRanges.end(), [&](auto& x) { return x.layer == layer; });
      const auto n = size_t(rg.end - rg.begin);
      const int64_t at = offsets[size_t(slot_of.at(layer))];
      std::memcpy(grad_ring.as<uint16_t>() + at, ring.grad.as<uint16_t>() + rg.begin, n * 2);  // the D2H
      a.update_layer(layer, scalars(step), slot_of.at(layer));
      std::memcpy(ring.copy.as<uint16_t>() + rg.begin, copy_ring.as<uint16_t>() + at, n * 2);  // the H2D
      b.update_layer(layer, scalars(step));
    }
  for (const auto& [x, y] :
       {std::pair{&ring.master, &full.master}, {&ring.s1, &full.s1}, {&ring.s2, &full.s2}, {&ring.copy, &full.copy}})
    EXPECT_EQ(std::memcmp(x->data(), y->data(), x->bytes()), 0);
  // a slot too small for its layer, or outside the ring, is refused
  EXPECT_THROW(a.update_layer(1, scalars(4), 0), core::InputError);
  EXPECT_THROW(a.update_layer(2, scalars(4), 2), core::InputError);
}

TEST(CpuSegment, FirstTouchZeroesEveryBufferOfEveryLayer) {
  Buffers b(30000);
  CpuSegment segment(CpuOptions(2), core::OptimizerKind::kAdamW, b.views(), kRanges);
  segment.first_touch();
  for (const HostRegion* r : {&b.master, &b.s1, &b.s2, &b.grad, &b.copy}) {
    const auto* p = r->as<unsigned char>();
    EXPECT_TRUE(std::all_of(p, p + r->bytes(), [](unsigned char c) { return c == 0; }));
  }
}

// The engine's probe of its own pages: filled with the measurements' values, every optimizer (on every ISA
// compiled in and supported, with staging rings) updates them, and first_touch leaves every byte zero again.
TEST(CpuSegment, ProbePassesRunOnRealValuesAndFirstTouchZeroesThemAgain) {
  const std::vector<int64_t> offsets = {0, 10000, 23856};  // kRanges in backward order: slots 0, 1, 0
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_available(isa)) continue;
    for (core::OptimizerKind k : {core::OptimizerKind::kAdamW, core::OptimizerKind::kAdam,
                                  core::OptimizerKind::kAdagrad, core::OptimizerKind::kLion}) {
      SCOPED_TRACE(std::string(isa_name(isa)) + " " + std::string(core::optimizer_name(k)));
      Buffers b(30000);
      HostRegion grad_ring(size_t(offsets.back()) * 2), copy_ring(size_t(offsets.back()) * 2);
      SegmentBuffers v = b.views();
      v.grad = grad_ring.data();
      v.copy = copy_ring.data();
      v.staging_offsets = offsets;
      v.staging_slots = {0, 1, 0};
      if (core::state_count(k) == 1) v.state2 = nullptr;
      CpuSegment segment(CpuOptions(3, false, int(isa)), k, v, kRanges);
      segment.first_touch();
      segment.fill_measurement_data();
      EXPECT_EQ(b.master.as<float>()[20000], cpu_fill_value(20000));
      EXPECT_EQ(b.s1.as<float>()[20000], k == core::OptimizerKind::kAdagrad
                                             ? float(core::default_hyper_params(k).initial_accumulator_value)
                                             : 0.f);
      const std::vector<float> filled(b.master.as<float>(), b.master.as<float>() + 30000);
      EXPECT_GT(segment.probe_pass(1), 0.0);
      EXPECT_GT(segment.probe_pass(2), 0.0);
      EXPECT_NE(std::memcmp(filled.data(), b.master.as<float>(), filled.size() * 4), 0);  // it really updated
      const auto* cp = copy_ring.as<uint16_t>();
      EXPECT_TRUE(std::any_of(cp, cp + offsets.back(), [](uint16_t x) { return x != 0; }));
      segment.first_touch();
      for (const HostRegion* r : {&b.master, &b.s1, &b.s2, &grad_ring, &copy_ring}) {
        const auto* p = r->as<unsigned char>();
        EXPECT_TRUE(std::all_of(p, p + r->bytes(), [](unsigned char c) { return c == 0; }));
      }
    }
  }
}

// The step plan's staging rings and the segment agree on every ring layout the planner makes: full-size staging
// in forward order after the norm (clipping with a carried tail), rings in either order, no norm wait. The
// segment takes each layer's slot from the plan (core::StagingRing::slot_of); where it restated the rule as
// "backward order" it first-touched a partial layer in a slot sized for a whole one (2026-11-30, tf_cuda_tests
// on two H200s: "staging slot 1 of 2 cannot hold elements [0, 14336)").
TEST(CpuSegment, FirstTouchAndUpdatesUseThePlansSlots) {
  const core::ModelDesc m = core::describe_model(core::make_mlp(std::vector<int64_t>(7, 1024)));
  const core::Partition part = core::make_partition(m, {3, 2, 2048});
  const core::TwinFlowSplit split = core::split_shard(part.ranks[0], 0.6, 2048);
  for (int slots : {core::kUnboundedStaging, 2, 3})
    for (bool clip : {false, true})
      for (bool forward : {false, true}) {
        SCOPED_TRACE("slots " + std::to_string(slots) + (clip ? " clip" : "") + (forward ? " forward" : ""));
        core::StepConfig c;
        c.staging_slots = slots;
        c.clip_gradients = clip;
        c.carry_tail = true;
        c.ring_forward_order = forward;
        const core::StepPlan plan = core::plan_step(m, part, split, c);
        ASSERT_EQ(plan.staging.slot_of.size(),
                  size_t(std::count_if(split.cpu.begin(), split.cpu.end(), [](auto& p) { return p.count > 0; })));
        Buffers b(size_t(split.cpu_elems));
        HostRegion grad_ring(size_t(plan.staging.elems()) * 2), copy_ring(size_t(plan.staging.elems()) * 2);
        SegmentBuffers v = b.views();
        v.grad = grad_ring.data();
        v.copy = copy_ring.data();
        v.staging_offsets = plan.staging.offsets;
        v.staging_slots = plan.staging.slot_of;
        CpuSegment segment(CpuOptions(2), core::OptimizerKind::kAdamW, v, segment_ranges(split));
        EXPECT_NO_THROW(segment.first_touch());
        EXPECT_NO_THROW(segment.fill_measurement_data());
        int passes = 0;
        for (const core::Op& op : plan.ops)
          if (op.kind == core::OpKind::kCpuOptimizer) {
            EXPECT_NO_THROW(segment.update_layer(size_t(op.layer), scalars(1), op.staging_slot)) << op.layer;
            ++passes;
          }
        EXPECT_EQ(size_t(passes), plan.staging.slot_of.size());
      }
}

// A ring without each range's slot, or with a slot outside it, is refused when the segment is made.
TEST(CpuSegment, RingsNeedASlotPerRange) {
  Buffers b(30000);
  HostRegion grad_ring(23856 * 2), copy_ring(23856 * 2);
  SegmentBuffers v = b.views();
  v.grad = grad_ring.data();
  v.copy = copy_ring.data();
  v.staging_offsets = {0, 10000, 23856};
  EXPECT_THROW(CpuSegment(CpuOptions(1), core::OptimizerKind::kAdamW, v, kRanges), core::InputError);
  v.staging_slots = {0, 2, 0};
  EXPECT_THROW(CpuSegment(CpuOptions(1), core::OptimizerKind::kAdamW, v, kRanges), core::InputError);
  v.staging_slots = {0, 1, 0};
  EXPECT_NO_THROW(CpuSegment(CpuOptions(1), core::OptimizerKind::kAdamW, v, kRanges));
}

TEST(CpuSegment, RangesMustNotOverlapNorRepeatALayer) {
  Buffers b(100);
  const CpuOptions co(1);
  EXPECT_THROW(CpuSegment(co, core::OptimizerKind::kAdamW, b.views(), {{0, 0, 50}, {1, 40, 100}}), core::InputError);
  EXPECT_THROW(CpuSegment(co, core::OptimizerKind::kAdamW, b.views(), {{0, 0, 50}, {0, 50, 100}}), core::InputError);
  EXPECT_THROW(CpuSegment(co, core::OptimizerKind::kAdamW, b.views(), {{0, 50, 40}}), core::InputError);
  CpuSegment ok(co, core::OptimizerKind::kAdamW, b.views(), {{4, 0, 100}});
  EXPECT_EQ(ok.update_layer(2, scalars(1)).nonfinite, 0u);  // no CPU part: nothing to do
}

TEST(CpuSegment, RangesOfASplitStartAtItsBoundary) {
  core::TwinFlowSplit split;
  split.boundary = 4096;
  split.cpu = {core::ShardPiece{5, 2048, 2048, 2048, 4096}, core::ShardPiece{6, 0, 6144, 6000, 6144}};
  EXPECT_EQ(segment_ranges(split), (std::vector<SegmentRange>{{5, 0, 2048}, {6, 2048, 8192}}));
}

uint64_t fnv1a(uint64_t h, const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  return h;
}

// The worker's answers to a session of commands, on a thread of its own (init confines the calling
// thread to the rank's CPUs, as a worker process confines itself).
std::vector<std::string> worker_session(const std::string& commands) {
  std::istringstream in(commands);
  std::ostringstream out;
  int rc = -1;
  std::thread t([&] { rc = app::run_cpu_rank_worker(in, out); });
  t.join();
  EXPECT_EQ(rc, 0);
  std::vector<std::string> lines;
  std::istringstream o(out.str());
  for (std::string l; std::getline(o, l);) lines.push_back(l);
  return lines;
}

// setup runs one warm-up pass (step 1), then two passes (steps 2, 3) in the given order: the worker's
// segment ends where the layers' fused passes in that order leave it.
TEST(CpuRankWorker, RunsEveryLayerInOrderAsTheSegmentDoes) {
  Buffers r(30000);
  CpuSegment reference(CpuOptions(1), core::OptimizerKind::kAdamW, r.views(), kRanges);
  for (int64_t step = 1; step <= 3; ++step)
    for (size_t layer : kOrder) reference.update_layer(layer, scalars(step));
  uint64_t h = 0xCBF29CE484222325ull;
  for (const HostRegion* x : {&r.master, &r.s1, &r.s2, &r.copy}) h = fnv1a(h, x->data(), x->bytes());
  std::ostringstream want;
  want << "digest " << std::hex << h;

  const std::string layout = "ranges 4 0 0 6144 3 6144 6144 1 6144 20000 2 20000 30000\norder 4 2 1 3 0\n";
  for (const char* setup :
       {"setup adamw bf16 bf16 default", "setup adamw bf16 bf16 prefetch=0,nt=1,block=0",
        "setup adamw bf16 bf16 unroll=4,level=1,spin=20", "setup adamw bf16 bf16 interleave=2,nt=1"}) {
    const std::vector<std::string> a =
        worker_session("init 0 1 2 1 1\n" + layout + setup + "\npass\npass\ndigest\nquit\n");
    ASSERT_EQ(a.size(), 5u);
    EXPECT_EQ(a[0].rfind("ready 2 ", 0), 0u) << a[0];
    EXPECT_EQ(a[1].rfind("ok ", 0), 0u) << a[1];  // and the share of huge pages
    EXPECT_EQ(a[2].rfind("t ", 0), 0u) << a[2];
    EXPECT_EQ(a[4], want.str()) << setup;
  }
  // a bound pass moves the master and states (p += g); the next pass refills them and runs step 2, the one
  // after it step 3 (the reference ran steps 1, 2, 3 from the fill): a different digest
  const std::vector<std::string> b =
      worker_session("init 0 1 1 1 0\n" + layout + "setup adamw bf16 bf16 default\nbound\npass\npass\ndigest\n");
  ASSERT_EQ(b.size(), 6u);
  EXPECT_EQ(b[2].rfind("t ", 0), 0u) << b[2];
  EXPECT_EQ(b[3].rfind("t ", 0), 0u) << b[3];
  EXPECT_NE(b[5], want.str());
  const std::vector<std::string> bad = worker_session("init 0 1 1 1 1\n" + layout + "setup adamw bf16 bf16 unroll=3\n");
  EXPECT_NE(bad[1].find("unroll 3 is not implemented"), std::string::npos) << bad[1];
  // resident memory beside the segment leaves the passes' results alone; it needs a setup and a size
  const std::vector<std::string> res = worker_session(
      "init 0 1 2 1 0\n" + layout + "setup adamw bf16 bf16 default\nresident 12345678\npass\npass\ndigest\n");
  ASSERT_EQ(res.size(), 6u);
  EXPECT_EQ(res[2], "ok");
  EXPECT_EQ(res[5], want.str());
  const std::vector<std::string> rbad =
      worker_session("init 0 1 1 1 0\n" + layout + "resident 4096\nsetup adamw bf16 bf16 default\nresident -1\n");
  ASSERT_EQ(rbad.size(), 4u);
  EXPECT_EQ(rbad[1], "error resident before setup");
  EXPECT_EQ(rbad[3], "error resident: malformed");
  // out of place (into the spare slot and back, CpuUpdate) the same math: the digest of the current slot is the
  // in-place one after any mix, with and without streaming stores; an unknown pass mode names the two
  for (const char* passes : {"pass oop\npass oop\n", "pass oop\npass\n", "pass\npass oop\n"})
    for (const char* setup : {"setup adamw bf16 bf16 default", "setup adamw bf16 bf16 ntoop=0"}) {
      const std::vector<std::string> o =
          worker_session("init 0 1 2 1 0\n" + layout + setup + "\n" + passes + "digest\nquit\n");
      ASSERT_EQ(o.size(), 5u);
      EXPECT_EQ(o[2].rfind("t ", 0), 0u) << o[2];
      EXPECT_EQ(o[4], want.str()) << setup << " " << passes;
    }
  const std::vector<std::string> m =
      worker_session("init 0 1 1 1 0\n" + layout + "setup adamw bf16 bf16 default\npass sideways\n");
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[2], "error pass: unknown mode 'sideways' (none or oop)");
  const std::vector<std::string> e = worker_session("pass\ninit 0 2 1 1 1\nbogus\nquit\n");
  EXPECT_EQ(e[0].rfind("error ", 0), 0u) << e[0];
  EXPECT_EQ(e[2].rfind("error unknown command", 0), 0u) << e[2];
}

}  // namespace
}  // namespace tf::backend::cpu

namespace tf::app {
namespace {

// The engine's CPU op that calibrate measures the rank curve and the copies at: without a scenario the
// documented 2^24 elements of bf16; with OPT-1.3B (h 2048, ffn 8192, 24 blocks between the embedding and
// the head) the median layer piece is a block, 12 h^2 + 13 h parameters (QKV 3h^2 + 3h, out h^2 + h, fc1
// and fc2 8h^2 + 5h, two LayerNorms 4h), its copy in bf16.
TEST(EngineCpuOp, TheDefaultOpAndAScenariosMedianLayer) {
  const EngineCpuOp none = engine_cpu_op({});
  EXPECT_EQ(none.elems, int64_t(1) << 24);
  EXPECT_EQ(none.copy_bytes, int64_t(2) << 24);
  const core::Scenario s = core::load_scenario(std::string(TWINFLOW_SOURCE_DIR) + "/scenarios/real/opt-1.3b-h100.yaml");
  const EngineCpuOp op = engine_cpu_op({s});
  const int64_t h = 2048;
  EXPECT_EQ(op.elems, 12 * h * h + 13 * h);
  EXPECT_EQ(op.copy_bytes, 2 * (12 * h * h + 13 * h));
  EXPECT_NE(op.what.find("opt-1.3b-h100"), std::string::npos) << op.what;
}

}  // namespace
}  // namespace tf::app
