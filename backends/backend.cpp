// Shared checks for the seam's types.
#include "backends/backend.h"

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <utility>
#include <vector>

#include "core/error.h"

namespace tf::backend {

namespace {
[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw core::InputError(where + ": " + what);
}

struct Named {
  const char* name;
  const BufferView* b;
};

// An out-of-place source: all of master and states or none, aligned, and disjoint from what the pass
// writes (reading a slot while writing another one over it would read half-updated values).
void check_source(OptimizerKind k, const OptimChunk& c, size_t alignment, const std::vector<Named>& present,
                  const std::string& where) {
  const StateSource& f = c.from;
  const bool two_states = core::state_count(k) == 2;
  if (!f.param && !f.state1 && !f.state2) return;
  if (!f.param || !f.state1 || two_states != (f.state2 != nullptr))
    fail(where, std::string("an out-of-place source needs param, state1") + (two_states ? " and state2" : "") +
                    " (and " + (two_states ? "nothing else" : "no state2") + ")");
  const size_t n = c.param.count;
  const size_t align = std::max<size_t>(alignment, 4);
  const std::pair<const char*, const float*> src[] = {
      {"from.param", f.param}, {"from.state1", f.state1}, {"from.state2", f.state2}};
  for (const auto& [name, p] : src) {
    if (!p) continue;
    if (reinterpret_cast<uintptr_t>(p) % align != 0)
      fail(where, std::string(name) + " is not aligned to " + std::to_string(align) + " bytes");
    const auto a0 = reinterpret_cast<uintptr_t>(p), a1 = a0 + n * 4;
    for (const Named& b : present) {
      if (b.b == &c.grad) continue;  // read only
      const auto b0 = reinterpret_cast<uintptr_t>(b.b->data), b1 = b0 + b.b->bytes();
      if (n > 0 && a0 < b1 && b0 < a1)
        fail(where, std::string(name) + " overlaps " + b.name +
                        ", which the pass writes; an out-of-place update "
                        "reads one slot and writes another");
    }
  }
}

}  // namespace

void validate_chunk(OptimizerKind k, const OptimChunk& c, size_t alignment, const std::string& where) {
  const size_t n = c.param.count;
  const bool two_states = core::state_count(k) == 2;
  std::vector<Named> present = {{"param", &c.param}, {"state1", &c.state1}, {"grad", &c.grad}};
  if (two_states) present.push_back({"state2", &c.state2});
  if (c.param_copy.dtype != DType::kNone || c.param_copy.data != nullptr || c.param_copy.count != 0)
    present.push_back({"param_copy", &c.param_copy});

  if (c.param.dtype != DType::kF32) fail(where, "param must be fp32");
  if (c.state1.dtype != DType::kF32) fail(where, "state1 must be fp32");
  if (two_states && c.state2.dtype != DType::kF32)
    fail(where, std::string(core::optimizer_name(k)) + " needs state2 (exp_avg_sq) as fp32");
  if (!two_states && (c.state2.data != nullptr || c.state2.count != 0))
    fail(where, std::string(core::optimizer_name(k)) + " has one state; state2 must be empty");
  if (c.grad.dtype == DType::kNone) fail(where, "grad dtype must be fp32, bf16 or fp16");
  if (c.param_copy.dtype == DType::kF32)
    fail(where, "param_copy must be bf16, fp16 or none (the fp32 master is updated in place)");

  for (const Named& b : present) {
    if (b.b->count != n) {
      std::ostringstream os;
      os << "buffer size mismatch: " << b.name << " has " << b.b->count << " elements, param has " << n;
      fail(where, os.str());
    }
    if (n > 0 && b.b->data == nullptr) fail(where, std::string(b.name) + " is null");
    const size_t align = std::max(alignment, core::dtype_bytes(b.b->dtype));
    if (reinterpret_cast<uintptr_t>(b.b->data) % align != 0) {
      std::ostringstream os;
      os << b.name << " pointer " << b.b->data << " is not aligned to " << align
         << " bytes; allocate with the backend or align the chunk start";
      fail(where, os.str());
    }
  }
  check_source(k, c, alignment, present, where);
  // Overlap: every written buffer must be disjoint from every other buffer.
  for (size_t i = 0; i < present.size(); ++i)
    for (size_t j = i + 1; j < present.size(); ++j) {
      const auto a0 = reinterpret_cast<uintptr_t>(present[i].b->data);
      const auto b0 = reinterpret_cast<uintptr_t>(present[j].b->data);
      const uintptr_t a1 = a0 + present[i].b->bytes(), b1 = b0 + present[j].b->bytes();
      if (n > 0 && a0 < b1 && b0 < a1)
        fail(where, std::string("buffers ") + present[i].name + " and " + present[j].name + " overlap");
    }
}

namespace {
struct Interval {
  int64_t start_ns, end_ns;
};
// Time in [0, horizon) covered by some interval of `any` and by none of `none`.
int64_t covered_only(const std::vector<Interval>& any, const std::vector<Interval>& none, int64_t horizon_ns) {
  struct Edge {
    int64_t t;
    int any, none;
  };
  std::vector<Edge> edges;
  edges.reserve(2 * (any.size() + none.size()));
  for (const Interval& i : any) {
    edges.push_back({i.start_ns, +1, 0});
    edges.push_back({i.end_ns, -1, 0});
  }
  for (const Interval& i : none) {
    edges.push_back({i.start_ns, 0, +1});
    edges.push_back({i.end_ns, 0, -1});
  }
  std::sort(edges.begin(), edges.end(), [](const Edge& a, const Edge& b) { return a.t < b.t; });
  int64_t total = 0, prev = 0;
  int n_any = 0, n_none = 0;
  for (const Edge& e : edges) {
    const int64_t t = std::min(e.t, horizon_ns);
    if (n_any > 0 && n_none == 0 && t > prev) total += t - prev;
    prev = std::max(prev, t);
    n_any += e.any;
    n_none += e.none;
  }
  return total;
}
}  // namespace

namespace {
void check_intervals(const core::StepPlan& plan, const std::vector<OpInterval>& ops) {
  if (ops.size() != plan.ops.size())
    throw core::InputError("summarize_timeline: " + std::to_string(ops.size()) + " intervals for a plan of " +
                           std::to_string(plan.ops.size()) + " ops");
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i].op != i || ops[i].end_ns < ops[i].start_ns)
      throw core::InputError("summarize_timeline: interval " + std::to_string(i) + " is not op " + std::to_string(i) +
                             " or ends before it starts");
}
}  // namespace

