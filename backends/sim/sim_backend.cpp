// The cost-only simulator backend: every rank's step plan on one event queue, with joined collectives.
#include "backends/sim/sim_backend.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <utility>

#include "backends/backend.h"
#include "backends/sim/cpu_order.h"
#include "backends/sim/speculation_budget.h"
#include "core/error.h"
#include "core/gemm.h"
#include "core/local_kernels.h"
#include "core/memory_fit.h"
#include "core/model.h"
#include "core/optim/optimizer.h"
#include "core/output_file.h"
#include "core/partition.h"
#include "core/rank_plan.h"
#include "core/twinflow.h"
#include "sim/cost_model.h"
#include "sim/event_queue.h"
#include "sim/resources.h"

namespace tf::backend::sim {
namespace {

using tf::sim::CollectiveKind;
using tf::sim::Direction;
using tf::sim::TimeNs;

constexpr int queue_index(core::Queue q) { return static_cast<int>(q); }

// The hardware profile mapped onto the simulator's cost-model structs, and the fixed durations.
struct CostSetup {
  int world = 1;
  int ranks_per_node = 1;
  int cpu_ranks_per_host = 1;  // ranks whose CPU passes share one host (HostCpuPool): ranks r / this
  int gpus_per_link = 1;
  double launch_ns = 0;  // per kernel
  // Per layer (model order): one micro-batch's forward and backward (the backward includes the
  // recomputed forward with activation checkpointing), LayerCost::ns().
  std::vector<double> fwd_ns, bwd_ns;
  // Per layer, where each kernel of that forward and backward ends (kernel_ends_ns): a comm-stream kernel
  // that becomes eligible while one of them runs waits for its end (docs/ARCHITECTURE.md, "Collectives
  // wait for the running kernel").
  std::vector<std::vector<double>> fwd_kernel_ends_ns, bwd_kernel_ends_ns;
  double optimizer_gbps = 0;  // the fused GPU optimizer kernel's bytes per ns
  double event_sync_ns = 0;   // a host (cpu-queue) op that waits on a device op learns of its end this late
  tf::sim::MemoryKernelParams hbm;
  tf::sim::PcieParams pcie;
  tf::sim::CollectiveParams collective;
  // One rank's CPU optimizer rate, before the DMA slowdown, while a = 1..ranks_per_node ranks of its
  // host run their passes ([a - 1]); without a measured rank curve every entry is the static share.
  std::vector<double> cpu_optimizer_gparam_s_by_active;  // x cpu_footprint_factor
  int64_t cpu_node_host_bytes = 0;    // the plan's pinned bytes of the largest shard x cpu_ranks_per_host
  double cpu_footprint_factor = 1;    // the profile's at them (core::CpuProfile::optimizer_footprint_factor)
  double cpu_stats_gparam_s = 0;      // memory-bound: host mem_gbps / gradient bytes
  tf::sim::DmaSlowdown dma_slowdown;  // a CPU pass's, while its rank's link carries copies
  // A speculative (out-of-place) CPU pass's work x this: the profile's cpu.optimizer_out_of_place_factor (1: not
  // measured), on top of the rates above, which are of in-place passes
  double cpu_out_of_place_factor = 1;
  // A copy's rate divides by these while a CPU optimizer pass of its link's host runs (the profile's
  // pcie.*_slowdown_under_cpu_pass; 1: not slowed)
  double h2d_slowdown_cpu_pass = 1, d2h_slowdown_cpu_pass = 1;
  // Forward and backward slowed while the rank's collectives run / its PCIe link carries copies (the
  // profile's gpu.compute_slowdown_*; 1: not measured)
  double compute_slowdown_collectives = 1;
  double compute_slowdown_dma = 1;
  SpeculationCase speculation = SpeculationCase::kHolds;  // what the speculated CPU layers' ops cost
};

// The fused attention's measured rates for a decoder block's shape (gpu.attention_tflops_by_shape),
// TFLOP/s of each pass; 0 where the profile has none (its products then run as GEMMs of the table).
struct AttentionRates {
  double fwd_tflops = 0, bwd_tflops = 0;
  bool measured() const { return fwd_tflops > 0 && bwd_tflops > 0; }
};

AttentionRates attention_rates(const core::GpuProfile& g, const core::ModelDesc& m, const core::LayerDesc& l,
                               int64_t micro_batch) {
  if (l.kind != core::LayerKind::kBlock || m.spec.decoder.heads <= 0) return {};
  const core::DecoderShape& d = m.spec.decoder;
  const int64_t pairs = core::attention_pairs(d, micro_batch);
  return {g.attention_tflops_at(core::head_dim(d), d.seq, pairs, false),
          g.attention_tflops_at(core::head_dim(d), d.seq, pairs, true)};
}

// What a layer's costs are computed with: the GEMM shape model, the measured table (null: the
// roofline-and-tiles model alone) and the profile's GPU.
struct LayerCostModel {
  tf::sim::GemmParams gp;
  const tf::sim::GemmRateTable* table = nullptr;
  const core::GpuProfile* gpu = nullptr;
};

// A layer's GEMMs. A batch of products runs at the rate of the one GEMM with the same tiles,
// (batch x m, n, k): a strided-batched kernel fills the GPU with the batch's tiles the same way. With a
// measured table (bf16 only) rates come from it; otherwise the roofline-and-tiles model. The fused
// attention's products run at its measured rate for the pass when there is one (`attention_tflops` > 0):
// core::fused_attention_flops over it, its own traffic included; one forward kernel, two backward
// kernels (dK/dV, dQ) besides the D kernel that the memory-bound list counts. Otherwise one kernel per GEMM.
void add_gemms(const std::vector<core::LayerGemm>& gemms, const LayerCostModel& m, double attention_tflops,
               bool backward, PassCost& c) {
  bool fused = false;
  for (const core::LayerGemm& g : gemms) {
    if (g.fused_attention && attention_tflops > 0) {
      fused = true;
      continue;
    }
    const tf::sim::GemmShape eq{g.m * g.batch, g.n, g.k};
    GemmCost gc;
    gc.gemm = g;
    if (m.table) {
      const tf::sim::GemmShape at = m.table->nearest(eq, g.pass).shape;
      gc.tflops = m.table->tflops_at(m.gp, eq, g.pass);
      gc.measured = true;
      gc.exact_shape = at.m == eq.m && at.n == eq.n && at.k == eq.k;
    } else {
      gc.tflops = m.gp.peak_tflops * tf::sim::gemm_efficiency(m.gp, eq);
    }
    gc.ns = tf::sim::gemm_flops(eq) / (gc.tflops * 1e3);  // 1 TFLOP/s = 1e3 FLOP/ns
    c.gemms.push_back(gc);
    ++c.kernels;
  }
  if (attention_tflops > 0) c.attention_ns += core::fused_attention_flops(gemms) / (attention_tflops * 1e3);
  if (fused) c.kernels += backward ? 2 : 1;
}

// A layer's memory-bound kernels: each class's bytes at its measured rate (gpu.decoder_kernel_gbps), else at
// gpu.hbm_gbps (GB/s = bytes per ns). With a measured attention rate the attention's own traffic is part
// of that rate's time and is not counted again.
void add_elementwise(const std::vector<core::KernelCost>& kernels, const core::GpuProfile& g, bool attention_measured,
                     PassCost& c) {
  for (const core::KernelCost& k : kernels) {
    const bool attention =
        k.kind == core::KernelClass::kAttentionForward || k.kind == core::KernelClass::kAttentionBackward;
    c.kernels += k.kernels;
    if (attention && attention_measured) continue;
    c.class_ns[size_t(k.kind)] += double(k.bytes) / g.kernel_gbps(k.kind);
  }
}

// `more`'s entries added to `c` (a checkpointed block's recomputed forward in its backward).
void add_pass(const PassCost& more, PassCost& c) {
  c.gemms.insert(c.gemms.end(), more.gemms.begin(), more.gemms.end());
  c.attention_ns += more.attention_ns;
  for (size_t i = 0; i < c.class_ns.size(); ++i) c.class_ns[i] += more.class_ns[i];
  c.kernels += more.kernels;
}

// Layer i's forward and backward for one micro-batch: its GEMMs, its memory-bound kernels (bias,
// activation, norms, loss) and the host's issue time of its kernels (at least one kernel per op: an
// embedding's gather). With activation checkpointing a block's backward runs its forward again first
// (the same kernels, the same cost).
LayerCost layer_cost(const core::RunSettings& rs, bool bf16, const LayerCostModel& m, size_t i) {
  const core::ModelDesc& model = rs.model;
  const core::LayerDesc& l = model.layers[i];
  const auto act_bytes = int(core::dtype_bytes(rs.step.param_dtype));  // activations and GEMM operands
  const std::vector<core::LayerGemm> fwd = core::forward_gemms(model, l, rs.step.micro_batch),
                                     bwd = core::backward_gemms(fwd, core::layer_needs_input_grad(model, i));
  const core::ElementwiseCost ew = core::layer_elementwise(model, i, rs.step.micro_batch, act_bytes);
  // the attention kernel's rates are of bf16 training (its only dtype)
  const AttentionRates att = bf16 ? attention_rates(*m.gpu, model, l, rs.step.micro_batch) : AttentionRates{};
  LayerCost c;
  c.layer = i;
  c.kind = l.kind;
  add_gemms(fwd, m, att.measured() ? att.fwd_tflops : 0, false, c.fwd);
  add_elementwise(ew.fwd, *m.gpu, att.measured(), c.fwd);
  c.fwd.kernels = std::max(1, c.fwd.kernels);
  add_gemms(bwd, m, att.measured() ? att.bwd_tflops : 0, true, c.bwd);
  add_elementwise(ew.bwd, *m.gpu, att.measured(), c.bwd);
  c.bwd.kernels = std::max(1, c.bwd.kernels);
  if (rs.step.checkpointing && l.kind == core::LayerKind::kBlock) add_pass(c.fwd, c.bwd);
  c.fwd.issue_ns = m.gpu->kernel_launch_ns * c.fwd.kernels;
  c.bwd.issue_ns = m.gpu->kernel_launch_ns * c.bwd.kernels;
  return c;
}

tf::sim::BusBandwidthCurve curve_of(const std::vector<core::BusPoint>& pts) {
  std::vector<tf::sim::BusBandwidthPoint> out;
  for (const core::BusPoint& p : pts) out.push_back({p.message_bytes, p.bus_gbps});
  return tf::sim::BusBandwidthCurve(std::move(out));
}

// The GEMM peak of the dtype the workloads compute in (bf16 for bf16 and fp16 training).
double peak_tflops_of(const core::Scenario& s, core::DType compute) {
  const core::HardwareProfile& hw = s.cluster.hardware;
  const double peak_tflops = hw.gpu.gemm_peak_tflops(compute);
  if (!(peak_tflops > 0))
    throw core::InputError("profile " + hw.name + ": the GPU has no " + std::string(core::dtype_name(compute)) +
                           " GEMM peak (0 TFLOP/s), which " + std::string(core::precision_name(s.training.precision)) +
                           " training computes in");
  return peak_tflops;
}

// Every layer's cost with the scenario's profile and the run's settings.
std::vector<LayerCost> layer_costs_of(const core::Scenario& s, const core::RunSettings& rs,
                                      double gemm_max_efficiency) {
  const core::HardwareProfile& hw = s.cluster.hardware;
  LayerCostModel m;
  m.gp.peak_tflops = peak_tflops_of(s, rs.step.param_dtype);
  m.gp.hbm_gbps = hw.gpu.hbm_gbps;
  m.gp.max_efficiency = gemm_max_efficiency;
  m.gp.bytes_per_element = int64_t(core::dtype_bytes(rs.step.param_dtype));
  m.gpu = &hw.gpu;
  std::vector<tf::sim::GemmRatePoint> measured_gemms;
  // fp16 training computes in bf16 too (core::StepConfig::param_dtype): its GEMMs and attention are bf16's
  const bool bf16 = rs.step.param_dtype == core::DType::kBF16;
  if (bf16)
    for (const core::GemmPoint& e : hw.gpu.bf16_gemm_tflops_by_shape)
      measured_gemms.push_back({{e.m, e.n, e.k}, e.tflops, e.pass});
  const tf::sim::GemmRateTable table(std::move(measured_gemms));
  m.table = table.empty() ? nullptr : &table;
  std::vector<LayerCost> out;
  for (size_t i = 0; i < rs.model.layers.size(); ++i) out.push_back(layer_cost(rs, bf16, m, i));
  return out;
}

// Where a pass's kernels end, from the op's start, in ns of its time alone; the last is the op's whole-ns
// time (Simulation::compute_ns). The order is the workloads': the GEMMs as listed, a backward's reversed
// (it runs its layer's last GEMM's gradients first: the MLP's weight then input gradient, a block's MLP
// before its attention), then the fused attention, then the memory-bound kernels one segment per
// core::KernelClass. A pass that waits for the host to issue its kernels stretches them alike.
std::vector<double> kernel_ends_ns(const PassCost& c, bool backward) {
  std::vector<double> kernels;
  for (const GemmCost& g : c.gemms) kernels.push_back(g.ns);
  if (backward) std::reverse(kernels.begin(), kernels.end());
  if (c.attention_ns > 0) kernels.push_back(c.attention_ns);
  for (double ns : c.class_ns)
    if (ns > 0) kernels.push_back(ns);
  const auto op_ns = double(tf::sim::ceil_ns(c.ns()));
  const double work = c.work_ns();
  std::vector<double> ends;
  double at = 0;
  for (double ns : kernels) {
    at += ns;
    ends.push_back(work > 0 ? at / work * op_ns : op_ns);
  }
  if (ends.empty()) ends.push_back(op_ns);
  ends.back() = op_ns;
  return ends;
}

// Per layer, the forward and backward ops' durations (LayerCost's ns()) and their kernels' ends.
void layer_costs(const core::Scenario& s, const core::RunSettings& rs, double gemm_max_efficiency, CostSetup& c) {
  for (const LayerCost& l : layer_costs_of(s, rs, gemm_max_efficiency)) {
    c.fwd_ns.push_back(l.fwd.ns());
    c.bwd_ns.push_back(l.bwd.ns());
    c.fwd_kernel_ends_ns.push_back(kernel_ends_ns(l.fwd, false));
    c.bwd_kernel_ends_ns.push_back(kernel_ends_ns(l.bwd, true));
  }
}

// Whether `link` has measured curves (calibrate measures them on one node's link only).
bool has_curves(const core::LinkProfile& link) {
  return !link.bus_gbps_by_message_bytes.empty() || !link.all_gather_bus_gbps_by_message_bytes.empty() ||
         !link.reduce_scatter_bus_gbps_by_message_bytes.empty();
}

void collective_costs(const core::HardwareProfile& hw, int world, CostSetup& c) {
  if (world <= 1) return;
  if (const std::optional<std::string> issue = collective_cost_issue(hw, world, c.ranks_per_node))
    throw core::InputError(*issue +
                           ": use a profile of this cluster (`twinflow calibrate --out FILE.yaml` on one "
                           "of its nodes measures one; cluster.profile: FILE.yaml)");
  const bool one_node = world <= c.ranks_per_node;
  const core::LinkProfile& link = one_node ? hw.intra_node : hw.inter_node;
  const bool measured = one_node && has_curves(link);
  if (measured) {
    c.collective.curve = curve_of(link.bus_gbps_by_message_bytes);
    c.collective.all_gather_curve = curve_of(link.all_gather_bus_gbps_by_message_bytes);
    c.collective.reduce_scatter_curve = curve_of(link.reduce_scatter_bus_gbps_by_message_bytes);
  }
  // A measured bus bandwidth already contains NCCL's latency (the whole call was timed): adding the
  // profile's latency on top would count it twice.
  c.collective.latency_ns = measured ? 0.0 : link.latency_ns;
  c.collective.bus_gbps = link.gbps;
}

// The node's cores and memory bandwidth are shared by the CPU passes of its ranks (docs/ARCHITECTURE.md,
// "The simulator: the host is shared"). With the profile's measured rank curve, a rank's rate depends
// on how many of its host's ranks run their pass at that moment (sim::shared_cpu_gparam_s); without
// it, the static share of today's model: each rank at most 1/R of the all-core rate, R the ranks per node.
}  // namespace

std::optional<std::string> collective_cost_issue(const core::HardwareProfile& hw, int world, int ranks_per_node) {
  if (world <= 1) return std::nullopt;
  const bool one_node = world <= ranks_per_node;
  const core::LinkProfile& link = one_node ? hw.intra_node : hw.inter_node;
  if ((one_node && has_curves(link)) || link.gbps > 0) return std::nullopt;
  return "world " + std::to_string(world) + " (" + std::to_string(ranks_per_node) + " rank(s) per node): profile " +
         hw.name + " has no " + (one_node ? "intra-node" : "inter-node") + " GPU link (" + link.kind +
         ", 0 GB/s) to cost the collectives with";
}

std::vector<double> cpu_rates_by_active(const core::CpuProfile& cpu, int threads, int ranks_per_node) {
  const int t = std::max(1, threads);
  const double alone = cpu.optimizer_gparam_s(t);
  std::vector<double> rates;
  for (int a = 1; a <= ranks_per_node; ++a) {
    if (cpu.optimizer_node_gparam_s_by_ranks.empty()) {
      rates.push_back(cpu.optimizer_gparam_s_all_cores > 0
                          ? std::min(alone, cpu.optimizer_gparam_s_all_cores / ranks_per_node)
                          : alone);
      continue;
    }
    const tf::sim::SharedCpuRates r{alone, cpu.optimizer_node_gparam_s(a), cpu.optimizer_gparam_s(a * t),
                                    cpu.optimizer_gparam_s(cpu.cores)};
    rates.push_back(tf::sim::shared_cpu_gparam_s(r, a));
  }
  return rates;
}

namespace {

// `rank_host_bytes`: the plan's pinned bytes of the largest shard, which the node's ranks hold x ranks_per_node:
// where the profile's footprint curve is looked up (docs/ARCHITECTURE.md, "The simulator: the host is shared").
void cpu_costs(const core::Scenario& s, const core::RunSettings& rs, int ranks_per_node, int64_t rank_host_bytes,
               CostSetup& c) {
  const core::CpuProfile& cpu = s.cluster.hardware.cpu;
  c.cpu_node_host_bytes = rank_host_bytes * ranks_per_node;
  c.cpu_footprint_factor = cpu.optimizer_footprint_factor(c.cpu_node_host_bytes);
  c.cpu_optimizer_gparam_s_by_active = cpu_rates_by_active(cpu, rs.cpu_threads, ranks_per_node);
  for (double& r : c.cpu_optimizer_gparam_s_by_active) r *= c.cpu_footprint_factor;
  c.cpu_stats_gparam_s = cpu.mem_gbps / double(core::dtype_bytes(rs.step.grad_dtype)) / ranks_per_node;
  // the profile's per-direction factors where measured (every GPU copying one way at once), else the
  // both-ways figure for either direction
  const double both = std::max(1.0, cpu.dma_slowdown_factor);
  const auto one_way = [both](double f) { return f > 0 ? std::max(1.0, f) : both; };
  c.dma_slowdown = {both, one_way(cpu.dma_slowdown_factor_d2h), one_way(cpu.dma_slowdown_factor_h2d)};
  if (cpu.optimizer_out_of_place_factor > 0) c.cpu_out_of_place_factor = cpu.optimizer_out_of_place_factor;
}

CostSetup make_cost_setup(const core::Scenario& s, const core::RunSettings& rs, double gemm_max_efficiency,
                          int64_t rank_host_bytes) {
  const core::HardwareProfile& hw = s.cluster.hardware;
  if (!(hw.gpu.hbm_gbps > 0)) throw core::InputError("profile " + hw.name + ": gpu.hbm_gbps must be > 0");
  CostSetup c;
  c.world = rs.world;
  c.ranks_per_node = rs.ranks_per_node;
  c.gpus_per_link = std::max(1, hw.pcie.gpus_per_link);
  c.launch_ns = hw.gpu.kernel_launch_ns;
  c.event_sync_ns = hw.gpu.event_sync_ns;
  layer_costs(s, rs, gemm_max_efficiency, c);
  c.optimizer_gbps = hw.gpu.optimizer_gbps > 0 ? hw.gpu.optimizer_gbps : hw.gpu.hbm_gbps;
  c.compute_slowdown_collectives = std::max(1.0, hw.gpu.compute_slowdown_during_collectives);
  c.compute_slowdown_dma = std::max(1.0, hw.gpu.compute_slowdown_during_dma);
  c.hbm = {hw.gpu.hbm_gbps, c.launch_ns};
  c.pcie = {hw.pcie.h2d_gbps, hw.pcie.d2h_gbps, hw.pcie.bidir_total_gbps, hw.pcie.copy_latency_ns};
  c.h2d_slowdown_cpu_pass = std::max(1.0, hw.pcie.h2d_slowdown_under_cpu_pass);
  c.d2h_slowdown_cpu_pass = std::max(1.0, hw.pcie.d2h_slowdown_under_cpu_pass);
  collective_costs(hw, rs.world, c);
  // the same node as the collectives' (a launched run's LOCAL_WORLD_SIZE), of at most the world's ranks
  c.cpu_ranks_per_host = std::max(1, std::min(rs.world, rs.ranks_per_node));
  cpu_costs(s, rs, c.cpu_ranks_per_host, rank_host_bytes, c);
  return c;
}

// One collective instance: the k-th collective of every rank's comm queue. Its exchange starts when
// every rank arrived and its SMs are free for it (Simulation::after_running_kernel), and runs
// `exchange_ns` on all of them at once; then each rank runs its own kernels after it (`tail_ns`: the
// reduce-scatter's sum, the norm's fold) when its SMs are free again, and its op ends.
struct Join {
  int arrived = 0, ready = 0;
  TimeNs exchange_ns = 0, tail_ns = 0;
  std::vector<tf::sim::Callback> dones;
  std::vector<std::pair<int, uint32_t>> members;  // (rank, op id) that arrived
  std::vector<bool> arrived_after_own_queue;      // per member: its comm queue's last op ended at its arrival
};

// All ranks' resources on one event queue. Members are declared queue first so that everything
// holding a pointer to it is destroyed before it.
class Simulation {
 public:
  // `steps` consecutive steps of the plans (more than one when they carry a tail into the next step:
  // each step's ops wait for their carried dependencies on the step before, and begin once that step's
  // ops that are not carried are done, rank by rank); `report_step` (0-based) is the one whose queue
  // order is recorded.
  Simulation(const CostSetup& cost, const std::vector<core::StepPlan>& plans, int steps = 1, int report_step = 0)
      : cost_(cost), plans_(plans), steps_(steps), report_step_(report_step) {
    const int world = static_cast<int>(plans.size());
    const int links = (world + cost.gpus_per_link - 1) / cost.gpus_per_link;
    for (int l = 0; l < links; ++l) links_.push_back(std::make_unique<tf::sim::SharedLink>(queue_, cost.pcie));
    ranks_.resize(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) {
      RankState& rs = ranks_[static_cast<size_t>(r)];
      for (int q = 0; q < core::kQueueCount; ++q) {
        rs.queues[static_cast<size_t>(q)] =
            std::make_unique<tf::sim::Resource>(queue_, core::queue_name(static_cast<core::Queue>(q)));
        rs.queues[static_cast<size_t>(q)]->set_record_intervals(false);
      }
      rs.link = links_[static_cast<size_t>(r / cost.gpus_per_link)].get();
      const int per_host = cost.cpu_ranks_per_host;
      if (r % per_host == 0) {
        const std::vector<double>& by_active = cost.cpu_optimizer_gparam_s_by_active;
        hosts_.push_back(std::make_unique<tf::sim::HostCpuPool>(
            queue_, std::min(per_host, world - r),
            [&by_active](int a) {
              return by_active.at(static_cast<size_t>(std::min<size_t>(a, by_active.size()) - 1));
            },
            cost.dma_slowdown));
      }
      rs.host = hosts_.back().get();
      rs.host_rank = r % per_host;
      rs.host->watch(rs.host_rank, *rs.link);
      slow_link_under_cpu_pass(r, rs);
      rs.stats_pool = std::make_unique<tf::sim::CpuPool>(queue_, cost.cpu_stats_gparam_s, cost.dma_slowdown);
      rs.stats_pool->watch(*rs.link);
      if (cost.compute_slowdown_collectives > 1 || cost.compute_slowdown_dma > 1) {
        rs.compute = std::make_unique<tf::sim::SlowedServer>(queue_);
        rs.collective_source = rs.compute->add_source(cost.compute_slowdown_collectives);
        rs.compute->watch(*rs.link, cost.compute_slowdown_dma);
      }
      const size_t n = plans[static_cast<size_t>(r)].ops.size() * size_t(steps);
      rs.start_ns.assign(n, -1);
      rs.end_ns.assign(n, -1);
      rs.done.resize(n);
      rs.last_end_ns.fill(-1);
    }
    build_joins();
  }
  Simulation(const Simulation&) = delete;
  Simulation& operator=(const Simulation&) = delete;

