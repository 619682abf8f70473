// Simulated resources: FIFO queues of ops (streams, copy engines, the CPU pool), dependency events, shared bandwidth.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "sim/cost_model.h"
#include "sim/event_queue.h"

// Lifetime rule for everything here: a Resource, FluidServer, SharedLink or CpuPool holds raw
// pointers to its EventQueue and to its peers, and the callbacks it schedules hold raw pointers to
// it. Create them after the EventQueue they use and destroy them before it (members of one
// simulation object, declared in that order), and do not fire Events or run the queue after a
// resource that waits on them is gone. None of them is copyable or movable.
namespace tf::sim {

// A one-shot completion signal, like a CUDA event: ops wait for Events, and each op's Event fires when
// it ends. A handle with shared ownership; a default-constructed handle is empty (valid() is false).
class Event {
 public:
  Event() = default;
  // A new pending event.
  static Event create();
  // An event that has already fired at time t (for ops that depend on something already done).
  static Event fired_at(TimeNs t);

  bool valid() const noexcept { return state_ != nullptr; }
  bool fired() const;
  // The time it fired; throws std::logic_error while pending.
  TimeNs time() const;
  // Marks it fired at t and runs its waiters in the order they were added, synchronously. Firing
  // twice throws std::logic_error.
  void fire(TimeNs t);
  // Runs fn when it fires (at once if it already has).
  void on_fire(Callback fn);

 private:
  struct State {
    TimeNs time_ns = -1;  // -1 while pending
    std::vector<Callback> waiters;
  };
  void require_valid(const char* who) const;
  std::shared_ptr<State> state_;
};

class Work;
class HostCpuPool;

// A callable that computes an op's duration (TimeNs) when the op starts.
template <class F>
concept CostFunction = !std::is_convertible_v<F, TimeNs> && !std::is_same_v<std::remove_cvref_t<F>, Work> &&
                       std::is_invocable_r_v<TimeNs, std::decay_t<F>&>;

// What an op does once it starts on a Resource:
// - a fixed duration (implicit from TimeNs);
// - a cost function, called when the op starts (so it sees the state of the simulation then), returning
//   the duration (implicit from any callable returning TimeNs);
// - asynchronous work (Work::async): a starter that receives `done` and calls it once when the op ends,
//   at the same simulated time or later. Transfers on a SharedLink and work on a CpuPool are built so.
class Work {
 public:
  using CostFn = InlineFunction<TimeNs()>;
  using Starter = InlineFunction<void(Callback done)>;

  Work(TimeNs duration_ns);  // NOLINT: implicit, so submit("x", 1000) reads naturally
  template <CostFunction F>
  Work(F&& cost_fn) : body_(CostFn(std::forward<F>(cost_fn))) {}  // NOLINT: implicit
  static Work async(Starter starter);

 private:
  friend class Resource;
  Work() = default;
  std::variant<TimeNs, CostFn, Starter> body_;
};

// One op's stay on a resource, for utilization and traces.
struct BusyInterval {
  TimeNs start_ns = 0;
  TimeNs end_ns = 0;
  std::string label;
};

// A queue on which ops run one at a time in submission order (a GPU compute or comm stream, a d2h or
// h2d copy engine, the CPU optimizer pool). An op starts when the resource is free, every op submitted
// before it has ended, and all its dependency Events have fired; like a CUDA stream, an op that waits
// blocks the ops behind it. At an op's end, in this order and at the same simulated time: its busy
// interval is recorded, its on_done runs, its Event fires (ops on other resources waiting on it may
// start), and the next op on this resource may start.
class Resource {
 public:
  Resource(EventQueue& queue, std::string name);
  Resource(const Resource&) = delete;
  Resource& operator=(const Resource&) = delete;

  // Queues an op; returns the Event that fires when it ends. Empty dependency handles throw
  // std::invalid_argument; a negative duration (fixed or from a cost function) throws too.
  Event submit(std::string label, Work work, std::span<const Event> deps = {}, Callback on_done = {});
  Event submit(std::string label, Work work, std::initializer_list<Event> deps, Callback on_done = {});

