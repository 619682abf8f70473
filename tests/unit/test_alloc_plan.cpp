// The allocation plan: every buffer by hand for a toy MLP (the engine's and the MLP workload's), the
// memory model as its sum, the stages' and worlds' differences, and the decoder workload's buffers.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/alloc_plan.h"
#include "core/error.h"
#include "core/local_kernels.h"
#include "core/memory.h"
#include "core/rank_plan.h"

using namespace tf::core;

namespace {

// MLP 1000 -> 3000 -> 2000 -> 10 with bias: layers of 3003000, 6002000 and 20010 parameters.
ModelDesc toy() { return describe_model(make_mlp({1000, 3000, 2000, 10})); }

std::map<std::string, int64_t> bytes_by_name(const AllocPlan& p) {
  std::map<std::string, int64_t> out;
  for (const BufferSpec& b : p.buffers) {
    EXPECT_EQ(out.count(b.name), 0u) << b.name << " listed twice";
    out[b.name] = b.bytes;
  }
  return out;
}

// 9 equal MLP layers of 1049600 parameters padded to 1050624 elements (kNineLayerElems), all on the CPU
// (world 1, ratio 1): the staging tests' rank.
constexpr int64_t kNineLayerElems = 1050624;
struct NineCpuLayers {
  ModelDesc m;
  Partition p;
  TwinFlowSplit t;
};
NineCpuLayers nine_cpu_layers() {
  ModelDesc m = describe_model(make_mlp(std::vector<int64_t>(10, 1024)));
  Partition p = make_partition(m, {3, 1, 2048});
  TwinFlowSplit t = split_shard(p.ranks[0], 1.0, 2048);
  return {std::move(m), std::move(p), std::move(t)};
}

}  // namespace

TEST(AllocPlan, HandComputedToyOneRank) {
  const ModelDesc m = toy();
  const Partition p = make_partition(m, {3, 1, 2048});
  const RankShard& s = p.ranks[0];
  ASSERT_EQ(s.elems, 3004416 + 6002688 + 20480);  // each layer padded to a multiple of 2048
  const TwinFlowSplit t = split_shard(s, 0.5, 2048);
  ASSERT_EQ(t.cpu_elems, 4513792);  // 2204 of the 4408 2048-element units
  MemoryOptions o;
  o.step.micro_batch = 4;
  o.step.grad_accum = 2;
  o.workload = WorkloadType::kMlp;
  o.unnamed.context_bytes = 1000;
  const std::map<std::string, int64_t> b = bytes_by_name(plan_allocations(m, p, s, t, o));
  const int64_t g = t.gpu_elems, n = t.cpu_elems;
  const int64_t tiles = 1467 + 2931 + 10;  // ceil(params / 2048) per layer
  const std::map<std::string, int64_t> want = {
      // the engine's GPU buffers: bf16 shard, GPU segment's master and two AdamW states, reduced
      // gradients and their fp32 accumulation, two gradient buffers of the largest padded layer (one
      // rank: no gather or receive buffers), the statistics table and fold scratch (+ 16-byte result),
      // two counters, the optimizer's tile sums, 1 + 3 chunk descriptors of 72 bytes
      {"params", s.elems * 2},
      {"gpu_master", g * 4},
      {"gpu_state1", g * 4},
      {"gpu_state2", g * 4},
      {"grads", s.elems * 2},
      {"grad_accum", s.elems * 4},
      {"layer_grad.0", 6002688 * 2},
      {"layer_grad.1", 6002688 * 2},
      {"stats_table", 8 * (tiles + 1)},
      {"fold_scratch", 8 * tiles + 16},
      {"counters", 16},
      {"optimizer_tile_sums", 8 * (g / 2048)},
      {"descriptors", 4 * 72},
      // host: the CPU segment's master and states, gradient landing (bf16) and copy (bf16), the norm
      {"host_master", n * 4},
      {"host_state1", n * 4},
      {"host_state2", n * 4},
      {"host_grad", n * 2},
      {"host_copy", n * 2},
      {"host_norm", 16},
      // the MLP workload at B = 4: GEMM slack 256 rows x the widest layer (3000) x 2 B = 1536000 on
      // every operand; x_l (4 x d_l) bf16; dY of the layers with (last - l) even: max(4 x 10, 4 x 3000),
      // odd: 4 x 2000; the bias gradient's one chunk x the widest output (3000) fp32; loss partials of
      // min(4, 1024) blocks; one loss sum per micro-batch; the teacher's 10 x 4 taps; cuBLAS's 32 MiB
      {"mlp.act.0", 4 * 1000 * 2 + 1536000},
      {"mlp.act.1", 4 * 3000 * 2 + 1536000},
      {"mlp.act.2", 4 * 2000 * 2 + 1536000},
      {"mlp.dy.0", 4 * 3000 * 2 + 1536000},
      {"mlp.dy.1", 4 * 2000 * 2 + 1536000},
      {"mlp.bias_partials", 1 * 3000 * 4},
      {"mlp.loss_partials", 4 * 4},
      {"mlp.loss_sums", 2 * 4},
      {"mlp.taps", 10 * 4 * 4},
      {"cublas_workspace", 32 << 20},
      {"cuda_context", 1000},
  };
  EXPECT_EQ(b, want);
  // fp16 gradients: the weight gradient's fp32 scratch (the largest weight, 3000 x 2000)
  o.step.grad_dtype = DType::kF16;
  EXPECT_EQ(bytes_by_name(plan_allocations(m, p, s, t, o)).at("mlp.dw32"), 3000 * 2000 * 4);
}