  void run(bool record_order) {
    record_order_ = record_order;
    for (int step = 0; step < steps_; ++step)
      for (size_t r = 0; r < ranks_.size(); ++r) submit_step(r, step);
    queue_.run();
    for (size_t r = 0; r < ranks_.size(); ++r)
      for (size_t i = 0; i < ranks_[r].end_ns.size(); ++i)
        if (ranks_[r].end_ns[i] < 0)
          throw std::logic_error("sim backend: rank " + std::to_string(r) + " op " + std::to_string(i) +
                                 " never ran (a collective without all ranks, or a dependency cycle)");
  }

  // Rank r's intervals of step `step` (0-based), from `origin_ns`.
  std::vector<OpInterval> intervals(size_t r, int step, TimeNs origin_ns) const {
    const size_t n = plans_[r].ops.size();
    std::vector<OpInterval> out(n);
    for (size_t i = 0; i < n; ++i)
      out[i] = {uint32_t(i), ranks_[r].start_ns[size_t(step) * n + i] - origin_ns,
                ranks_[r].end_ns[size_t(step) * n + i] - origin_ns};
    return out;
  }
  // When rank r's step `step` ended for the step after it: its ops that are not carried are done (-1: 0).
  TimeNs boundary_ns(size_t r, int step) const {
    TimeNs t = 0;
    if (step < 0) return t;
    const size_t n = plans_[r].ops.size();
    for (const core::Op& op : plans_[r].ops)
      if (!op.carried) t = std::max(t, ranks_[r].end_ns[size_t(step) * n + op.id]);
    return t;
  }
  const QueueOrder& order(size_t r) const { return ranks_[r].order; }