  const std::string& name() const noexcept { return name_; }
  EventQueue& queue() const noexcept { return *queue_; }
  bool busy() const noexcept { return busy_; }
  // Ops submitted and not yet ended (the running one included).
  std::size_t outstanding() const noexcept { return ops_.size(); }
  uint64_t ops_completed() const noexcept { return completed_; }
  // Sum of the busy time of ended ops.
  TimeNs busy_ns() const noexcept { return busy_ns_; }

  // Busy intervals of ended ops, in order (recorded unless turned off, e.g. for long sweeps).
  void set_record_intervals(bool on) noexcept { record_ = on; }
  const std::vector<BusyInterval>& intervals() const noexcept { return intervals_; }
  void clear_intervals() noexcept { intervals_.clear(); }
  // The fraction of [start_ns, end_ns) covered by the recorded intervals.
  double utilization(TimeNs start_ns, TimeNs end_ns) const;

 private:
  struct Op {
    std::string label;
    Work work;
    Callback on_done;
    Event done;
    uint32_t pending_deps = 0;
  };
  void try_start();
  void start_head();
  void finish_head();
  Callback finisher();

  EventQueue* queue_;
  std::string name_;
  std::deque<Op> ops_;  // front: the running op, or the next to run
  bool busy_ = false;
  bool in_try_start_ = false;
  bool starting_ = false;        // inside an async starter
  bool ended_in_start_ = false;  // the async starter called done synchronously
  TimeNs head_start_ns_ = 0;
  uint64_t head_serial_ = 0;  // counts started ops; a stale or repeated `done` is detected by it
  uint64_t completed_ = 0;
  TimeNs busy_ns_ = 0;
  bool record_ = true;
  std::vector<BusyInterval> intervals_;
};

// A fluid (processor-sharing) server: jobs of several classes progress at the same time, each at a
// rate that depends on how many jobs of each class are active (and on anything else the rate function
// reads; call rates_changed() when that changes). Whenever the set of jobs or the rates change, the
// remaining work of every job is settled at the old rates up to now and the next completion is
// re-planned at the new ones. Amounts and rates are in units and units per ns (bytes and GB/s, or
// params and Gparam/s). A job ends at the first whole ns at which its remaining work is done
// (ceil_ns). Jobs that end at the same time complete in the order they started.
class FluidServer {
 public:
  // Rate of one job of class job_class (> 0, units per ns), given the active jobs per class.
  using RateFn = std::function<double(int job_class, std::span<const int> active_per_class)>;
  // Called with true when the first job starts and false when the last ends.
  using ActivityListener = std::function<void(bool active)>;
  // Called with (class, true) when a class's first job starts and (class, false) when its last ends.
  using ClassActivityListener = std::function<void(int job_class, bool active)>;

  FluidServer(EventQueue& queue, int classes, RateFn per_job_rate);
  FluidServer(const FluidServer&) = delete;
  FluidServer& operator=(const FluidServer&) = delete;

  void start(int job_class, double amount, Callback on_done);
  // Settle at the old rates and re-plan (the rate function's inputs changed outside this server).
  void rates_changed();
  void add_activity_listener(ActivityListener listener);
  void add_class_activity_listener(ClassActivityListener listener);

  int active(int job_class) const;
  int active_total() const noexcept { return static_cast<int>(jobs_.size()); }
  // The current rate of one job of this class (0 when none is active).
  double current_rate(int job_class) const;
  // The work the oldest job in flight has left now, at the rates planned since the last change (0 when
  // none is active).
  double oldest_remaining() const;

 private:
  struct Job {
    int job_class;
    double remaining;
    double rate;
    Callback on_done;
  };
  void settle();
  void replan();
  void on_timer(uint64_t generation);
  void notify(bool active);
  void notify_class(int job_class, bool active);

  EventQueue* queue_;
  RateFn rate_fn_;
  std::vector<int> active_;
  std::vector<Job> jobs_;            // in start order
  std::vector<double> class_rate_;   // per-job rate of each class, as last planned
  std::vector<Callback> finishing_;  // spare capacity for the batch of jobs ending together
  std::vector<ActivityListener> listeners_;
  std::vector<ClassActivityListener> class_listeners_;
  TimeNs settled_ns_ = 0;
  uint64_t generation_ = 0;
  TimeNs timer_ns_ = -1;  // the pending completion timer's time, -1 if none
};

// A PCIe link between one host and its GPU(s), both directions sharing it (pcie_shared_gbps): one
// direction alone runs at its own rate; both at once split bidir_total_gbps. Each transfer first waits
// latency_ns (not sharing bandwidth), then flows; while a CPU pass of a watched host runs, each
// direction's rate divides by its factor (slow_while_cpu_pass). Copy-engine Resources run transfers
// through it:
//   d2h.submit("grads", link.transfer(Direction::kD2H, bytes), deps);
class SharedLink {
 public:
  using ActivityListener = FluidServer::ActivityListener;

