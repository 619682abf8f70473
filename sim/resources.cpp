// Simulated resources: events, FIFO resources, and the fluid (processor-sharing) model behind PCIe and the CPU pool.
#include "sim/resources.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

namespace tf::sim {

// ---- Event ----------------------------------------------------------------------------------------

Event Event::create() {
  Event e;
  e.state_ = std::make_shared<State>();
  return e;
}

Event Event::fired_at(TimeNs t) {
  if (t < 0) throw std::invalid_argument("Event::fired_at: time " + std::to_string(t) + " ns is negative");
  Event e = create();
  e.state_->time_ns = t;
  return e;
}

void Event::require_valid(const char* who) const {
  if (state_ == nullptr) throw std::logic_error(std::string("Event::") + who + ": empty Event handle");
}

bool Event::fired() const {
  require_valid("fired");
  return state_->time_ns >= 0;
}

TimeNs Event::time() const {
  require_valid("time");
  if (state_->time_ns < 0) throw std::logic_error("Event::time: the event has not fired");
  return state_->time_ns;
}

void Event::fire(TimeNs t) {
  require_valid("fire");
  if (t < 0) throw std::invalid_argument("Event::fire: time " + std::to_string(t) + " ns is negative");
  if (state_->time_ns >= 0)
    throw std::logic_error("Event::fire: already fired at " + std::to_string(state_->time_ns) + " ns");
  state_->time_ns = t;
  // Waiters added while these run see a fired event and run at once, so the list is final here.
  std::vector<Callback> waiters = std::move(state_->waiters);
  state_->waiters.clear();
  for (Callback& w : waiters) w();
}

void Event::on_fire(Callback fn) {
  require_valid("on_fire");
  if (!fn) throw std::invalid_argument("Event::on_fire: empty callback");
  if (state_->time_ns >= 0) {
    fn();
  } else {
    state_->waiters.push_back(std::move(fn));
  }
}

// ---- Work -----------------------------------------------------------------------------------------

Work::Work(TimeNs duration_ns) : body_(duration_ns) {
  if (duration_ns < 0) throw std::invalid_argument("Work: duration " + std::to_string(duration_ns) + " ns is negative");
}

Work Work::async(Starter starter) {
  if (!starter) throw std::invalid_argument("Work::async: empty starter");
  Work w;
  w.body_.emplace<Starter>(std::move(starter));
  return w;
}

// ---- Resource -------------------------------------------------------------------------------------

Resource::Resource(EventQueue& queue, std::string name) : queue_(&queue), name_(std::move(name)) {}

Event Resource::submit(std::string label, Work work, std::initializer_list<Event> deps, Callback on_done) {
  return submit(std::move(label), std::move(work), std::span<const Event>(deps.begin(), deps.size()),
                std::move(on_done));
}

Event Resource::submit(std::string label, Work work, std::span<const Event> deps, Callback on_done) {
  for (std::size_t i = 0; i < deps.size(); ++i)
    if (!deps[i].valid())
      throw std::invalid_argument("Resource " + name_ + ": submit(\"" + label + "\"): dependency " + std::to_string(i) +
                                  " is an empty Event handle");
  Event done = Event::create();
  ops_.push_back(Op{std::move(label), std::move(work), std::move(on_done), done, 0});
  Op& op = ops_.back();  // a deque keeps references to its elements across push_back and pop_front
  for (const Event& dep : deps) {
    if (dep.fired()) continue;
    ++op.pending_deps;
    Event(dep).on_fire([this, &op] {
      --op.pending_deps;
      try_start();
    });
  }
  try_start();
  return done;
}

void Resource::try_start() {
  // An op that ends while it starts (async work calling done at once) must not start the next one from
  // inside start_head: the loop below does, so the stack stays flat however many ops end at once.
  if (in_try_start_) return;
  in_try_start_ = true;
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset{in_try_start_};
  while (!busy_ && !ops_.empty() && ops_.front().pending_deps == 0) start_head();
}

Callback Resource::finisher() {
  return [this, serial = head_serial_] {
    if (!busy_ || serial != head_serial_)
      throw std::logic_error("Resource " + name_ + ": an op's done callback was called twice or after it ended");
    if (starting_) {
      ended_in_start_ = true;
    } else {
      finish_head();
    }
  };
}

void Resource::start_head() {
  Op& op = ops_.front();
  head_start_ns_ = queue_->now();
  ++head_serial_;
  // A failing op (a cost function that throws or returns a negative duration, a starter that throws)
  // is dropped before the exception propagates, so the resource stays usable; its Event never fires.
  struct DropOnFailure {
    Resource& r;
    bool armed = true;
    ~DropOnFailure() {
      if (!armed) return;
      r.busy_ = false;
      r.starting_ = false;
      r.ops_.pop_front();
    }
  } drop{*this};
  if (auto* fixed = std::get_if<TimeNs>(&op.work.body_)) {
    queue_->schedule_after(*fixed, finisher());
    busy_ = true;
    drop.armed = false;
  } else if (auto* cost = std::get_if<Work::CostFn>(&op.work.body_)) {
    const TimeNs duration = (*cost)();
    if (duration < 0)
      throw std::invalid_argument("Resource " + name_ + ": op \"" + op.label + "\": cost function returned " +
                                  std::to_string(duration) + " ns");
    queue_->schedule_after(duration, finisher());
    busy_ = true;
    drop.armed = false;
  } else {
    auto& starter = std::get<Work::Starter>(op.work.body_);
    busy_ = true;
    starting_ = true;
    ended_in_start_ = false;
    starter(finisher());
    drop.armed = false;
    starting_ = false;
    if (ended_in_start_) finish_head();
  }
}

void Resource::finish_head() {
  Op op = std::move(ops_.front());
  ops_.pop_front();
  const TimeNs end = queue_->now();
  busy_ns_ += end - head_start_ns_;
  ++completed_;
  if (record_) intervals_.push_back(BusyInterval{head_start_ns_, end, std::move(op.label)});
  busy_ = false;
  if (op.on_done) op.on_done();
  op.done.fire(end);
  try_start();
}

double Resource::utilization(TimeNs start_ns, TimeNs end_ns) const {
  if (end_ns <= start_ns)
    throw std::invalid_argument("Resource " + name_ + ": utilization window [" + std::to_string(start_ns) + ", " +
                                std::to_string(end_ns) + ") is empty");
  TimeNs covered = 0;
  for (const BusyInterval& b : intervals_) {
    const TimeNs lo = std::max(b.start_ns, start_ns), hi = std::min(b.end_ns, end_ns);
    if (hi > lo) covered += hi - lo;
  }
  return static_cast<double>(covered) / static_cast<double>(end_ns - start_ns);
}

// ---- FluidServer ----------------------------------------------------------------------------------

namespace {
// Whole ns until a job with this much work left ends at this rate.
TimeNs ns_to_finish(double remaining, double rate) { return ceil_ns(std::max(0.0, remaining) / rate); }
}  // namespace

FluidServer::FluidServer(EventQueue& queue, int classes, RateFn per_job_rate)
    : queue_(&queue), rate_fn_(std::move(per_job_rate)), settled_ns_(queue.now()) {
  if (classes < 1) throw std::invalid_argument("FluidServer: classes = " + std::to_string(classes) + "; allowed: >= 1");
  if (!rate_fn_) throw std::invalid_argument("FluidServer: empty rate function");
  active_.assign(static_cast<std::size_t>(classes), 0);
  class_rate_.assign(static_cast<std::size_t>(classes), 0.0);
}

int FluidServer::active(int job_class) const {
  if (job_class < 0 || job_class >= static_cast<int>(active_.size()))
    throw std::invalid_argument("FluidServer::active: job class " + std::to_string(job_class) + " out of range");
  return active_[static_cast<std::size_t>(job_class)];
}

double FluidServer::current_rate(int job_class) const {
  return active(job_class) > 0 ? class_rate_[static_cast<std::size_t>(job_class)] : 0.0;
}

double FluidServer::oldest_remaining() const {
  if (jobs_.empty()) return 0;
  const Job& j = jobs_.front();
  return std::max(0.0, j.remaining - j.rate * static_cast<double>(queue_->now() - settled_ns_));
}

void FluidServer::add_activity_listener(ActivityListener listener) {
  if (!listener) throw std::invalid_argument("FluidServer::add_activity_listener: empty listener");
  listeners_.push_back(std::move(listener));
}

void FluidServer::add_class_activity_listener(ClassActivityListener listener) {
  if (!listener) throw std::invalid_argument("FluidServer::add_class_activity_listener: empty listener");
  class_listeners_.push_back(std::move(listener));
}

void FluidServer::start(int job_class, double amount, Callback on_done) {
  if (job_class < 0 || job_class >= static_cast<int>(active_.size()))
    throw std::invalid_argument("FluidServer::start: job class " + std::to_string(job_class) + " out of range [0, " +
                                std::to_string(active_.size()) + ")");
  if (!(amount >= 0) || !std::isfinite(amount))
    throw std::invalid_argument("FluidServer::start: amount " + std::to_string(amount) +
                                "; allowed: a finite value >= 0");
  settle();
  const bool was_idle = jobs_.empty();
  jobs_.push_back(Job{job_class, amount, 0.0, std::move(on_done)});
  const bool class_was_idle = ++active_[static_cast<std::size_t>(job_class)] == 1;
  replan();
  if (was_idle) notify(true);
  if (class_was_idle) notify_class(job_class, true);
}

void FluidServer::rates_changed() {
  settle();
  replan();
}

void FluidServer::settle() {
  const TimeNs now = queue_->now();
  const TimeNs dt = now - settled_ns_;
  if (dt > 0)
    for (Job& j : jobs_) j.remaining -= j.rate * static_cast<double>(dt);
  settled_ns_ = now;
}

void FluidServer::replan() {
  for (std::size_t c = 0; c < active_.size(); ++c) {
    if (active_[c] == 0) continue;
    const double r = rate_fn_(static_cast<int>(c), active_);
    if (!(r > 0) || !std::isfinite(r))
      throw std::logic_error("FluidServer: the rate function gave " + std::to_string(r) + " for job class " +
                             std::to_string(c) + " with jobs active; rates must be finite and > 0");
    class_rate_[c] = r;
  }
  if (jobs_.empty()) {
    timer_ns_ = -1;
    ++generation_;  // cancels the pending timer
    return;
  }
  TimeNs next = std::numeric_limits<TimeNs>::max();
  for (Job& j : jobs_) {
    j.rate = class_rate_[static_cast<std::size_t>(j.job_class)];
    next = std::min(next, queue_->now() + ns_to_finish(j.remaining, j.rate));
  }
  if (next == timer_ns_) return;  // the pending timer already fires then
  timer_ns_ = next;
  queue_->schedule_at(next, [this, generation = ++generation_] { on_timer(generation); });
}

void FluidServer::on_timer(uint64_t generation) {
  if (generation != generation_) return;  // re-planned since
  timer_ns_ = -1;
  settle();
  std::vector<Callback> batch;
  batch.swap(finishing_);  // reuse the capacity, and stay re-entrant if a callback starts a job here
  const std::vector<int> active_before = active_;
  auto keep = jobs_.begin();
  for (auto it = jobs_.begin(); it != jobs_.end(); ++it) {
    if (ns_to_finish(it->remaining, it->rate) == 0) {
      --active_[static_cast<std::size_t>(it->job_class)];
      batch.push_back(std::move(it->on_done));
    } else {
      if (keep != it) *keep = std::move(*it);
      ++keep;
    }
  }
  jobs_.erase(keep, jobs_.end());
  const bool idle = jobs_.empty();
  replan();
  if (idle) notify(false);
  for (size_t c = 0; c < active_.size(); ++c)
    if (active_before[c] > 0 && active_[c] == 0) notify_class(static_cast<int>(c), false);
  for (Callback& cb : batch)
    if (cb) cb();
  batch.clear();
  if (finishing_.capacity() < batch.capacity()) finishing_.swap(batch);
}

void FluidServer::notify(bool active) {
  for (const ActivityListener& l : listeners_) l(active);
}

void FluidServer::notify_class(int job_class, bool active) {
  for (const ClassActivityListener& l : class_listeners_) l(job_class, active);
}

// ---- SharedLink -----------------------------------------------------------------------------------

SharedLink::SharedLink(EventQueue& queue, PcieParams params)
    : queue_(&queue), params_(params), server_(queue, 2, [this](int job_class, std::span<const int> active) {
        const auto dir = static_cast<Direction>(job_class);
        return pcie_shared_gbps(params_, dir, active[0], active[1]) / cpu_pass_factor(dir);
      }) {
  (void)pcie_copy_ns(params_, Direction::kH2D, 0);  // validates the parameters
  static_assert(static_cast<int>(Direction::kH2D) == 0 && static_cast<int>(Direction::kD2H) == 1);
}

void SharedLink::start(Direction dir, int64_t bytes, Callback on_done) {
  if (bytes < 0) throw std::invalid_argument("SharedLink::start: bytes = " + std::to_string(bytes) + "; allowed: >= 0");
  if (params_.latency_ns > 0) {
    queue_->schedule_after(ceil_ns(params_.latency_ns), [this, dir, bytes, cb = std::move(on_done)]() mutable {
      server_.start(static_cast<int>(dir), static_cast<double>(bytes), std::move(cb));
    });
  } else {
    server_.start(static_cast<int>(dir), static_cast<double>(bytes), std::move(on_done));
  }
}

Work SharedLink::transfer(Direction dir, int64_t bytes) {
  if (bytes < 0)
    throw std::invalid_argument("SharedLink::transfer: bytes = " + std::to_string(bytes) + "; allowed: >= 0");
  return Work::async([this, dir, bytes](Callback done) { start(dir, bytes, std::move(done)); });
}

void SharedLink::add_direction_listener(DirectionListener listener) {
  if (!listener) throw std::invalid_argument("SharedLink::add_direction_listener: empty listener");
  server_.add_class_activity_listener(
      [l = std::move(listener)](int job_class, bool active) { l(static_cast<Direction>(job_class), active); });
}

void SharedLink::slow_while_cpu_pass(HostCpuPool& host, double h2d_factor, double d2h_factor) {
  for (const double f : {h2d_factor, d2h_factor})
    if (!(f >= 1) || !std::isfinite(f))
      throw std::invalid_argument("SharedLink::slow_while_cpu_pass: factor = " + std::to_string(f) +
                                  "; allowed: a finite value >= 1");
  static_assert(static_cast<int>(Direction::kH2D) == 0 && static_cast<int>(Direction::kD2H) == 1);
  const size_t id = cpu_passes_.size();
  cpu_passes_.push_back(CpuPassSource{{h2d_factor, d2h_factor}, host.active() > 0 ? 1 : 0});
  if (cpu_passes_.back().active > 0) server_.rates_changed();
  host.add_activity_listener([this, id](bool active) {
    cpu_passes_[id].active += active ? 1 : -1;
    server_.rates_changed();
  });
}

double SharedLink::cpu_pass_factor(Direction dir) const {
  double f = 1;
  for (const CpuPassSource& s : cpu_passes_)
    if (s.active > 0) f *= s.factor[static_cast<int>(dir)];
  return f;
}

// ---- CpuPool --------------------------------------------------------------------------------------

double DmaSlowdown::factor(bool d2h_active, bool h2d_active) const {
  if (d2h_active && h2d_active) return std::max({both, d2h, h2d});
  return d2h_active ? d2h : h2d_active ? h2d : 1.0;
}

HostCpuPool::HostCpuPool(EventQueue& queue, int ranks, RateFn rate_of_active, DmaSlowdown dma)
    : rate_of_active_(std::move(rate_of_active)),
      slowdown_(dma),
      active_links_(static_cast<size_t>(std::max(ranks, 0))),
      server_(queue, std::max(ranks, 1), [this](int rank, std::span<const int> active) {
        int total = 0;
        for (int a : active) total += a;
        const double rate = rate_of_active_(total);
        if (!(rate > 0) || !std::isfinite(rate))
          throw std::invalid_argument("HostCpuPool: the rate with " + std::to_string(total) + " passes active is " +
                                      std::to_string(rate) + "; allowed: a finite value > 0");
        return rate / slowdown_of(rank);
      }) {
  if (ranks < 1) throw std::invalid_argument("HostCpuPool: ranks = " + std::to_string(ranks) + "; allowed: >= 1");
  if (!rate_of_active_) throw std::invalid_argument("HostCpuPool: no rate function");
  for (const auto& [name, f] : {std::pair{"both", dma.both}, std::pair{"d2h", dma.d2h}, std::pair{"h2d", dma.h2d}})
    if (!(f >= 1) || !std::isfinite(f))
      throw std::invalid_argument(std::string("HostCpuPool: dma slowdown factor (") + name +
                                  ") = " + std::to_string(f) + "; allowed: a finite value >= 1");
}

double HostCpuPool::slowdown_of(int rank) const {
  const ActiveLinks& l = active_links_[static_cast<size_t>(rank)];
  return slowdown_.factor(l.d2h > 0, l.h2d > 0);
}

void HostCpuPool::update_links(int rank, int d2h_delta, int h2d_delta) {
  ActiveLinks& l = active_links_[static_cast<size_t>(rank)];
  const bool was_slowed = l.any();
  const double before = slowdown_of(rank);
  l.d2h += d2h_delta;
  l.h2d += h2d_delta;
  if (l.any() != was_slowed || slowdown_of(rank) != before) server_.rates_changed();
}

void HostCpuPool::check_rank(int rank, const char* who) const {
  if (rank < 0 || rank >= ranks())
    throw std::invalid_argument(std::string(who) + ": rank " + std::to_string(rank) + "; allowed: [0, " +
                                std::to_string(ranks()) + ")");
}

void HostCpuPool::watch(int rank, SharedLink& link) {
  check_rank(rank, "HostCpuPool::watch");
  update_links(rank, link.active(Direction::kD2H) > 0 ? 1 : 0, link.active(Direction::kH2D) > 0 ? 1 : 0);
  link.add_direction_listener([this, rank](Direction dir, bool active) {
    const int delta = active ? 1 : -1;
    update_links(rank, dir == Direction::kD2H ? delta : 0, dir == Direction::kH2D ? delta : 0);
  });
}

void HostCpuPool::start(int rank, int64_t params, Callback on_done) {
  check_rank(rank, "HostCpuPool::start");
  if (params < 0)
    throw std::invalid_argument("HostCpuPool::start: params = " + std::to_string(params) + "; allowed: >= 0");
  server_.start(rank, static_cast<double>(params), std::move(on_done));
}

Work HostCpuPool::work(int rank, int64_t params) {
  check_rank(rank, "HostCpuPool::work");
  if (params < 0)
    throw std::invalid_argument("HostCpuPool::work: params = " + std::to_string(params) + "; allowed: >= 0");
  return Work::async([this, rank, params](Callback done) { start(rank, params, std::move(done)); });
}

SlowedServer::SlowedServer(EventQueue& queue)
    : server_(queue, 1, [this](int, std::span<const int> active) { return 1.0 / current_factor() / active[0]; }) {}

int SlowedServer::add_source(double factor) {
  if (!(factor >= 1) || !std::isfinite(factor))
    throw std::invalid_argument("SlowedServer: factor = " + std::to_string(factor) + "; allowed: a finite value >= 1");
  factor_.push_back(factor);
  active_.push_back(0);
  return static_cast<int>(factor_.size()) - 1;
}

void SlowedServer::set_active(int source, bool active) {
  if (source < 0 || source >= static_cast<int>(factor_.size()))
    throw std::invalid_argument("SlowedServer::set_active: source " + std::to_string(source) + " does not exist");
  int& a = active_[static_cast<size_t>(source)];
  a += active ? 1 : -1;
  if (a < 0) throw std::logic_error("SlowedServer::set_active: source " + std::to_string(source) + " ended twice");
  server_.rates_changed();
}

void SlowedServer::watch(SharedLink& link, double factor) {
  const int id = add_source(factor);
  if (link.active()) set_active(id, true);
  link.add_activity_listener([this, id](bool active) { set_active(id, active); });
}

double SlowedServer::current_factor() const {
  double f = 1;
  for (size_t i = 0; i < factor_.size(); ++i)
    if (active_[i] > 0) f *= factor_[i];
  return f;
}

void SlowedServer::start(TimeNs alone_ns, Callback on_done) {
  if (alone_ns < 0)
    throw std::invalid_argument("SlowedServer::start: alone_ns = " + std::to_string(alone_ns) + "; allowed: >= 0");
  server_.start(0, static_cast<double>(alone_ns), std::move(on_done));
}

Work SlowedServer::work(TimeNs alone_ns) {
  return Work::async([this, alone_ns](Callback done) { start(alone_ns, std::move(done)); });
}

namespace {
HostCpuPool::RateFn equal_share(double rate_gparam_s) {
  if (!(rate_gparam_s > 0) || !std::isfinite(rate_gparam_s))
    throw std::invalid_argument("CpuPool: rate_gparam_s = " + std::to_string(rate_gparam_s) +
                                "; allowed: a finite value > 0");
  return [rate_gparam_s](int active) { return rate_gparam_s / active; };
}
}  // namespace

CpuPool::CpuPool(EventQueue& queue, double rate_gparam_s, DmaSlowdown dma)
    : host_(queue, 1, equal_share(rate_gparam_s), dma) {}

}  // namespace tf::sim
