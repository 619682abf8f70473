// Crash test of the checkpoint store: a child process saves checkpoints (threads standing in for ranks)
// and is killed with SIGKILL, either by the fault hook at its k-th durable step or by the parent at a
// random time; after every kill the parent loads. Every load must find complete checkpoints only (the
// new one or the previous), bit-exact, or fail with a clear error; never partial state.
// Usage: tf_ckpt_crash [--kills N] [--dir DIR] [--seed S] [--world W] [--keep K] [--report FILE]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>

#include "core/checkpoint.h"
#include "core/error.h"
#include "tests/checkpoint/ckpt_test_util.h"

namespace fs = std::filesystem;
using namespace tf;

namespace {

constexpr int kSavesPerChild = 3;
constexpr core::OptimizerKind kKind = core::OptimizerKind::kAdamW;

struct Options {
  int kills = 100;
  fs::path dir = fs::temp_directory_path() / ("tf_ckpt_crash_" + std::to_string(::getpid()));
  uint64_t seed = 1;
  int world = 2;
  int keep = 2;
  std::string report;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw core::InputError(a + " needs a value");
      return argv[++i];
    };
    if (a == "--kills")
      o.kills = std::stoi(next());
    else if (a == "--dir")
      o.dir = next();
    else if (a == "--seed")
      o.seed = std::stoull(next());
    else if (a == "--world")
      o.world = std::stoi(next());
    else if (a == "--keep")
      o.keep = std::stoi(next());
    else if (a == "--report")
      o.report = next();
    else
      throw core::InputError("unknown argument " + a +
                             "; usage: tf_ckpt_crash [--kills N] [--dir DIR] [--seed S] "
                             "[--world W] [--keep K] [--report FILE]");
  }
  if (o.kills < 1 || o.world < 1 || o.keep < 1) throw core::InputError("--kills, --world and --keep must be >= 1");
  return o;
}

// The saves one child makes: steps latest+1 .. latest+kSavesPerChild, each holding ref_value(step, ...).
// `hook` sees every durable step of every rank. Returns the number of hook calls of each kind.
std::map<std::string, int64_t> run_saves(const core::ModelDesc& model, const Options& o,
                                         const std::function<void(const core::FaultPoint&)>& hook) {
  const std::optional<core::CheckpointListing> latest =
      fs::exists(o.dir) ? core::latest_checkpoint(o.dir) : std::optional<core::CheckpointListing>();
  const int64_t first = latest ? latest->step + 1 : 1;
  const std::vector<test::RankLayout> layouts = test::shard_layouts(model, o.world);
  std::mutex mu;
  std::map<std::string, int64_t> points;
  core::AndBarrier barrier(o.world);
  std::vector<std::string> errors(static_cast<size_t>(o.world));
  test::on_ranks(o.world, [&](int r) {
    core::CheckpointWriterOptions w;
    w.root = o.dir;
    w.keep = o.keep;
    w.rank = r;
    w.world = o.world;
    w.barrier = barrier.callback();
    w.fault_hook = [&](const core::FaultPoint& p) {
      {
        const std::lock_guard<std::mutex> lock(mu);
        ++points[std::string(p.op)];
      }
      hook(p);
      return 0;
    };
    try {
      core::CheckpointWriter writer(model, kKind, layouts[size_t(r)].spans, layouts[size_t(r)].elems, w);
      for (int64_t step = first; step < first + kSavesPerChild; ++step) {
        test::fill_staging(writer.begin_snapshot(), layouts[size_t(r)], uint64_t(step));
        core::CheckpointMeta meta;
        meta.step = step;
        writer.save(meta);
      }
    } catch (const std::exception& e) {
      errors[size_t(r)] = e.what();
    }
  });
  for (const std::string& e : errors)
    if (!e.empty()) throw core::RuntimeFailure(e);
  return points;
}