  SharedLink(EventQueue& queue, PcieParams params);  // params validated (std::invalid_argument)
  SharedLink(const SharedLink&) = delete;
  SharedLink& operator=(const SharedLink&) = delete;

  void start(Direction dir, int64_t bytes, Callback on_done);
  Work transfer(Direction dir, int64_t bytes);

  // While any rank of `host` runs a CPU optimizer pass, a transfer's rate divides by h2d_factor or
  // d2h_factor (finite, >= 1; std::invalid_argument otherwise): the DMA and the pass share the host's
  // DRAM (docs/ARCHITECTURE.md, "Copies slowed by the CPU pass"). Several watched hosts, all active,
  // multiply their factors. The link must not outlive `host`'s events (the lifetime rule above).
  void slow_while_cpu_pass(HostCpuPool& host, double h2d_factor, double d2h_factor);
  // The product of the active CPU-pass factors of this direction (1 while none runs).
  double cpu_pass_factor(Direction dir) const;

  // Whether any transfer is flowing (latency phases do not count).
  bool active() const noexcept { return server_.active_total() > 0; }
  int active(Direction dir) const { return server_.active(static_cast<int>(dir)); }
  // The current rate of one transfer in this direction, GB/s (0 when none is flowing).
  double current_gbps(Direction dir) const { return server_.current_rate(static_cast<int>(dir)); }
  const PcieParams& params() const noexcept { return params_; }
  // Called with true when the link starts carrying data and false when it goes idle.
  void add_activity_listener(ActivityListener listener) { server_.add_activity_listener(std::move(listener)); }
  // Called with (dir, true) when a transfer of that direction starts flowing with none before it, and
  // (dir, false) when the direction's last one ends.
  using DirectionListener = std::function<void(Direction dir, bool active)>;
  void add_direction_listener(DirectionListener listener);

 private:
  struct CpuPassSource {
    double factor[2];  // by Direction
    int active = 0;
  };
  EventQueue* queue_;
  PcieParams params_;
  std::vector<CpuPassSource> cpu_passes_;
  FluidServer server_;
};

// How much longer a CPU pass takes while a link its rank watches carries copies (memory bandwidth taken
// by DMA: CPU Adam ran 1.35-1.68x slower on our H100 host during copies), by what the link carries:
// device-to-host copies only, host-to-device only, or both directions (then at least the larger of the two).
struct DmaSlowdown {
  double both = 1, d2h = 1, h2d = 1;  // each finite and >= 1
  // The factor while the rank's watched links carry D2H copies (d2h_active) and H2D copies (h2d_active).
  double factor(bool d2h_active, bool h2d_active) const;
};

// The CPU optimizer passes of the ranks of one host, sharing its cores and memory bandwidth as a
// processor-sharing server: while `a` passes of the host run at once, each progresses at
// rate_of_active(a) Gparam/s, divided by its DmaSlowdown factor while a link that rank watches carries
// transfers. Each rank's CPU optimizer Resource runs its chunks through it:
//   cpu.submit("adam chunk 3", host.work(local_rank, params), {grads_landed});
// (docs/ARCHITECTURE.md, "The simulator: the host is shared".)
class HostCpuPool {
 public:
  // Gparam/s of one pass while `active` (>= 1) passes run; called whenever that number changes, and
  // must return a finite value > 0 (std::invalid_argument otherwise).
  using RateFn = std::function<double(int active)>;
  HostCpuPool(EventQueue& queue, int ranks, RateFn rate_of_active, DmaSlowdown dma);
  // One factor whatever the direction.
  HostCpuPool(EventQueue& queue, int ranks, RateFn rate_of_active, double dma_slowdown_factor = 1)
      : HostCpuPool(queue, ranks, std::move(rate_of_active),
                    DmaSlowdown{dma_slowdown_factor, dma_slowdown_factor, dma_slowdown_factor}) {}
  HostCpuPool(const HostCpuPool&) = delete;
  HostCpuPool& operator=(const HostCpuPool&) = delete;