StepTimeline summarize_timeline(const core::StepPlan& plan, std::vector<OpInterval> ops, const NextStep* next) {
  check_intervals(plan, ops);
  if (next) check_intervals(plan, next->ops);
  StepTimeline t;
  std::vector<Interval> compute, gpu_busy, transfer, cpu, copies, gpu_or_cpu_busy;
  int64_t last_backward_end = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    const OpInterval& o = ops[i];
    const core::Op& op = plan.ops[i];
    const int64_t d = o.end_ns - o.start_ns;
    t.busy_ns[static_cast<size_t>(op.queue)] += d;
    t.kind_ns[static_cast<size_t>(op.kind)] += d;
    t.step_ns = std::max(t.step_ns, o.end_ns);
    const Interval iv{o.start_ns, o.end_ns};
    if (op.kind == core::OpKind::kBackward) last_backward_end = std::max(last_backward_end, o.end_ns);
    switch (op.queue) {
      case core::Queue::kCompute:
        compute.push_back(iv);
        gpu_busy.push_back(iv);
        gpu_or_cpu_busy.push_back(iv);
        break;
      case core::Queue::kComm:
        gpu_busy.push_back(iv);
        gpu_or_cpu_busy.push_back(iv);
        break;
      case core::Queue::kD2H:
      case core::Queue::kH2D:
        transfer.push_back(iv);
        copies.push_back(iv);
        break;
      case core::Queue::kCpu:
        transfer.push_back(iv);
        cpu.push_back(iv);
        gpu_or_cpu_busy.push_back(iv);
        break;
    }
  }
  const int64_t tail_end_ns = t.step_ns;  // the step's last op (with a carried tail: after the next began)
  if (next) {  // the next step's GPU work hides this step's tail; the step's time is the period
    for (const OpInterval& o : next->ops) {
      const core::Queue q = plan.ops[o.op].queue;
      if (q != core::Queue::kCompute && q != core::Queue::kComm) continue;
      if (q == core::Queue::kCompute) compute.push_back({o.start_ns, o.end_ns});
      gpu_busy.push_back({o.start_ns, o.end_ns});
      gpu_or_cpu_busy.push_back({o.start_ns, o.end_ns});
    }
    t.step_ns = next->period_ns;
  }
  t.optimizer_phase_ns = std::max<int64_t>(0, t.step_ns - last_backward_end);
  t.exposed_ns = covered_only({{0, t.step_ns}}, compute, t.step_ns);
  t.exposed_transfer_ns = covered_only(transfer, gpu_busy, tail_end_ns);
  t.exposed_cpu_optimizer_ns = covered_only(cpu, gpu_busy, tail_end_ns);
  t.exposed_copies_ns = covered_only(copies, gpu_or_cpu_busy, tail_end_ns);
  // one thread runs the CPU queue's ops back to back, so they never overlap each other
  t.cpu_overlapped_ns = t.busy_ns[size_t(core::Queue::kCpu)] - covered_only(cpu, compute, tail_end_ns);
  t.ops = std::move(ops);
  return t;
}

}  // namespace tf::backend