TEST(AllocPlan, WorldsAndStages) {
  const ModelDesc m = toy();
  MemoryOptions o;
  o.step.prefetch_layers = 3;
  o.workload = WorkloadType::kSynthetic;  // no workload buffers
  for (int stage : {1, 2, 3})
    for (int world : {1, 2, 4}) {
      const Partition p = make_partition(m, {stage, world, 2048});
      const AllocPlan a = plan_allocations(m, p, p.ranks[0], split_shard(p.ranks[0], 0.3, 2048), o);
      const bool exchange = stage == 3 && world > 1;
      int64_t padded = 0;
      for (int64_t sl : p.layer_slice) padded = std::max(padded, sl * world);
      for (int i = 0; i < 3; ++i) EXPECT_EQ(a.has(buffer_name(buf::kGather, i)), exchange) << stage << " " << world;
      EXPECT_FALSE(a.has(buffer_name(buf::kGather, 3)));
      for (int i = 0; i < kGradSlots; ++i) {
        EXPECT_EQ(a.has(buffer_name(buf::kRecv, i)), world > 1);  // every stage reduces by exchange
        EXPECT_EQ(a.at(buffer_name(buf::kLayerGrad, i)).bytes, padded * 2);
      }
      // the toy's layers padded to world x 2048: 3003000, 6002000, 20010 -> the padded model
      const int64_t unit = world * 2048;
      const int64_t model =
          (3003000 + unit - 1) / unit * unit + (6002000 + unit - 1) / unit * unit + (20010 + unit - 1) / unit * unit;
      ASSERT_EQ(world * p.ranks[0].elems, model);
      EXPECT_EQ(a.at(buf::kParams).bytes, model / world * 2) << "the shard the optimizers write, every stage";
      EXPECT_EQ(a.has(buf::kReplica), stage < 3 && world > 1);
      if (a.has(buf::kReplica)) {
        EXPECT_EQ(a.at(buf::kReplica).bytes, model * 2);
      }
      EXPECT_EQ(a.at(buf::kGrads).bytes, (stage >= 2 ? model / world : model) * 2);
      EXPECT_FALSE(a.has(buf::kGradAccum));
      EXPECT_FALSE(a.has(buffer_name(buf::kMlpAct, 0)));
    }
  // one-state optimizers keep one state array per segment
  o.step.optimizer = OptimizerKind::kLion;
  const Partition p = make_partition(m, {3, 1, 2048});
  const AllocPlan a = plan_allocations(m, p, p.ranks[0], split_shard(p.ranks[0], 0.3, 2048), o);
  EXPECT_FALSE(a.has(buf::kGpuState2));
  EXPECT_FALSE(a.has(buf::kHostState2));
}

// Gradient accumulation keeps the shard's fp32 sums on every stage (each reduces every micro-batch).
TEST(AllocPlan, GradAccumulationOnEveryStage) {
  const ModelDesc m = toy();
  MemoryOptions o;
  o.step.grad_accum = 3;
  o.workload = WorkloadType::kSynthetic;
  for (int stage : {1, 2, 3})
    for (int world : {1, 4}) {
      const Partition p = make_partition(m, {stage, world, 2048});
      const RankShard& r = p.ranks[size_t(1 % world)];
      const AllocPlan a = plan_allocations(m, p, r, split_shard(r, 0.3, 2048), o);
      EXPECT_EQ(a.at(buf::kGradAccum).bytes, r.elems * 4) << stage << " " << world;
    }
}