 private:
  // The op a rank's compute queue runs, as its kernels: a comm-stream kernel waits for the one running
  // (after_running_kernel).
  struct ComputeInFlight {
    bool running = false;
    uint64_t serial = 0;  // counts the compute queue's ops started
    TimeNs start_ns = 0;
    TimeNs alone_ns = 0;                        // the op's time alone
    const std::vector<double>* ends = nullptr;  // its kernels' ends (CostSetup); null: one kernel
    bool slowed = false;                        // runs on the rank's SlowedServer
    bool after_own_queue = false;               // the compute queue's op before it ended as it started
    std::vector<tf::sim::Callback> at_end;      // released when the op ends
  };

  struct RankState {
    std::array<std::unique_ptr<tf::sim::Resource>, core::kQueueCount> queues;
    tf::sim::SharedLink* link = nullptr;
    tf::sim::HostCpuPool* host = nullptr;  // the CPU optimizer: its host's pool, shared with the host's ranks
    int host_rank = 0;                     // this rank's index on its host
    std::unique_ptr<tf::sim::CpuPool> stats_pool;
    // Forward and backward when the profile measured their slowdown under collectives or copies
    // (null: fixed durations); the rank's collectives are its source collective_source.
    std::unique_ptr<tf::sim::SlowedServer> compute;
    int collective_source = -1;
    std::vector<tf::sim::Event> done;  // per op
    std::vector<TimeNs> start_ns, end_ns;
    QueueOrder order;
    std::array<TimeNs, core::kQueueCount> last_end_ns{};  // when each queue's last op ended (-1: none yet)
    ComputeInFlight running;                              // the compute queue's op in flight
  };