struct Counts {
  int kills = 0, by_hook = 0, by_timer = 0, finished = 0;  // children killed / that finished before the timer
  std::map<std::string, int> hook_ops;                     // the durable step a hook kill interrupted
  int latest_new = 0, latest_previous = 0, none_yet = 0;   // what the load after a kill found
  int tmp_left = 0;                                        // kills that left a *.tmp behind
  int checkpoints_verified = 0, clear_errors = 0, violations = 0;
};

// After a kill: every step-N/ must be complete, verify in full and read back bit-exact at a random
// layout; the newest must not go backwards.
void check_after_kill(const core::ModelDesc& model, const Options& o, std::mt19937_64& rng, int64_t& last_latest,
                      Counts& c) {
  std::vector<std::string> skipped;
  std::vector<core::CheckpointListing> all;
  try {
    all = core::list_checkpoints(o.dir, &skipped);
  } catch (const core::InputError& e) {  // no directory yet: killed before the first mkdir
    if (last_latest > 0) ++c.violations, std::cerr << "VIOLATION: " << e.what() << "\n";
    ++c.none_yet;
    return;
  }
  for (const std::string& s : skipped) ++c.violations, std::cerr << "VIOLATION: incomplete step-N/: " << s << "\n";
  for (const fs::directory_entry& e : fs::directory_iterator(o.dir))
    if (e.path().string().ends_with(".tmp")) {
      ++c.tmp_left;
      break;
    }
  for (const core::CheckpointListing& l : all) {
    try {
      const core::CheckpointReader r(l.dir);
      r.verify_all();
      if (r.meta().step != l.step) throw core::InputError("manifest step differs from the directory");
      const test::RankLayout layout = test::random_layouts(model.total_params, 1 + int(rng() % 4), rng)[0];
      const std::vector<std::string> arrays = core::checkpoint_arrays(kKind);
      const std::vector<std::vector<float>> got = r.read(layout.spans, layout.elems, arrays);
      for (size_t a = 0; a < arrays.size(); ++a)
        if (test::first_mismatch(got[a], layout, uint64_t(l.step), a) != -1)
          ++c.violations, std::cerr << "VIOLATION: " << l.dir << " " << arrays[a] << " differs\n";
      ++c.checkpoints_verified;
    } catch (const core::InputError& e) {
      ++c.clear_errors;
      std::cerr << "clear error: " << e.what() << "\n";
    }
  }
  const int64_t latest = all.empty() ? 0 : all.back().step;
  if (latest < last_latest)
    ++c.violations, std::cerr << "VIOLATION: latest went from step " << last_latest << " to " << latest << "\n";
  if (latest == 0)
    ++c.none_yet;
  else if (latest > last_latest)
    ++c.latest_new;
  else
    ++c.latest_previous;
  last_latest = std::max(last_latest, latest);
}

void report(const Options& o, const Counts& c, double seconds, const std::map<std::string, int64_t>& points,
            double child_s) {
  std::string steps;
  for (const auto& [op, n] : points) steps += (steps.empty() ? "" : ", ") + op + " " + std::to_string(n);
  std::string ops;
  for (const auto& [op, n] : c.hook_ops) ops += (ops.empty() ? "" : ", ") + op + " " + std::to_string(n);
  char head[1024];
  std::snprintf(head, sizeof head,
                "tf_ckpt_crash --kills %d --world %d --keep %d --seed %llu: gpt-tiny, AdamW, %d saves per child "
                "(durable steps: %s; %.0f ms unkilled); %.1f s\n",
                o.kills, o.world, o.keep, static_cast<unsigned long long>(o.seed), kSavesPerChild, steps.c_str(),
                child_s * 1e3, seconds);
  std::ostringstream os;
  os << head << "| what | count |\n|---|---|\n"
     << "| SIGKILLs | " << c.kills << " |\n"
     << "| by the fault hook (an op kind at random, then its k-th occurrence) | " << c.by_hook << " (" << ops << ") |\n"
     << "| by the parent at a random time | " << c.by_timer << " |\n"
     << "| children that finished before the timer (not counted as kills) | " << c.finished << " |\n"
     << "| loads after a kill: newest is a checkpoint committed by the killed child | " << c.latest_new << " |\n"
     << "| loads after a kill: newest is the previous checkpoint | " << c.latest_previous << " |\n"
     << "| loads after a kill: no checkpoint yet | " << c.none_yet << " |\n"
     << "| kills that left a *.tmp (ignored by loads, removed by the next save) | " << c.tmp_left << " |\n"
     << "| complete checkpoints verified in full and read bit-exact | " << c.checkpoints_verified << " |\n"
     << "| clear errors | " << c.clear_errors << " |\n"
     << "| violations (partial state, a step-N/ not complete, latest going back) | " << c.violations << " |\n";
  std::cout << os.str();
  if (!o.report.empty()) std::ofstream(o.report) << os.str();
}