// The replicated model's layout (padded layers in model order) and stage 1's rank-rotated gradient blocks.
TEST(AllocPlan, ReplicaOffsetsAndStage1Blocks) {
  const ModelDesc m = toy();
  const Partition p = make_partition(m, {2, 4, 2048});
  const std::vector<int64_t> off = replica_layer_offsets(p);
  // 3003000 -> 3006464 (367 x 8192), 6002000 -> 6004736 (733 x 8192), 20010 -> 24576 (3 x 8192)
  EXPECT_EQ(off, (std::vector<int64_t>{0, 3006464, 3006464 + 6004736, 3006464 + 6004736 + 24576}));
  EXPECT_EQ(off.back(), 4 * p.ranks[2].elems);
  // rank 2 of 4 keeps its own shard first, then ranks 3, 0, 1
  EXPECT_EQ(stage1_grad_block(2, 2, 4), 0);
  EXPECT_EQ(stage1_grad_block(2, 3, 4), 1);
  EXPECT_EQ(stage1_grad_block(2, 0, 4), 2);
  EXPECT_EQ(stage1_grad_block(2, 1, 4), 3);
  EXPECT_EQ(stage1_grad_block(0, 0, 1), 0);
}

// The memory model is the plan summed by kind: every term, and the totals, are the plan's bytes.
TEST(AllocPlan, MemoryModelIsThePlansSum) {
  const ModelDesc m = toy();
  for (int world : {1, 2})
    for (double ratio : {0.0, 0.4, 1.0}) {
      const Partition p = make_partition(m, {3, world, 2048});
      MemoryOptions o;
      o.step.grad_accum = 3;
      o.step.micro_batch = 16;
      const RankPlan rp = plan_rank(m, p, world - 1, ratio, o);
      const RankMemory r = rank_memory(m, p, p.ranks[size_t(world - 1)], rp.split, o);
      const AllocPlan& a = rp.alloc;
      EXPECT_EQ(r.gpu_total, a.bytes(MemPlace::kGpu));
      EXPECT_EQ(r.host_total, a.bytes(MemPlace::kHost));
      EXPECT_EQ(r.gpu_params, a.bytes(MemPlace::kGpu, MemKind::kParams));
      EXPECT_EQ(r.gpu_grads, a.bytes(MemPlace::kGpu, MemKind::kGrads));
      EXPECT_EQ(r.gpu_optimizer, a.bytes(MemPlace::kGpu, MemKind::kOptimizer));
      EXPECT_EQ(r.gpu_activations, a.bytes(MemPlace::kGpu, MemKind::kActivations));
      EXPECT_EQ(r.gpu_comm, a.bytes(MemPlace::kGpu, MemKind::kComm));
      EXPECT_EQ(r.gpu_workspace, a.bytes(MemPlace::kGpu, MemKind::kWorkspace));
      EXPECT_EQ(r.gpu_context, a.bytes(MemPlace::kGpu, MemKind::kContext));
      EXPECT_EQ(r.host_optimizer, a.bytes(MemPlace::kHost, MemKind::kOptimizer));
      EXPECT_EQ(r.host_staging, a.bytes(MemPlace::kHost, MemKind::kStaging));
      EXPECT_EQ(r.host_workspace, a.bytes(MemPlace::kHost, MemKind::kWorkspace));
      EXPECT_EQ(r.gpu_total, r.gpu_params + r.gpu_grads + r.gpu_optimizer + r.gpu_activations + r.gpu_comm +
                                 r.gpu_workspace + r.gpu_context);
      EXPECT_EQ(r.host_total, r.host_optimizer + r.host_staging + r.host_workspace);
      // the step plan of the same call is plan_step's
      EXPECT_EQ(rp.step, plan_step(m, p, rp.split, o.step));
    }
}