  // The link's copies slow while a CPU pass of its host runs (any rank of it: the DMA and the passes
  // share the host's DRAM; docs/ARCHITECTURE.md, "Copies slowed by the CPU pass"): each link watches the
  // host of its first rank and of every rank that starts another host on it. Not at all with factors of 1,
  // so that such profiles predict what they did before the term, to the ns.
  void slow_link_under_cpu_pass(int r, RankState& rs) {
    if (!(cost_.h2d_slowdown_cpu_pass > 1 || cost_.d2h_slowdown_cpu_pass > 1)) return;
    if (r % cost_.gpus_per_link != 0 && r % cost_.cpu_ranks_per_host != 0) return;
    rs.link->slow_while_cpu_pass(*rs.host, cost_.h2d_slowdown_cpu_pass, cost_.d2h_slowdown_cpu_pass);
  }

  // Rank r's ops of one step: after their dependencies in the step, their carried dependencies on the
  // step before and (carried tail) the step before's ops that are not carried, whose last on each queue
  // ends after the rest of that queue's.
  void submit_step(size_t r, int step) {
    const core::StepPlan& plan = plans_[r];
    RankState& rs = ranks_[r];
    const auto n = uint32_t(plan.ops.size());
    const uint32_t base = uint32_t(step) * n, prev = base - n;
    std::vector<tf::sim::Event> boundary;
    if (step > 0) {
      std::array<int64_t, core::kQueueCount> last{};
      last.fill(-1);
      for (const core::Op& op : plan.ops)
        if (!op.carried) last[size_t(queue_index(op.queue))] = op.id;
      for (int64_t id : last)
        if (id >= 0) boundary.push_back(rs.done[prev + uint32_t(id)]);
    }
    uint32_t collectives = uint32_t(step) * collectives_per_step_;
    std::vector<tf::sim::Event> deps;
    for (const core::Op& op : plan.ops) {
      deps = boundary;
      for (uint32_t d : op.deps) deps.push_back(rs.done[base + d]);
      if (step > 0)
        for (uint32_t d : op.carried_deps) deps.push_back(rs.done[prev + d]);
      tf::sim::Resource& res = *rs.queues[static_cast<size_t>(queue_index(op.queue))];
      const bool collective = is_collective(op.kind);
      const uint32_t at = base + op.id;
      rs.done[at] = res.submit({}, work_for(static_cast<int>(r), op, at, collective ? collectives : 0), deps,
                               [this, r, at] { on_end(r, at); });
      if (collective) ++collectives;
    }
  }

  static bool is_collective(core::OpKind k) {
    return k == core::OpKind::kAllGather || k == core::OpKind::kReduceScatter || k == core::OpKind::kAllReduce ||
           k == core::OpKind::kNormAllReduce;
  }

  static CollectiveKind collective_kind(core::OpKind k) {
    if (k == core::OpKind::kAllGather) return CollectiveKind::kAllGather;
    if (k == core::OpKind::kReduceScatter) return CollectiveKind::kReduceScatter;
    return CollectiveKind::kAllReduce;
  }