  // Rank `rank`'s passes slow down by the factor of what this link carries while it is active.
  void watch(int rank, SharedLink& link);
  // Called with true when the first pass of any rank starts and false when the last ends.
  void add_activity_listener(FluidServer::ActivityListener listener) {
    server_.add_activity_listener(std::move(listener));
  }

  void start(int rank, int64_t params, Callback on_done);
  Work work(int rank, int64_t params);

  int ranks() const noexcept { return static_cast<int>(active_links_.size()); }
  int active() const noexcept { return server_.active_total(); }
  bool slowed(int rank) const { return active_links_.at(static_cast<size_t>(rank)).any(); }
  // The current rate of one pass of this rank, Gparam/s (0 when it runs none).
  double current_gparam_s(int rank) const { return server_.current_rate(rank); }

 private:
  // Per rank: its watched links carrying D2H and H2D copies now.
  struct ActiveLinks {
    int d2h = 0, h2d = 0;
    bool any() const { return d2h > 0 || h2d > 0; }
  };
  void check_rank(int rank, const char* who) const;
  double slowdown_of(int rank) const;
  // Applies `change` to rank's counts and re-plans when its factor or whether it is slowed changed.
  void update_links(int rank, int d2h_delta, int h2d_delta);
  RateFn rate_of_active_;
  DmaSlowdown slowdown_;
  std::vector<ActiveLinks> active_links_;  // per rank
  FluidServer server_;
};

// Work whose time was measured alone (ns) and that runs slower while other activity shares its
// hardware: while a source is active its factor multiplies the time of the work in progress (the GPU's
// forward and backward while the rank's collectives or PCIe copies run: docs/ARCHITECTURE.md, "Compute
// slowed by collectives and copies"). Factors of 1 change nothing. Jobs in flight share it equally.
class SlowedServer {
 public:
  explicit SlowedServer(EventQueue& queue);
  SlowedServer(const SlowedServer&) = delete;
  SlowedServer& operator=(const SlowedServer&) = delete;

  // A source of contention with its slowdown factor (finite, >= 1; std::invalid_argument otherwise);
  // returns its id. Active while set_active(id, true) calls outnumber set_active(id, false) ones.
  int add_source(double factor);
  void set_active(int source, bool active);
  // A link as a source: active while it carries a transfer.
  void watch(SharedLink& link, double factor);

  void start(TimeNs alone_ns, Callback on_done);
  Work work(TimeNs alone_ns);
  // The time of one ns of alone-work now (the product of the active sources' factors).
  double current_factor() const;
  // The alone-work (ns) the oldest job in flight has left now (0 when none is in flight).
  double remaining_alone_ns() const { return server_.oldest_remaining(); }

 private:
  std::vector<double> factor_;
  std::vector<int> active_;
  FluidServer server_;
};

// One CPU pool on its own: rate_gparam_s shared equally by the jobs in flight, divided by its DmaSlowdown
// factor while any watched SharedLink carries a transfer (a HostCpuPool of one rank).
//   cpu.submit("stats 3", pool.work(params), {grads_landed});
class CpuPool {
 public:
  CpuPool(EventQueue& queue, double rate_gparam_s, DmaSlowdown dma);
  CpuPool(EventQueue& queue, double rate_gparam_s, double dma_slowdown_factor = 1)
      : CpuPool(queue, rate_gparam_s, DmaSlowdown{dma_slowdown_factor, dma_slowdown_factor, dma_slowdown_factor}) {}
  CpuPool(const CpuPool&) = delete;
  CpuPool& operator=(const CpuPool&) = delete;

  // The rate divides by the slowdown factor while this link is active.
  void watch(SharedLink& link) { host_.watch(0, link); }

  void start(int64_t params, Callback on_done) { host_.start(0, params, std::move(on_done)); }
  Work work(int64_t params) { return host_.work(0, params); }

  // Whether a watched link is active now.
  bool slowed() const { return host_.slowed(0); }
  int active() const noexcept { return host_.active(); }
  // The current rate of one job, Gparam/s (0 when none is running).
  double current_gparam_s() const { return host_.current_gparam_s(0); }

 private:
  HostCpuPool host_;
};

}  // namespace tf::sim