// A decoder at micro-batch 8, seq 1024 (T = 8192 rows; every (T, w) bf16 buffer holds 8192 + 256 GEMM
// slack rows = 8448). What the decoder workload allocates, summed by kind, by hand:
//   block set (a, qkv, o, x2, c, u, g: 7h + 2f bf16 columns) 8448 * (7h + 2f) * 2 + stats (4 + H) * T * 4,
//     one per block, or one shared set with checkpointing;
//   x_0..x_L (L + 1) * 8448 * h * 2; z 8448 * h * 2 + its (2T) fp32 statistics; logits 8448 * V * 2;
//   backward dx, dh 8448 * h * 2 each, df 8448 * f * 2, dqkv 8448 * 3h * 2; the tied head's dE (V, h) fp32;
//   tokens, targets, token_rows, row_loss T * 4 each; token_starts (V + 1) * 4; loss sums 1 * 4.
//   workspace: attention's D T * H * 4, the column-sum partials max(T/32 * 2h, T/64 * 3h, T/64 * f) * 4,
//   cuBLAS's 32 MiB. Host (pinned): one micro-batch's (3T + V + 1) int32.
//   gpt-tiny (L 2, h 64, H 4, f 256, V 512), positions raised to 1024:
//     set 8448 * 960 * 2 + 8 * 8192 * 4 = 16220160 + 262144 = 16482304
//     rest 3 * 1081344 + 1081344 + 65536 + 8650752 + 2 * 1081344 + 4325376 + 3244032 + 131072 + 131072 + 2052 + 4
//          = 23037960; activations 2 * set + rest = 56002568, checkpointed set + rest = 39520264
//     workspace 131072 + 256 * 128 * 4 + 33554432 = 33816576 (the LayerNorm partials and fc1's bias ones tie)
//     host (24576 + 513) * 4 = 100356
//   opt-1.3b (L 24, h 2048, H 32, f 8192, V 50272):
//     set 8448 * 30720 * 2 + 36 * 8192 * 4 = 519045120 + 1179648 = 520224768
//     rest 25 * 34603008 + 34603008 + 65536 + 849395712 + 2 * 34603008 + 138412032 + 103809024 + 411828224
//          + 131072 + 201092 + 4 = 2472726920; activations 24 * set + rest = 14958121352,
//          checkpointed set + rest = 2992951688
//     workspace 1048576 + 256 * 4096 * 4 + 33554432 = 38797312; host (24576 + 50273) * 4 = 299396
TEST(AllocPlan, DecoderBuffersByHand) {
  struct Case {
    const char* preset;
    int64_t activations, checkpointed, workspace, host;
  };
  for (const Case& c : {Case{"gpt-tiny", 56002568, 39520264, 33816576, 100356},
                        Case{"opt-1.3b", 14958121352, 2992951688, 38797312, 299396}}) {
    ModelSpec spec = model_preset(c.preset);
    spec.decoder.seq = 1024;
    spec.decoder.max_positions = std::max<int64_t>(spec.decoder.max_positions, 1024);
    const ModelDesc m = describe_model(spec);
    for (bool ckpt : {false, true}) {
      StepConfig step;
      step.micro_batch = 8;
      step.checkpointing = ckpt;
      AllocPlan w;
      w.buffers = workload_buffers(m, WorkloadType::kDecoder, step);
      const std::string at = std::string(c.preset) + (ckpt ? " checkpointed" : "");
      EXPECT_EQ(w.bytes(MemPlace::kGpu, MemKind::kActivations), ckpt ? c.checkpointed : c.activations) << at;
      EXPECT_EQ(w.bytes(MemPlace::kGpu, MemKind::kWorkspace), c.workspace) << at;
      EXPECT_EQ(w.bytes(MemPlace::kHost, MemKind::kStaging), c.host) << at;
      EXPECT_EQ(w.bytes(MemPlace::kGpu) + w.bytes(MemPlace::kHost),
                ckpt ? c.checkpointed + c.workspace + c.host : c.activations + c.workspace + c.host)
          << at << ": no other kinds";
      std::map<std::string, int> seen;
      for (const BufferSpec& b : w.buffers) {
        EXPECT_TRUE(b.allocated) << b.name;
        EXPECT_EQ(seen[b.name]++, 0) << b.name << " listed twice";
      }
      // the rank's plan is the engine's buffers plus these, and the memory model sums it
      const Partition p = make_partition(m, {3, 1, 2048});
      const TwinFlowSplit t = split_shard(p.ranks[0], 0.0, 2048);
      MemoryOptions with, without;
      with.step = without.step = step;
      with.workload = WorkloadType::kDecoder;
      without.workload = WorkloadType::kSynthetic;
      const AllocPlan a = plan_allocations(m, p, p.ranks[0], t, with);
      EXPECT_EQ(a.bytes(MemPlace::kGpu),
                plan_allocations(m, p, p.ranks[0], t, without).bytes(MemPlace::kGpu) + w.bytes(MemPlace::kGpu))
          << at;
      EXPECT_EQ(rank_memory(m, p, p.ranks[0], t, with).gpu_activations, w.bytes(MemPlace::kGpu, MemKind::kActivations));
    }
  }
}