  // The k-th collective of each rank joins the k-th of every other rank; they must agree on kind and size.
  void build_joins() {
    std::vector<const core::Op*> first;
    for (const core::Op& op : plans_[0].ops)
      if (is_collective(op.kind)) first.push_back(&op);
    for (size_t r = 1; r < plans_.size(); ++r) {
      size_t k = 0;
      for (const core::Op& op : plans_[r].ops) {
        if (!is_collective(op.kind)) continue;
        if (k >= first.size() || first[k]->kind != op.kind || first[k]->bytes != op.bytes)
          throw std::logic_error("sim backend: rank " + std::to_string(r) + " collective " + std::to_string(k) + " (" +
                                 op.label() + ") does not match rank 0's");
        ++k;
      }
      if (k != first.size()) throw std::logic_error("sim backend: ranks issue different numbers of collectives");
    }
    collectives_per_step_ = uint32_t(first.size());
    joins_.resize(first.size() * size_t(steps_));
    for (size_t k = 0; k < joins_.size(); ++k) {
      const core::Op& op = *first[k % first.size()];
      joins_[k].exchange_ns = tf::sim::collective_ns(cost_.collective, collective_kind(op.kind),
                                                     tf::sim::CollectiveAlgorithm::kRing, cost_.world, op.bytes);
      joins_[k].tail_ns = local_tail_ns(op);
      joins_[k].dones.reserve(plans_.size());
      joins_[k].members.reserve(plans_.size());
      joins_[k].arrived_after_own_queue.reserve(plans_.size());
    }
  }

  // What a rank does on its comm stream besides the collective itself (the same on every rank), as
  // core/local_kernels.h counts the engine's kernels:
  //  - reduce-scatter: the rank-ordered sum of the received slices (reads every rank's slice and the
  //    fp32 accumulation after the first micro-batch; writes the accumulation before the last, the
  //    gradient on the last), a memory-bound kernel; at world 1 it is all there is;
  //  - norm all-reduce: storing the non-finite count, the fold of the tile table on the device, and
  //    the 16-byte result's copy home.
  TimeNs local_tail_ns(const core::Op& op) const {
    const core::StepConfig& cfg = plans_[0].config;
    if (op.kind == core::OpKind::kReduceScatter) {
      const auto grad_bytes = int64_t(core::dtype_bytes(cfg.grad_dtype));
      const int64_t slice = op.bytes / (int64_t(cost_.world) * grad_bytes);
      const int64_t bytes =
          core::slice_sum_bytes(cost_.world, slice, grad_bytes, core::slice_sum_io(cfg.grad_accum, op.micro_batch));
      return tf::sim::ceil_ns(core::kSliceSumLaunches * cost_.launch_ns + double(bytes) / cost_.hbm.hbm_gbps);
    }
    if (op.kind == core::OpKind::kNormAllReduce)
      return tf::sim::ceil_ns(double(core::norm_local_launches(op.elems)) * cost_.launch_ns +
                              double(core::norm_fold_bytes(op.elems)) / cost_.hbm.hbm_gbps) +
             tf::sim::pcie_copy_ns(cost_.pcie, tf::sim::Direction::kD2H, core::kNormResultBytes);
    return 0;
  }

  // A layer's forward or backward on one micro-batch (layer_cost: its kernels' work, or the host's issue
  // time of its kernels where that is longer).
  TimeNs compute_ns(const core::Op& op) const {
    const auto l = static_cast<size_t>(op.layer);
    return tf::sim::ceil_ns(op.kind == core::OpKind::kForward ? cost_.fwd_ns.at(l) : cost_.bwd_ns.at(l));
  }
  const std::vector<double>& kernel_ends(const core::Op& op) const {
    const auto l = static_cast<size_t>(op.layer);
    return op.kind == core::OpKind::kForward ? cost_.fwd_kernel_ends_ns.at(l) : cost_.bwd_kernel_ends_ns.at(l);
  }

  // How long a host op waits before it starts: a host thread learns of a device op's end through an
  // event (gpu.event_sync_ns), so a cpu-queue op that depends on a device-queue op pays it once.
  TimeNs host_wait_ns(int r, const core::Op& op) const {
    if (op.queue != core::Queue::kCpu || !(cost_.event_sync_ns > 0)) return 0;
    for (uint32_t d : op.deps)
      if (plans_[static_cast<size_t>(r)].ops[d].queue != core::Queue::kCpu)
        return tf::sim::ceil_ns(cost_.event_sync_ns);
    return 0;
  }

  // Starts `elems` on a CPU pool of rank r, after `wait_ns`.
  void start_cpu(tf::sim::CpuPool& pool, TimeNs wait_ns, int64_t elems, tf::sim::Callback done) {
    if (wait_ns <= 0) return pool.start(elems, std::move(done));
    queue_.schedule_after(wait_ns,
                          [&pool, elems, cb = std::move(done)]() mutable { pool.start(elems, std::move(cb)); });
  }
  // ... on the rank's host pool, as its host_rank.
  void start_host_cpu(tf::sim::HostCpuPool& host, int host_rank, TimeNs wait_ns, int64_t elems,
                      tf::sim::Callback done) {
    if (wait_ns <= 0) return host.start(host_rank, elems, std::move(done));
    queue_.schedule_after(wait_ns, [&host, host_rank, elems, cb = std::move(done)]() mutable {
      host.start(host_rank, elems, std::move(cb));
    });
  }

  // A fused CPU pass over op.elems on the rank's host pool, after its host wait: in-place work, or
  // out_of_place x that for a speculative update (cpu.optimizer_out_of_place_factor).
  tf::sim::Work host_pass(int r, const core::Op& op, uint32_t id, double out_of_place = 1) {
    const auto elems = int64_t(std::llround(double(op.elems) * out_of_place));
    return tf::sim::Work::async([this, r, id, elems, wait = host_wait_ns(r, op)](tf::sim::Callback done) {
      RankState& rs = ranks_[static_cast<size_t>(r)];
      rs.start_ns[id] = queue_.now();
      start_host_cpu(*rs.host, rs.host_rank, wait, elems, std::move(done));
    });
  }

  tf::sim::Work fixed(int r, uint32_t id, TimeNs ns) {
    return [this, r, id, ns]() -> TimeNs {
      ranks_[static_cast<size_t>(r)].start_ns[id] = queue_.now();
      return ns;
    };
  }

  // An op of the compute queue starts: its kernels (`ends`; null: one kernel) are what a comm-stream
  // kernel eligible meanwhile waits for.
  void begin_compute(int r, uint32_t id, TimeNs alone_ns, const std::vector<double>* ends, bool slowed) {
    RankState& rs = ranks_[static_cast<size_t>(r)];
    rs.start_ns[id] = queue_.now();
    ComputeInFlight& c = rs.running;
    c.running = true;
    ++c.serial;
    c.start_ns = queue_.now();
    c.alone_ns = alone_ns;
    c.ends = ends;
    c.slowed = slowed;
    c.after_own_queue = rs.last_end_ns[size_t(queue_index(core::Queue::kCompute))] == queue_.now();
  }

  // A compute-queue op of fixed duration (the GPU optimizer, the statistics pass): one kernel.
  tf::sim::Work compute_fixed(int r, uint32_t id, TimeNs ns) {
    return [this, r, id, ns]() -> TimeNs {
      begin_compute(r, id, ns, nullptr, false);
      return ns;
    };
  }

  // A forward or backward: on the rank's SlowedServer where the profile measured a slowdown, else fixed.
  tf::sim::Work layer_compute(int r, const core::Op& op, uint32_t id) {
    const TimeNs ns = compute_ns(op);
    const std::vector<double>* ends = &kernel_ends(op);
    if (!ranks_[static_cast<size_t>(r)].compute)
      return [this, r, id, ns, ends]() -> TimeNs {
        begin_compute(r, id, ns, ends, false);
        return ns;
      };
    return tf::sim::Work::async([this, r, id, ns, ends](tf::sim::Callback done) {
      begin_compute(r, id, ns, ends, true);
      ranks_[static_cast<size_t>(r)].compute->start(ns, std::move(done));
    });
  }