// Forks a child that runs the saves; it dies by SIGKILL at the `kill_at`-th (> 0) durable step of kind
// `kill_op`, or after `delay_us` from the parent (kill_at == 0). Returns the op the hook interrupted
// ("" for the timer), or nullopt when the child finished first.
std::optional<std::string> one_child(const core::ModelDesc& model, const Options& o, const std::string& kill_op,
                                     int64_t kill_at, int64_t delay_us) {
  int fds[2];
  if (::pipe(fds) != 0) throw core::RuntimeFailure("pipe failed");
  const pid_t pid = ::fork();
  if (pid < 0) throw core::RuntimeFailure("fork failed");
  if (pid == 0) {
    ::close(fds[0]);
    std::mutex mu;  // the rank threads call the hook concurrently
    int64_t n = 0;
    try {
      run_saves(model, o, [&](const core::FaultPoint& p) {
        const std::lock_guard<std::mutex> lock(mu);
        if (kill_at > 0 && p.op == kill_op && ++n == kill_at) {
          (void)!::write(fds[1], p.op.data(), p.op.size());
          ::raise(SIGKILL);
        }
      });
    } catch (const std::exception& e) {
      std::cerr << "child: " << e.what() << "\n";
      ::_exit(3);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  if (kill_at == 0) {
    ::usleep(useconds_t(delay_us));
    ::kill(pid, SIGKILL);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  char op[32] = {};
  const ssize_t got = ::read(fds[0], op, sizeof op - 1);
  ::close(fds[0]);
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
    throw core::RuntimeFailure("a child's save failed (exit " + std::to_string(WEXITSTATUS(status)) + ")");
  if (!WIFSIGNALED(status)) return std::nullopt;
  return std::string(op, size_t(std::max<ssize_t>(got, 0)));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    const core::ModelDesc model = core::describe_model(core::model_preset("gpt-tiny"));
    fs::remove_all(o.dir);
    // Calibration: durable steps and time of one child's saves, in a scratch directory.
    Options cal = o;
    cal.dir = o.dir.string() + ".cal";
    fs::remove_all(cal.dir);
    const auto t_cal = std::chrono::steady_clock::now();
    const std::map<std::string, int64_t> points = run_saves(model, cal, [](const core::FaultPoint&) {});
    const double child_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_cal).count();
    fs::remove_all(cal.dir);

    std::mt19937_64 rng(o.seed);
    Counts c;
    int64_t last_latest = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; c.kills < o.kills; ++i) {
      const bool by_hook = i % 2 == 0;
      auto kind = points.begin();
      std::advance(kind, ptrdiff_t(rng() % points.size()));
      const int64_t kill_at = by_hook ? 1 + int64_t(rng() % uint64_t(kind->second)) : 0;
      const int64_t delay_us = int64_t(rng() % uint64_t(child_s * 1.2e6 + 1));
      const std::optional<std::string> op = one_child(model, o, kind->first, kill_at, delay_us);
      if (!op) {
        ++c.finished;
        continue;
      }
      ++c.kills;
      if (by_hook)
        ++c.by_hook, ++c.hook_ops[*op];
      else
        ++c.by_timer;
      check_after_kill(model, o, rng, last_latest, c);
    }
    report(o, c, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), points, child_s);
    fs::remove_all(o.dir);
    return c.violations == 0 ? 0 : 1;
  } catch (const core::InputError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 3;
  }
}