// The tutorial's GPT-350M (mb 8, seq 2048, no checkpointing) needs about 15 GB of activations with the
// fused attention, where the estimate before the workload booked 81.5 GB (an s x s score matrix).
TEST(AllocPlan, TutorialDecoderActivationsFitAnH100) {
  ModelSpec spec = model_preset("gpt2-350m");
  spec.decoder.seq = spec.decoder.max_positions = 2048;
  StepConfig step;
  step.micro_batch = 8;
  AllocPlan w;
  w.buffers = workload_buffers(describe_model(spec), WorkloadType::kAuto, step);
  const int64_t act = w.bytes(MemPlace::kGpu, MemKind::kActivations);
  // T = 16384 rows, 16640 with slack. Per block 16640 * (7 * 1024 + 2 * 4096) * 2 + (4 + 16) * 16384 * 4
  // = 512491520; the rest 25 x (16640, 1024) bf16 + z + 2T fp32 + logits 16640 * 50264 * 2 (rows padded to
  // 16 bytes) + dx, dh, df, dqkv + dE 50257 * 1024 * 4 + 4T int32/fp32 + 50258 * 4 + 4 = 3071988044
  EXPECT_EQ(act, 24 * int64_t(512491520) + 3071988044);
  // GPT-2's vocabulary is not a multiple of 8: the split logits GEMM's fp32 dz' (T, h), a workspace
  const auto dz32 =
      std::find_if(w.buffers.begin(), w.buffers.end(), [](const BufferSpec& b) { return b.name == buf::kDecDz32; });
  ASSERT_NE(dz32, w.buffers.end());
  EXPECT_EQ(dz32->bytes, 16384 * 1024 * 4);
  EXPECT_EQ(dz32->kind, MemKind::kWorkspace);
  EXPECT_LT(act, int64_t(16e9));
}

TEST(AllocPlan, DecoderWorkloadKinds) {
  const ModelDesc m = describe_model(model_preset("gpt-tiny"));
  EXPECT_EQ(workload_buffers(m, WorkloadType::kAuto, StepConfig{}),
            workload_buffers(m, WorkloadType::kDecoder, StepConfig{}));  // auto: the decoder trained for real
  EXPECT_TRUE(workload_buffers(m, WorkloadType::kSynthetic, StepConfig{}).empty());
  EXPECT_THROW(workload_buffers(m, WorkloadType::kMlp, StepConfig{}), InputError);
  EXPECT_THROW(workload_buffers(toy(), WorkloadType::kDecoder, StepConfig{}), InputError);
  // kAuto on an MLP is the MLP workload's list
  const ModelDesc mlp = toy();
  EXPECT_EQ(workload_buffers(mlp, WorkloadType::kAuto, StepConfig{}),
            workload_buffers(mlp, WorkloadType::kMlp, StepConfig{}));
  // fp16 gradients add the fp32 scratch of the largest GEMM weight (fc1, fc2: 256 x 64)
  StepConfig f16;
  f16.grad_dtype = DType::kF16;
  AllocPlan w;
  w.buffers = workload_buffers(m, WorkloadType::kDecoder, f16);
  EXPECT_EQ(w.at(buf::kDecDw32).bytes, 256 * 64 * 4);
  // OPT with project_in/out keeps E[tok], z' and their gradient (T, e); post-LN has no final LN
  const ModelDesc proj = describe_model(model_preset("opt-tiny-proj"));
  w.buffers = workload_buffers(proj, WorkloadType::kDecoder, StepConfig{});
  const int64_t T = proj.spec.decoder.seq, e = embed_width(proj.spec.decoder);
  for (std::string_view n : {buf::kDecEin, buf::kDecZp, buf::kDecDe}) EXPECT_EQ(w.at(n).bytes, (T + 256) * e * 2) << n;
  EXPECT_FALSE(w.has(buf::kDecZ));
}