  // ---- collectives wait for the running kernel (docs/ARCHITECTURE.md) ----------------------------
  // The GPU's block scheduler hands SMs to kernels in the order they became eligible, whatever their
  // stream: a comm-stream kernel (NCCL's, the reduce-scatter's sum) that becomes eligible while a compute
  // kernel holds the SMs starts only when that kernel's blocks have drained. Two kernels eligible at the
  // same ns: the one whose own stream's op just ended goes first (a cross-stream wait resolves later).
  static constexpr double kKernelEndSlackNs = 1;  // whole-ns ends against the kernels' fractional ones

  // Rank r's compute op's alone-ns done now.
  double compute_done_ns(const RankState& rs) const {
    const ComputeInFlight& c = rs.running;
    if (c.slowed) return double(c.alone_ns) - rs.compute->remaining_alone_ns();
    return double(queue_.now() - c.start_ns);
  }

  // Where the kernel rank r runs now ends (alone-ns of its op), when a comm-stream kernel that became
  // eligible now (`comm_after_own_queue`: its comm queue's op before it just ended) must wait for it.
  std::optional<double> blocking_kernel_end(int r, bool comm_after_own_queue) const {
    const RankState& rs = ranks_[static_cast<size_t>(r)];
    const ComputeInFlight& c = rs.running;
    if (!c.running) return std::nullopt;
    const double done = compute_done_ns(rs);
    const double last = c.ends ? c.ends->back() : double(c.alone_ns);
    if (done >= last - kKernelEndSlackNs) return std::nullopt;  // its end is being processed now
    size_t k = 0;
    if (c.ends)
      while ((*c.ends)[k] <= done + kKernelEndSlackNs) ++k;
    const double end = c.ends ? (*c.ends)[k] : last;
    const bool started_now = k == 0 ? c.start_ns == queue_.now() : done <= (*c.ends)[k - 1] + kKernelEndSlackNs;
    const bool kernel_after_own_queue = k == 0 ? c.after_own_queue : true;
    if (started_now && !(kernel_after_own_queue && !comm_after_own_queue)) return std::nullopt;
    return end;
  }

  // Calls `go` once rank r's compute op `serial` has done `end` alone-ns (or ended).
  void at_kernel_end(int r, uint64_t serial, double end, tf::sim::Callback go) {
    RankState& rs = ranks_[static_cast<size_t>(r)];
    ComputeInFlight& c = rs.running;
    if (!c.running || c.serial != serial) return go();
    const double done = compute_done_ns(rs);
    if (done >= end - kKernelEndSlackNs) return go();
    const double last = c.ends ? c.ends->back() : double(c.alone_ns);
    if (end >= last - kKernelEndSlackNs) return c.at_end.push_back(std::move(go));  // the op's own end
    // a kernel inside the op: its end at the current rate; the rate may change meanwhile, so look again
    const double factor = c.slowed ? rs.compute->current_factor() : 1.0;
    const TimeNs dt = std::max<TimeNs>(1, tf::sim::ceil_ns((end - done) * factor));
    queue_.schedule_after(
        dt, [this, r, serial, end, cb = std::move(go)]() mutable { at_kernel_end(r, serial, end, std::move(cb)); });
  }

  // Calls `go` when rank r's SMs take a comm-stream kernel that became eligible now. Decided after the
  // other events of this ns, so that a compute op starting at the same ns is seen.
  void after_running_kernel(int r, bool comm_after_own_queue, tf::sim::Callback go) {
    queue_.schedule_after(0, [this, r, comm_after_own_queue, cb = std::move(go)]() mutable {
      const std::optional<double> end = blocking_kernel_end(r, comm_after_own_queue);
      if (!end) return cb();
      at_kernel_end(r, ranks_[static_cast<size_t>(r)].running.serial, *end, std::move(cb));
    });
  }

  // `id`: the op's instance (step x ops + op id), which its timings are kept under.
  tf::sim::Work work_for(int r, const core::Op& op, uint32_t id, uint32_t collective_index) {
    switch (op.kind) {
      case core::OpKind::kForward:
      case core::OpKind::kBackward: return layer_compute(r, op, id);
      case core::OpKind::kGpuOptimizer:
        return compute_fixed(r, id, tf::sim::memory_kernel_ns({cost_.optimizer_gbps, cost_.launch_ns}, op.bytes));
      case core::OpKind::kGradStats:
        if (op.queue != core::Queue::kCpu) return compute_fixed(r, id, tf::sim::memory_kernel_ns(cost_.hbm, op.bytes));
        return tf::sim::Work::async(
            [this, r, id, elems = op.elems, wait = host_wait_ns(r, op)](tf::sim::Callback done) {
              RankState& rs = ranks_[static_cast<size_t>(r)];
              rs.start_ns[id] = queue_.now();
              start_cpu(*rs.stats_pool, wait, elems, std::move(done));
            });
      case core::OpKind::kCpuOptimizer:  // a speculative one does nothing in a step that does not speculate
        if (op.state_slot != 1) return host_pass(r, op, id);
        if (cost_.speculation == SpeculationCase::kNotSpeculating) return fixed(r, id, 0);
        return host_pass(r, op, id, cost_.cpu_out_of_place_factor);
      case core::OpKind::kCpuCommit:  // held: it only learns of the norm; else it redoes the layer's pass
        if (cost_.speculation == SpeculationCase::kHolds) return fixed(r, id, host_wait_ns(r, op));
        return host_pass(r, op, id);
      case core::OpKind::kD2HGrad:
      case core::OpKind::kH2DParam: {
        const Direction dir = op.kind == core::OpKind::kD2HGrad ? Direction::kD2H : Direction::kH2D;
        return tf::sim::Work::async([this, r, id, dir, bytes = op.bytes](tf::sim::Callback done) {
          RankState& rs = ranks_[static_cast<size_t>(r)];
          rs.start_ns[id] = queue_.now();
          rs.link->start(dir, bytes, std::move(done));
        });
      }
      case core::OpKind::kAllGather:
      case core::OpKind::kReduceScatter:
      case core::OpKind::kAllReduce:
      case core::OpKind::kNormAllReduce:
        return tf::sim::Work::async([this, r, id, collective_index](tf::sim::Callback done) {
          arrive(collective_index, r, id, std::move(done));
        });
    }
    throw std::logic_error("sim backend: unknown op kind");
  }

  // Rank r reached collective k on its comm queue (the op starts, as the engine times it: its stream got
  // there). Its kernel waits for the rank's running compute kernel; the exchange starts when every rank
  // has arrived and is ready.
  void arrive(uint32_t k, int r, uint32_t id, tf::sim::Callback done) {
    Join& j = joins_[k];
    RankState& rs = ranks_[static_cast<size_t>(r)];
    rs.start_ns[id] = queue_.now();
    const bool after_own_queue = rs.last_end_ns[size_t(queue_index(core::Queue::kComm))] == queue_.now();
    j.dones.push_back(std::move(done));
    j.members.emplace_back(r, id);
    j.arrived_after_own_queue.push_back(after_own_queue);
    ++j.arrived;
    if (j.exchange_ns == 0) return rank_ready(k);  // no exchange (one rank): no kernel of its own
    after_running_kernel(r, after_own_queue, [this, k] { rank_ready(k); });
  }

  void rank_ready(uint32_t k) {
    Join& j = joins_[k];
    if (++j.ready < cost_.world) return;
    for (const auto& [rank, op] : j.members) set_collective_active(rank, true);
    queue_.schedule_after(j.exchange_ns, [this, k] {
      Join& jk = joins_[k];
      for (const auto& [rank, op] : jk.members) set_collective_active(rank, false);
      for (size_t i = 0; i < jk.members.size(); ++i) run_tail(k, i);
    });
  }

  // Member i's own kernels after the exchange, when its SMs are free for them; then its op ends.
  void run_tail(uint32_t k, size_t i) {
    Join& j = joins_[k];
    if (j.tail_ns == 0) return j.dones[i]();
    const int r = j.members[i].first;
    // after an exchange the tail's kernel follows it on the comm stream; without one it is the op's first
    const bool after_own_queue = j.exchange_ns > 0 || j.arrived_after_own_queue[i];
    after_running_kernel(r, after_own_queue, [this, k, i, r] {
      set_collective_active(r, true);
      queue_.schedule_after(joins_[k].tail_ns, [this, k, i, r] {
        set_collective_active(r, false);
        joins_[k].dones[i]();
      });
    });
  }

