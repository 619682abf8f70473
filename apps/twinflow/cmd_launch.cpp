// `twinflow launch`: start N ranks of a command on this node with torchrun-style variables; one failure stops all.
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "apps/twinflow/cli.h"
#include "apps/twinflow/commands.h"
#include "backends/launch/rank_exits.h"
#include "core/error.h"

extern char** environ;

namespace po = boost::program_options;

namespace tf::app {

namespace {

constexpr auto kGracePeriodMs = std::chrono::milliseconds(5000);  // SIGTERM, then SIGKILL
constexpr auto kPollMs = std::chrono::milliseconds(10);

volatile sig_atomic_t g_forward_signal = 0;
void on_signal(int sig) { g_forward_signal = sig; }

// This process's environment with the overrides applied, as "K=V" strings.
std::vector<std::string> child_environment(const std::map<std::string, std::string>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const std::string key = kv.substr(0, kv.find('='));
    if (!overrides.count(key)) env.push_back(kv);
  }
  for (const auto& [k, v] : overrides) env.push_back(k + "=" + v);
  return env;
}

struct Child {
  pid_t pid = -1;
  int rank = 0;
  bool running = false;
  int status = 0;
  int sent = 0;  // the last signal the launcher sent it (0: none)
};

// Signals each running child's process group (the child and whatever it started).
void signal_all(std::vector<Child>& children, int sig) {
  for (Child& c : children)
    if (c.running) ::kill(-c.pid, sig), c.sent = sig;
}

// Reaps whatever exited; returns the number of children still running. With `failures`, each child that failed
// on its own (backend::launch::failed_on_its_own: not what the launcher's signal caused) is added with the poll
// that reaped it.
int reap(std::vector<Child>& children, int poll, std::vector<backend::launch::RankExit>* failures) {
  int running = 0;
  for (Child& c : children) {
    if (!c.running) continue;
    int status = 0;
    const pid_t r = ::waitpid(c.pid, &status, WNOHANG);
    if (r == c.pid) {
      c.running = false;
      c.status = status;
      if (failures && backend::launch::failed_on_its_own(status, c.sent)) failures->push_back({c.rank, status, poll});
    } else if (r < 0 && errno == ECHILD) {
      c.running = false;
    } else {
      ++running;
    }
  }
  return running;
}

// The rank to blame (backend::launch::first_failure), then any other that failed on its own before the
// launcher stopped the rest (usually a consequence: its peer was gone).
void report_failures(const std::vector<Child>& children, const std::vector<backend::launch::RankExit>& failures) {
  const size_t first = backend::launch::first_failure(failures);
  const auto pid_of = [&](int rank) { return children[size_t(rank)].pid; };
  const backend::launch::RankExit& f = failures[first];
  std::cerr << "twinflow launch: rank " << f.rank << " (pid " << pid_of(f.rank) << ") failed with "
            << backend::launch::describe_status(f.status) << "; stopped the other " << (children.size() - 1)
            << " rank(s)\n";
  for (size_t i = 0; i < failures.size(); ++i)
    if (i != first)
      std::cerr << "twinflow launch: rank " << failures[i].rank << " (pid " << pid_of(failures[i].rank)
                << ") also failed, with " << backend::launch::describe_status(failures[i].status)
                << (failures[i].poll == f.poll  ? " (seen at the same moment)"
                    : failures[i].poll < f.poll ? " (seen first: a rank that loses its peer fails on the lost "
                                                  "connection while the killed one is still being torn down)"
                                                : " (after it)")
                << "\n";
}

}  // namespace