// ZeRO-3 with several ranks gathers the embedding for the tied head into one more buffer.
TEST(AllocPlan, SharedGatherBuffer) {
  const ModelDesc m = describe_model(model_preset("gpt-tiny"));
  for (int world : {1, 2, 4}) {
    const Partition p = make_partition(m, {3, world, 2048});
    const AllocPlan a = plan_allocations(m, p, p.ranks[0], split_shard(p.ranks[0], 0.3, 2048), MemoryOptions{});
    ASSERT_EQ(a.has(buf::kGatherShared), world > 1) << world;
    if (world > 1) {
      EXPECT_EQ(a.at(buf::kGatherShared).kind, MemKind::kComm);
      EXPECT_EQ(a.at(buf::kGatherShared).bytes, p.layer_slice[0] * world * 2);  // the embedding layer, bf16
    }
  }
  const ModelDesc mlp = toy();
  const Partition p = make_partition(mlp, {3, 2, 2048});
  EXPECT_FALSE(plan_allocations(mlp, p, p.ranks[0], split_shard(p.ranks[0], 0.3, 2048), MemoryOptions{})
                   .has(buf::kGatherShared));
}

TEST(AllocPlan, UnknownNameIsAnError) {
  const ModelDesc m = toy();
  const Partition p = make_partition(m, {3, 1, 2048});
  const AllocPlan a = plan_allocations(m, p, p.ranks[0], split_shard(p.ranks[0], 0.5, 2048), MemoryOptions{});
  EXPECT_THROW((void)a.at("no-such-buffer"), InputError);
}

// Issue 16: the CPU segment costs its fp32 state plus the staging rings. 9 equal MLP layers of 1049600
// parameters padded to 1050624, all on the CPU (world 1, ratio 1): AdamW's master + 2 states are
// 12 B/param; each ring holds 3 slots of one layer in 2 B elements: 2 x 3 x 2 / 9 = 1.33 B/param
// (full-size staging would be 4 B/param).
TEST(AllocPlan, StagingRingsCostBoundedHostMemory) {
  const auto [m, p, t] = nine_cpu_layers();
  const int64_t layer = kNineLayerElems, n = 9 * layer;
  ASSERT_EQ(t.cpu_elems, n);
  MemoryOptions o;
  o.workload = WorkloadType::kSynthetic;
  const AllocPlan a = plan_allocations(m, p, p.ranks[0], t, o);
  EXPECT_EQ(a.at(buf::kHostGrad).bytes, 3 * layer * 2);
  EXPECT_EQ(a.at(buf::kHostCopy).bytes, 3 * layer * 2);
  EXPECT_EQ(a.at(buf::kHostGrad).kind, MemKind::kStaging);
  const RankMemory r = sum_by_kind(a);
  EXPECT_EQ(r.host_staging, 4 * 3 * layer);
  EXPECT_EQ(r.host_optimizer, 12 * n);
  const HostBytesPerParam b = host_bytes_per_cpu_param(a, n);
  EXPECT_DOUBLE_EQ(b.optimizer, 12.0);
  EXPECT_DOUBLE_EQ(b.staging, 12.0 / 9.0);
  EXPECT_EQ(host_bytes_per_cpu_param(a, 0).total(), 0.0);
  // unbounded staging is full size: 4 B/param
  o.step.staging_slots = kUnboundedStaging;
  const AllocPlan full = plan_allocations(m, p, p.ranks[0], t, o);
  EXPECT_DOUBLE_EQ(host_bytes_per_cpu_param(full, n).staging, 4.0);
  // a host that holds the state and the rings but not full-size staging now fits ratio 1 (the GPU is
  // ample): the feasible range reads the plan's ring sizes
  const int64_t host = 12 * n + 4 * 3 * layer + kNormResultBytes;
  o.step.staging_slots = kStagingSlots;
  const RatioRange fits = feasible_ratios(m, p, o, int64_t(1) << 40, host);
  ASSERT_TRUE(fits.feasible) << fits.why;
  EXPECT_EQ(fits.max_ratio, 1.0);
  o.step.staging_slots = kUnboundedStaging;
  EXPECT_LT(feasible_ratios(m, p, o, int64_t(1) << 40, host).max_ratio, 1.0);
}