  // A rank slows its forward and backward while its collectives run (the GPU's SMs and HBM shared).
  void set_collective_active(int rank, bool active) {
    RankState& rs = ranks_[static_cast<size_t>(rank)];
    if (rs.compute) rs.compute->set_active(rs.collective_source, active);
  }

  void on_end(size_t r, uint32_t at) {
    RankState& rs = ranks_[r];
    rs.end_ns[at] = queue_.now();
    const auto n = uint32_t(plans_[r].ops.size());
    const uint32_t id = at % n;
    const core::Queue q = plans_[r].ops[id].queue;
    rs.last_end_ns[size_t(queue_index(q))] = queue_.now();
    if (q == core::Queue::kCompute) {
      rs.running.running = false;  // the comm kernels that waited for its last kernel go first
      std::vector<tf::sim::Callback> waiting = std::move(rs.running.at_end);
      rs.running.at_end.clear();
      for (tf::sim::Callback& go : waiting) go();
    }
    if (record_order_ && int(at / n) == report_step_) rs.order[static_cast<size_t>(queue_index(q))].push_back(id);
  }

  const CostSetup& cost_;
  const std::vector<core::StepPlan>& plans_;
  const int steps_, report_step_;
  uint32_t collectives_per_step_ = 0;
  bool record_order_ = false;
  tf::sim::EventQueue queue_;
  std::vector<std::unique_ptr<tf::sim::SharedLink>> links_;
  std::vector<std::unique_ptr<tf::sim::HostCpuPool>> hosts_;
  std::vector<RankState> ranks_;
  std::vector<Join> joins_;
};

}  // namespace

namespace {

// Every rank's plan (core::plan_rank, as the CUDA engine builds its rank), and the split and
// allocation plan of the largest shard.
struct RankPlans {
  std::vector<core::StepPlan> plans;
  core::RankPlan largest;
  size_t largest_rank = 0;
};

RankPlans plan_ranks(const core::RunSettings& rs, const core::Partition& part, double ratio,
                     const core::MemoryOptions& mo) {
  RankPlans out;
  out.plans.resize(size_t(rs.world));
  for (int r = 0; r < rs.world; ++r) {
    core::RankPlan rp = core::plan_rank(rs.model, part, r, ratio, mo);
    out.plans[size_t(r)] = rp.step;
    if (r == 0 || part.ranks[size_t(r)].elems > part.ranks[out.largest_rank].elems) {
      out.largest_rank = size_t(r);
      out.largest = std::move(rp);
    }
  }
  return out;
}

// Steps the cost-only simulator runs: one, or with a carried tail three, of which it reports the second
// (docs/ARCHITECTURE.md, "Carrying the optimizer tail into the next step"): a step in steady state has a
// tail carried in from the step before and its own carried into the next, whose forward hides it. Its
// time is its period, from when the step before ended (its ops that are not carried were done) to
// when it ended.
constexpr int kCarrySteps = 3, kCarryReportStep = 1;

// Per rank: busy time per queue, its end, and (record_ops) per-op timings and queue order; rank 0's
// timeline summary.
void collect_ranks(const Simulation& sim, const std::vector<core::StepPlan>& plans, bool record_ops, SimPoint& p) {
  const bool carry = core::carries(plans[0]);
  const int step = carry ? kCarryReportStep : 0;
  p.ranks.resize(plans.size());
  StepTimeline t0;
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    RankTiming& rt = p.ranks[r];
    const TimeNs origin = carry ? sim.boundary_ns(r, step - 1) : 0;
    std::vector<OpInterval> iv = sim.intervals(r, step, origin);
    std::optional<NextStep> next;
    if (carry) next = NextStep{sim.boundary_ns(r, step) - origin, sim.intervals(r, step + 1, origin)};
    StepTimeline t = summarize_timeline(plans[r], iv, next ? &*next : nullptr);
    rt.busy_ns = t.busy_ns;
    rt.end_ns = t.step_ns;
    if (record_ops) {
      rt.ops.reserve(iv.size());
      for (const OpInterval& o : iv) rt.ops.push_back({o.op, o.start_ns, o.end_ns});
      rt.queue_order = sim.order(r);
    }
    p.step_ns = std::max(p.step_ns, rt.end_ns);
    if (r == 0) t0 = std::move(t);
  }
  p.busy_ns = p.ranks[0].busy_ns;
  // Rank 0's phases, from its intervals (the same summary a real run reports).
  p.optimizer_phase_ns = t0.optimizer_phase_ns;
  p.kind_ns = t0.kind_ns;
  p.exposed_ns = t0.exposed_ns;
  p.exposed_transfer_ns = t0.exposed_transfer_ns;
  p.cpu_overlapped_ns = t0.cpu_overlapped_ns;
}

}  // namespace

double PassCost::gemm_ns() const {
  double ns = 0;
  for (const GemmCost& g : gemms) ns += g.ns;
  return ns;
}

double PassCost::work_ns() const {
  double ns = gemm_ns() + attention_ns;
  for (double c : class_ns) ns += c;
  return ns;
}

std::vector<LayerCost> layer_costs(const core::Scenario& s, const SimOptions& opt) {
  return layer_costs_of(s, core::resolve_settings(s, opt.overrides), opt.gemm_max_efficiency);
}

SimPoint simulate_step(const core::Scenario& s, double ratio, const SimOptions& opt) {
  if (!(ratio >= 0 && ratio <= 1)) throw core::InputError("ratio " + std::to_string(ratio) + " is outside [0, 1]");
  core::check_simulation_size(s, opt.overrides);  // every rank's plan is held: bounded, naming what set the size
  const core::RunSettings rs = core::resolve_settings(s, opt.overrides);
  if (rs.speculation_auto) {  // the cost model's count of speculated layers (each with its order), then the step
    SimOptions chosen = opt;
    const SpeculationChoice choice = choose_speculation(s, ratio, opt);
    chosen.overrides.speculation_layers = choice.layers;
    if (choice.cpu_order) chosen.overrides.cpu_order = core::CpuOrderSetting{false, choice.cpu_order->order};
    SimPoint p = simulate_step(s, ratio, chosen);
    p.speculation_choice = choice;
    if (choice.cpu_order) p.cpu_order_choice = choice.cpu_order;  // chosen with the count
    return p;
  }
  if (rs.cpu_order_auto) {  // the cost model's pass order, then the step with it
    SimOptions chosen = opt;
    const CpuOrderChoice choice = choose_cpu_order(s, ratio, opt);
    chosen.overrides.cpu_order = core::CpuOrderSetting{false, choice.order};
    SimPoint p = simulate_step(s, ratio, chosen);
    p.cpu_order_choice = choice;
    return p;
  }
  core::MemoryOptions mo = rs.memory_options();
  mo.workload = core::WorkloadType::kAuto;  // the model trained for real: what the step's costs are of
  const core::Partition part = core::make_partition(rs.model, rs.partition);
  // `speculation: max` (auto's ceiling) fills the rank's host memory beyond the plan (core::resolve_speculation_bytes)
  const core::RankBudget budget = core::rank_budget(s, rs.ranks_per_node);
  mo.host_bytes_per_rank = budget.host_bytes;

  SimPoint p;
  p.requested_ratio = ratio;
  p.world = rs.world;
  RankPlans rp = plan_ranks(rs, part, ratio, mo);
  p.ratio = rp.largest.split.actual_ratio;
  p.pcie_bytes_each_way = rp.largest.step.pcie_d2h_bytes;
  p.cpu_order = rs.step.cpu_order;
  p.speculation_layers = rs.step.speculation_layers;
  p.memory = core::sum_by_kind(rp.largest.alloc);
  CostSetup cost = make_cost_setup(s, rs, opt.gemm_max_efficiency, p.memory.host_total);
  cost.speculation = opt.speculation;
  p.cpu_node_host_bytes = cost.cpu_node_host_bytes;
  p.cpu_footprint_factor = cost.cpu_footprint_factor;
  p.unnamed_gpu = core::unnamed_gpu_text(rp.largest.alloc);
  p.host_per_cpu_param = core::host_bytes_per_cpu_param(rp.largest.alloc, rp.largest.split.cpu_elems);
  p.staging = rp.largest.staging;
  try {
    core::check_ratio_fits(rs.model, part, mo, ratio, budget.gpu_bytes, budget.host_bytes);
  } catch (const core::InputError& e) {
    p.oom = true;
    p.oom_reason = e.what();
  }

  const bool carry = core::carries(rp.plans[0]);
  Simulation sim(cost, rp.plans, carry ? kCarrySteps : 1, carry ? kCarryReportStep : 0);
  sim.run(opt.record_ops);
  collect_ranks(sim, rp.plans, opt.record_ops, p);
  if (opt.keep_plans) p.plans = std::move(rp.plans);
  return p;
}