int cmd_launch(const std::vector<std::string>& args) {
  po::options_description desc(
      "twinflow launch --nproc-per-node N [--master-port P] -- CMD ARGS...: run N ranks of CMD on this node\n"
      "Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT and\n"
      "NCCL_NVLS_ENABLE=0. When a rank fails, the others get SIGTERM (SIGKILL after 5 s).\n"
      "exit codes: 0 all ranks succeeded, 1 a rank failed (named), 2 bad usage");
  auto add = desc.add_options();
  add("help,h", "show this help");
  add("nproc-per-node", po::value<int>(), "number of ranks to start (1..1024)");
  add("master-port", po::value<int>()->default_value(29500), "rendezvous port of rank 0 (1..65535)");

  const auto sep = std::find(args.begin(), args.end(), "--");
  const std::vector<std::string> own(args.begin(), sep);
  std::vector<std::string> cmd(sep == args.end() ? sep : sep + 1, args.end());
  po::variables_map vm;
  po::store(po::command_line_parser(own).options(desc).run(), vm);
  po::notify(vm);
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return kExitOk;
  }
  if (!vm.count("nproc-per-node"))
    throw core::InputError("--nproc-per-node N is required (see `twinflow launch --help`)");
  const int n = vm["nproc-per-node"].as<int>();
  if (n < 1 || n > 1024) throw core::InputError("--nproc-per-node " + std::to_string(n) + ": expected 1..1024");
  const int port = vm["master-port"].as<int>();
  if (port < 1 || port > 65535) throw core::InputError("--master-port " + std::to_string(port) + ": expected 1..65535");
  if (sep == args.end() || cmd.empty())
    throw core::InputError("no command: expected `twinflow launch --nproc-per-node N -- CMD ARGS...`");
  // `-- run SCENARIO ...`: a twinflow subcommand runs this same executable
  if (is_command(cmd[0])) {
    cmd.insert(cmd.begin(), self_executable("launch: to run `" + cmd[0] + "`"));
  }

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {
  }, old_term{};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);

  std::vector<char*> argv;
  for (const std::string& a : cmd) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  std::vector<Child> children;
  std::string spawn_error;
  for (int rank = 0; rank < n; ++rank) {
    const std::vector<std::string> env = child_environment({{"RANK", std::to_string(rank)},
                                                            {"WORLD_SIZE", std::to_string(n)},
                                                            {"LOCAL_RANK", std::to_string(rank)},
                                                            {"LOCAL_WORLD_SIZE", std::to_string(n)},
                                                            {"MASTER_ADDR", "127.0.0.1"},
                                                            {"MASTER_PORT", std::to_string(port)},
                                                            {"NCCL_NVLS_ENABLE", "0"}});
    std::vector<char*> envp;
    for (const std::string& kv : env) envp.push_back(const_cast<char*>(kv.c_str()));
    envp.push_back(nullptr);
    std::cout.flush();
    std::cerr.flush();
    const pid_t pid = ::fork();
    if (pid < 0) {
      spawn_error = std::string("fork failed for rank ") + std::to_string(rank) + ": " + std::strerror(errno);
      break;
    }
    if (pid == 0) {
      ::setpgid(0, 0);
      ::sigaction(SIGINT, &old_int, nullptr);
      ::sigaction(SIGTERM, &old_term, nullptr);
      ::execvpe(argv[0], argv.data(), envp.data());
      const std::string msg = "twinflow launch: rank " + std::to_string(rank) + ": cannot run '" + cmd[0] +
                              "': " + std::strerror(errno) + "\n";
      [[maybe_unused]] const ssize_t w = ::write(2, msg.data(), msg.size());
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // also from the parent, so the group exists before we might signal it
    children.push_back({pid, rank, true, 0});
  }

  std::vector<backend::launch::RankExit> failures;  // ranks that failed on their own (reap)
  int forwarded = 0, poll = 0;
  if (spawn_error.empty()) {
    while (reap(children, poll++, &failures) > 0 && failures.empty()) {
      if (g_forward_signal) {
        forwarded = g_forward_signal;
        break;
      }
      std::this_thread::sleep_for(kPollMs);
    }
  }
  // Stop whoever is left: SIGTERM, then SIGKILL after the grace period. A rank that ends meanwhile by a signal
  // the launcher did not send (a kill -9 whose GPU context was still being torn down) is still a failure.
  std::vector<backend::launch::RankExit>* seen = forwarded ? nullptr : &failures;
  if (reap(children, poll++, seen) > 0) {
    signal_all(children, forwarded ? forwarded : SIGTERM);
    const auto kill_at = std::chrono::steady_clock::now() + kGracePeriodMs;
    while (reap(children, poll++, seen) > 0 && std::chrono::steady_clock::now() < kill_at)
      std::this_thread::sleep_for(kPollMs);
    if (reap(children, poll++, seen) > 0) {
      signal_all(children, SIGKILL);
      for (int i = 0; i < 500 && reap(children, poll++, seen) > 0; ++i) std::this_thread::sleep_for(kPollMs);
    }
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);

  if (!spawn_error.empty()) throw core::RuntimeFailure(spawn_error);
  if (forwarded) {
    std::cerr << "twinflow launch: interrupted by signal " << forwarded << "; stopped all ranks\n";
    return kExitCheckFailed;
  }
  if (!failures.empty()) {
    report_failures(children, failures);
    return kExitCheckFailed;
  }
  return kExitOk;
}

}  // namespace tf::app