// Issues 15 and 16 together: with clipping and a speculation budget, the spare state slots of the
// speculated layers count too. The 9 equal layers of above: with 3 staging slots the first 3 CPU layers
// in backward order speculate (12 B each element: 3 x 12 / 9 = 4 B/param); with unbounded staging
// every layer but layer 0 does (8 x 12 / 9).
TEST(AllocPlan, HostBytesPerCpuParamCountsTheSpareSlotsAndTheRings) {
  const auto [m, p, t] = nine_cpu_layers();
  const int64_t layer = kNineLayerElems, n = 9 * layer;
  MemoryOptions o;
  o.workload = WorkloadType::kSynthetic;
  o.step.clip_gradients = true;
  o.step.speculation_bytes = int64_t(1) << 40;
  const AllocPlan a = plan_allocations(m, p, p.ranks[0], t, o);
  EXPECT_EQ(a.at(buf::kHostMasterSpare).bytes, 3 * layer * 4);
  EXPECT_EQ(a.at(buf::kHostState2Spare).bytes, 3 * layer * 4);
  const HostBytesPerParam b = host_bytes_per_cpu_param(a, n);
  EXPECT_DOUBLE_EQ(b.optimizer, 12.0);
  EXPECT_DOUBLE_EQ(b.spare, 4.0);
  EXPECT_DOUBLE_EQ(b.staging, 12.0 / 9.0);
  EXPECT_DOUBLE_EQ(b.total(), 12.0 + 4.0 + 12.0 / 9.0);
  const RankMemory r = sum_by_kind(a);
  EXPECT_EQ(r.host_optimizer, 12 * n + 12 * 3 * layer);  // the spare slots are optimizer memory
  EXPECT_EQ(r.host_staging, 4 * 3 * layer);
  o.step.staging_slots = kUnboundedStaging;
  const HostBytesPerParam full = host_bytes_per_cpu_param(plan_allocations(m, p, p.ranks[0], t, o), n);
  EXPECT_DOUBLE_EQ(full.spare, 12.0 * 8 / 9);
  EXPECT_DOUBLE_EQ(full.staging, 4.0);
}

// `staging_slots: auto` (core::resolve_staging_slots): full-size staging where the rank's plan at
// full-size staging without speculation fits the host, else kStagingSlots; explicit slots are kept; an
// unknown host (0) stages full-size. The 9 equal layers of above, all on the CPU: AdamW's 12 B/param of
// state plus full-size staging's 4 B/param (2 B gradient landing + 2 B bf16 copy) and the norm's result.
TEST(AllocPlan, StagingAutoIsFullSizeWhereTheHostHoldsIt) {
  const auto [m, p, t] = nine_cpu_layers();
  const RankShard& shard = p.ranks[0];
  const int64_t layer = kNineLayerElems, n = 9 * layer;
  const int64_t full = 16 * n + kNormResultBytes;
  MemoryOptions o;
  o.workload = WorkloadType::kSynthetic;
  o.step.staging_slots = kStagingAuto;
  // unknown host: full-size, nothing planned to decide it
  EXPECT_EQ(resolve_staging_slots(m, p, shard, t, o), kUnboundedStaging);
  EXPECT_EQ(choose_staging(m, p, shard, t, o), (StagingChoice{kUnboundedStaging, true, 0, 0}));
  // the host holds full-size staging (exactly): full-size
  o.host_bytes_per_rank = full;
  EXPECT_EQ(choose_staging(m, p, shard, t, o), (StagingChoice{kUnboundedStaging, true, full, full}));
  EXPECT_EQ(plan_allocations(m, p, shard, t, o).at(buf::kHostGrad).bytes, n * 2);
  // one byte short: rings of kStagingSlots, in the step plan and the allocation plan alike
  o.host_bytes_per_rank = full - 1;
  EXPECT_EQ(choose_staging(m, p, shard, t, o), (StagingChoice{3, true, full, full - 1}));
  EXPECT_EQ(plan_allocations(m, p, shard, t, o).at(buf::kHostGrad).bytes, 3 * layer * 2);
  const RankPlan rp = plan_rank(m, p, 0, 1.0, o);
  EXPECT_EQ(rp.staging, (StagingChoice{3, true, full, full - 1}));
  EXPECT_EQ(rp.step.config.staging_slots, 3);
  EXPECT_EQ(rp.step.staging.slots, 3);
  EXPECT_EQ(rp.alloc.at(buf::kHostCopy).bytes, 3 * layer * 2);
  EXPECT_EQ(staging_choice_text(rp.staging), "host staging: rings of 3 slots (full-size staging would need " +
                                                 format_gb(full) + " of host memory, the host has " +
                                                 format_gb(full - 1) + ")");
  MemoryOptions holds = o;
  holds.host_bytes_per_rank = full;
  EXPECT_EQ(staging_choice_text(choose_staging(m, p, shard, t, holds)),
            "host staging: full-size (the host holds it: " + format_gb(full) + " of " + format_gb(full) + ")");
  // explicit slots are kept whatever the host
  for (int slots : {kUnboundedStaging, 1, 2, 5}) {
    o.step.staging_slots = slots;
    EXPECT_EQ(choose_staging(m, p, shard, t, o), (StagingChoice{slots, false, 0, 0})) << slots;
    EXPECT_EQ(plan_rank(m, p, 0, 1.0, o).step.config.staging_slots, slots);
  }
  EXPECT_EQ(staging_choice_text({2, false, 0, 0}), "host staging: rings of 2 slots (as set)");
  // a host that holds the rings but not full-size staging fits ratio 1 with auto, as with explicit rings
  const int64_t host = 12 * n + 4 * 3 * layer + kNormResultBytes;
  o.step.staging_slots = kStagingAuto;
  const RatioRange fits = feasible_ratios(m, p, o, int64_t(1) << 40, host);
  ASSERT_TRUE(fits.feasible) << fits.why;
  EXPECT_EQ(fits.max_ratio, 1.0);
}

