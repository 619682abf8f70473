// `twinflow validate --breakdown TRACE...`: the measured per-layer forward and backward times of Chrome
// traces (`twinflow run --trace`) against the simulator's per-layer costs (backend::sim::layer_costs), by
// layer kind and pass, the prediction split by op class.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/sim/sim_backend.h"
#include "core/scenario.h"
#include "core/step.h"

namespace tf::app {

// Rank 0's forward and backward op time per layer in one trace, summed over its micro-batches.
struct TraceLayerTimes {
  std::string file;
  double ratio = 0;                                  // the trace's otherData.requested_ratio
  int world = 1;                                     // otherData.world
  std::vector<double> fwd_ns, bwd_ns;                // per layer (model order); 0 where the trace has none
  std::vector<int> fwd_ops, bwd_ops;                 // ops summed per layer (one per micro-batch)
  int steps = 1;                                     // the steps the trace holds (args.step; a window of --trace-steps)
  std::array<double, core::kOpKindCount> kind_ns{};  // every op of rank 0 by kind, summed over the steps
  std::array<int, core::kOpKindCount> kind_ops{};
};

// Reads a trace that `twinflow run --trace` (or `simulate --trace`) wrote, for a model of `layers`
// layers. Throws core::InputError naming the file and what is wrong (not JSON, no traceEvents, an op
// label that names no layer of the model).
TraceLayerTimes read_trace_layer_times(const std::string& file, size_t layers);

// One row of the breakdown: the layers of one kind in one pass.
struct BreakdownRow {
  core::LayerKind kind = core::LayerKind::kBlock;
  bool backward = false;
  int layers = 0;          // layers of this kind
  double measured_ms = 0;  // their ops' time summed; over several traces, the median of the sums
  double predicted_ms = 0;
  backend::sim::PassCost predicted;  // the layers' costs added up (x the measured ops per layer)
  double exposed_issue_ms = 0;       // the part of predicted_ms the host's issue time adds (PassCost::ns)
};

// One op kind of the first trace, a step's worth, against the simulator's own step at the trace's ratio and world:
// its op times with every slowdown the simulator applies (under collectives, copies and the CPU pass), where
// `rows` compares the layers' costs before them. Where both agree on the compute and differ here, the
// slowdowns are what is wrong.
struct OpKindRow {
  core::OpKind kind = core::OpKind::kForward;
  double ops = 0;                            // per step, measured
  double measured_ms = 0, simulated_ms = 0;  // per step, rank 0
};

struct Breakdown {
  std::vector<BreakdownRow> rows;                             // kinds in model order, forward before backward
  std::vector<double> trace_measured_ms, trace_predicted_ms;  // per trace: all forward + backward ops
  std::vector<backend::sim::LayerCost> costs;                 // the simulator's, per layer
  std::vector<OpKindRow> kinds;                               // the op kinds the first trace has
};

// The traces' layers against `sc`'s simulated costs (sc.cluster.hardware is the profile), at each trace's
// world, and the first trace's op kinds against the simulator's step. Throws core::InputError when a trace's
// layers do not match the model's.
Breakdown breakdown_traces(const core::Scenario& sc, const std::vector<TraceLayerTimes>& traces);

// The op class groups of the printed table: the GPU's work by class (they add up to PassCost::work_ns).
enum class CostGroup : uint8_t { kGemm, kAttention, kLayerNorm, kBiasAct, kEmbedding, kCrossEntropy, kOther };
inline constexpr int kCostGroupCount = 7;
std::string_view cost_group_name(CostGroup g);
double cost_group_ns(const backend::sim::PassCost& c, CostGroup g);

// Prints the table (per row: measured, predicted, error, the prediction by group), the per-trace totals and
// the GEMMs of each layer kind with their rates and whether the table measured their shape.
void print_breakdown(const Breakdown& b, const core::Scenario& sc);

}  // namespace tf::app