double predict_host_cpu_seconds(const core::CpuProfile& cpu, int threads_per_rank,
                                const std::vector<std::vector<int64_t>>& op_elems_per_rank) {
  const int ranks = static_cast<int>(op_elems_per_rank.size());
  if (ranks < 1) throw std::invalid_argument("predict_host_cpu_seconds: no ranks");
  const std::vector<double> by_active = cpu_rates_by_active(cpu, threads_per_rank, ranks);
  tf::sim::EventQueue queue;
  tf::sim::HostCpuPool host(queue, ranks, [&](int a) { return by_active.at(static_cast<size_t>(a - 1)); });
  std::vector<std::unique_ptr<tf::sim::Resource>> cpu_queues;
  TimeNs end = 0;
  for (int r = 0; r < ranks; ++r) {
    cpu_queues.push_back(std::make_unique<tf::sim::Resource>(queue, "cpu " + std::to_string(r)));
    for (int64_t elems : op_elems_per_rank[static_cast<size_t>(r)])
      cpu_queues.back()->submit("cpu_optimizer", host.work(r, elems), {}, [&] { end = std::max(end, queue.now()); });
  }
  queue.run();
  return static_cast<double>(end) * 1e-9;
}

std::vector<QueueOrder> executed_queue_order(const SimPoint& p) {
  std::vector<QueueOrder> out;
  out.reserve(p.ranks.size());
  for (const RankTiming& r : p.ranks) out.push_back(r.queue_order);
  return out;
}

namespace {
// The metadata events that name process `pid` ("rank R") and its queues' threads.
void append_rank_names(nlohmann::json& events, int pid) {
  events.push_back(
      {{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", "rank " + std::to_string(pid)}}}});
  events.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", pid}, {"args", {{"sort_index", pid}}}});
  for (int q = 0; q < core::kQueueCount; ++q) {
    events.push_back({{"ph", "M"},
                      {"name", "thread_name"},
                      {"pid", pid},
                      {"tid", q},
                      {"args", {{"name", core::queue_name(static_cast<core::Queue>(q))}}}});
    events.push_back(
        {{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", pid}, {"tid", q}, {"args", {{"sort_index", q}}}});
  }
}

// One complete event per op of `ops`, shifted by `offset_ns`; `step` > 0 prefixes the names with "sSTEP ".
void append_op_events(nlohmann::json& events, const core::StepPlan& plan, const std::vector<OpTiming>& ops, int pid,
                      int64_t offset_ns, int step) {
  const std::string prefix = step > 0 ? "s" + std::to_string(step) + " " : "";
  for (const OpTiming& t : ops) {
    const core::Op& op = plan.ops.at(t.op);
    nlohmann::json args = {{"op", op.id},
                           {"label", op.label()},
                           {"bytes", op.bytes},
                           {"flops", op.flops},
                           {"elems", op.elems},
                           {"start_ns", t.start_ns + offset_ns},
                           {"end_ns", t.end_ns + offset_ns}};
    if (step > 0) args["step"] = step;
    events.push_back({{"ph", "X"},
                      {"name", prefix + op.label()},
                      {"cat", core::op_kind_name(op.kind)},
                      {"pid", pid},
                      {"tid", queue_index(op.queue)},
                      {"ts", static_cast<double>(t.start_ns + offset_ns) / 1e3},
                      {"dur", static_cast<double>(t.end_ns - t.start_ns) / 1e3},
                      {"args", std::move(args)}});
  }
}

// One counter event per point of each counter, in process 0 (Chrome's "C" phase: a track per name, a series
// per args key).
void append_counter_events(nlohmann::json& events, std::span<const TraceCounter> counters) {
  for (const TraceCounter& c : counters)
    for (const auto& [t_ns, value] : c.points)
      events.push_back({{"ph", "C"},
                        {"name", c.name},
                        {"pid", 0},
                        {"ts", static_cast<double>(t_ns) / 1e3},
                        {"args", {{c.unit, value}}}});
}

void write_trace_document(nlohmann::json events, nlohmann::json other, const std::string& path,
                          const std::string& option) {
  nlohmann::json doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ns"}, {"otherData", std::move(other)}};
  core::write_output_file(path, doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + '\n', option);
}
}  // namespace

std::vector<std::pair<int64_t, double>> counter_points(std::span<const TracedStep> steps,
                                                       std::span<const std::pair<int64_t, double>> samples) {
  std::vector<std::pair<int64_t, double>> out;
  for (const auto& [t, value] : samples)
    for (const TracedStep& s : steps)
      if (s.host_t0_ns >= 0 && t >= s.host_t0_ns && t - s.host_t0_ns < s.step_ns) {
        out.emplace_back(s.offset_ns + (t - s.host_t0_ns), value);
        break;
      }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

void write_chrome_trace(const SimPoint& p, const std::string& path, const std::string& option,
                        std::span<const TraceCounter> counters) {
  if (p.plans.size() != p.ranks.size())
    throw std::invalid_argument("write_chrome_trace: the SimPoint has no plans (simulate with keep_plans)");
  nlohmann::json events = nlohmann::json::array();
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    if (p.ranks[r].ops.size() != p.plans[r].ops.size())
      throw std::invalid_argument("write_chrome_trace: rank " + std::to_string(r) +
                                  " has no op timings (simulate with record_ops)");
    append_rank_names(events, static_cast<int>(r));
    append_op_events(events, p.plans[r], p.ranks[r].ops, static_cast<int>(r), 0, 0);
  }
  append_counter_events(events, counters);
  write_trace_document(std::move(events),
                       {{"step_ns", p.step_ns},
                        {"ratio", p.ratio},
                        {"requested_ratio", p.requested_ratio},
                        {"world", p.world},
                        {"oom", p.oom}},
                       path, option);
}

void write_chrome_trace(const SimPoint& p, const std::vector<TracedStep>& steps, const std::string& path,
                        const std::string& option, std::span<const TraceCounter> counters) {
  if (p.plans.empty()) throw std::invalid_argument("write_chrome_trace: the SimPoint has no plan");
  if (steps.empty()) throw std::invalid_argument("write_chrome_trace: no steps to trace");
  const core::StepPlan& plan = p.plans[0];
  nlohmann::json events = nlohmann::json::array();
  append_rank_names(events, 0);
  nlohmann::json list = nlohmann::json::array();
  for (const TracedStep& s : steps) {
    if (s.ops.size() != plan.ops.size())
      throw std::invalid_argument("write_chrome_trace: step " + std::to_string(s.step) + " has " +
                                  std::to_string(s.ops.size()) + " op timings, its plan " +
                                  std::to_string(plan.ops.size()) + " ops");
    append_op_events(events, plan, s.ops, 0, s.offset_ns, s.step);
    list.push_back({{"step", s.step}, {"offset_ns", s.offset_ns}, {"step_ns", s.step_ns}});
  }
  append_counter_events(events, counters);
  write_trace_document(
      std::move(events),
      {{"steps", std::move(list)}, {"ratio", p.ratio}, {"requested_ratio", p.requested_ratio}, {"world", p.world}},
      path, option);
}

}  // namespace tf::backend::sim