// The staging is resolved before the speculation budget: `speculation: auto`'s spare slots fill what
// the chosen staging leaves. With clipping every CPU layer but layer 0 may speculate at full-size
// staging (8 layers), at most 3 with 3 ring slots; each speculated layer costs 12 B x its elements.
TEST(AllocPlan, StagingAutoIsResolvedBeforeTheSpeculationBudget) {
  const auto [m, p, t] = nine_cpu_layers();
  const RankShard& shard = p.ranks[0];
  const int64_t layer = kNineLayerElems, n = 9 * layer;
  const int64_t full = 16 * n + kNormResultBytes, rings = 12 * n + 4 * 3 * layer + kNormResultBytes;
  MemoryOptions o;
  o.workload = WorkloadType::kSynthetic;
  o.step.clip_gradients = true;
  o.step.speculation_bytes = kSpeculationMax;
  o.step.staging_slots = kStagingAuto;
  // full-size staging fits with room for 2 speculated layers
  o.host_bytes_per_rank = full + 2 * 12 * layer;
  RankPlan rp = plan_rank(m, p, 0, 1.0, o);
  EXPECT_EQ(rp.step.config.staging_slots, kUnboundedStaging);
  EXPECT_EQ(rp.step.config.speculation_bytes, 2 * 12 * layer);
  EXPECT_EQ(rp.alloc.at(buf::kHostMasterSpare).bytes, 2 * layer * 4);
  EXPECT_EQ(rp.alloc.bytes(MemPlace::kHost), o.host_bytes_per_rank);
  // one byte short of full-size staging: rings, and the spare slots take what they leave (1 layer)
  o.host_bytes_per_rank = full - 1;
  rp = plan_rank(m, p, 0, 1.0, o);
  EXPECT_EQ(rp.step.config.staging_slots, kStagingSlots);
  EXPECT_EQ(rp.step.config.speculation_bytes, full - 1 - rings);
  EXPECT_EQ(rp.alloc.at(buf::kHostMasterSpare).bytes, 1 * layer * 4);
  EXPECT_EQ(plan_allocations(m, p, shard, t, o).at(buf::kHostMasterSpare).bytes, 1 * layer * 4);
  EXPECT_LE(rp.alloc.bytes(MemPlace::kHost), o.host_bytes_per_rank);
}

// What calibrate derives cudaMalloc's granularity from: sizes of k MiB + 1 cost their rounding to it.
TEST(AllocPlan, GranularityOfMeasuredCosts) {
  const int64_t MiB = int64_t(1) << 20;
  // a 2 MiB granularity: 2, 4, 6 and 66 MiB
  EXPECT_EQ(
      granularity_of({{MiB + 1, 2 * MiB}, {2 * MiB + 1, 4 * MiB}, {5 * MiB + 4097, 6 * MiB}, {64 * MiB + 1, 66 * MiB}}),
      2 * MiB);
  // 64 KiB: k MiB + 64 KiB each
  EXPECT_EQ(granularity_of({{MiB + 1, MiB + 65536}, {2 * MiB + 1, 2 * MiB + 65536}}), 65536);
  // one size alone tells them apart too: 1 MiB + 1 costs g above 1 MiB
  EXPECT_EQ(granularity_of({{MiB + 1, 4 * MiB}}), 4 * MiB);
  // no one rounding explains these (another process allocated between the readings)
  EXPECT_EQ(granularity_of({{MiB + 1, 2 * MiB}, {2 * MiB + 1, 6 * MiB}}), 0);
  EXPECT_EQ(granularity_of({{MiB + 1, -1}}), 0);
  EXPECT_EQ(granularity_of({}), 0);
}
