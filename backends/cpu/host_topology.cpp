// Host topology from sysfs, the per-rank CPU shares, and the thread-count check.
#include "backends/cpu/host_topology.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "core/error.h"

namespace tf::backend::cpu {

namespace fs = std::filesystem;

namespace {

// The first integer of a one-line sysfs file, or `fallback` when it is missing or unreadable.
int read_int(const fs::path& file, int fallback) {
  std::ifstream f(file);
  int v = 0;
  return f >> v ? v : fallback;
}

// A kernel cpulist ("0-15,32-47"); nothing for a malformed one.
std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    item.erase(std::remove_if(item.begin(), item.end(), [](char c) { return c == ' ' || c == '\n'; }), item.end());
    if (item.empty()) continue;
    int lo = 0, hi = 0;
    const size_t dash = item.find('-');
    try {
      lo = std::stoi(item.substr(0, dash));
      hi = dash == std::string::npos ? lo : std::stoi(item.substr(dash + 1));
    } catch (const std::exception&) {
      return {};
    }
    if (lo < 0 || hi < lo || hi - lo > (1 << 20)) return {};
    for (int c = lo; c <= hi; ++c) out.push_back(c);
  }
  return out;
}

// CPU -> NUMA node from node/nodeM/cpulist.
std::map<int, int> node_of_cpus(const fs::path& sysfs) {
  std::map<int, int> node_of;
  std::error_code ec;
  const fs::path nodes = sysfs / "node";
  if (!fs::is_directory(nodes, ec)) return node_of;
  for (const fs::directory_entry& e : fs::directory_iterator(nodes, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("node", 0) != 0 || name.size() == 4 ||
        !std::all_of(name.begin() + 4, name.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    std::ifstream f(e.path() / "cpulist");
    std::string text;
    std::getline(f, text);
    for (int c : parse_cpu_list(text)) node_of[c] = std::stoi(name.substr(4));
  }
  return node_of;
}

}  // namespace

int HostTopology::physical_cores() const {
  std::set<std::pair<int, int>> cores;
  for (const LogicalCpu& c : cpus) cores.insert({c.package, c.core});
  return int(cores.size());
}

int HostTopology::nodes() const {
  std::set<int> n;
  for (const LogicalCpu& c : cpus) n.insert(c.node);
  return int(n.size());
}

HostTopology read_host_topology(const fs::path& sysfs, std::span<const int> allowed) {
  const std::map<int, int> node_of = node_of_cpus(sysfs);
  HostTopology t;
  for (int cpu : allowed) {
    const fs::path topo = sysfs / "cpu" / ("cpu" + std::to_string(cpu)) / "topology";
    LogicalCpu c;
    c.cpu = cpu;
    const auto it = node_of.find(cpu);
    c.node = it == node_of.end() ? 0 : it->second;
    c.package = read_int(topo / "physical_package_id", 0);
    c.core = read_int(topo / "core_id", -1);
    if (c.core < 0) c.core = (1 << 24) + cpu;  // unknown: its own core
    t.cpus.push_back(c);
  }
  std::sort(t.cpus.begin(), t.cpus.end(), [](const LogicalCpu& a, const LogicalCpu& b) {
    return std::tie(a.node, a.package, a.core, a.cpu) < std::tie(b.node, b.package, b.core, b.cpu);
  });
  return t;
}

std::vector<int> affinity_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  if (cpus.empty()) cpus.push_back(0);
  return cpus;
}

HostTopology host_topology() {
  const std::vector<int> cpus = affinity_cpus();
  return read_host_topology("/sys/devices/system", cpus);
}

CpuShare rank_cpu_share(const HostTopology& topo, int local_rank, int local_world) {
  if (local_world < 1 || local_rank < 0 || local_rank >= local_world)
    throw core::InputError("local rank " + std::to_string(local_rank) + " of " + std::to_string(local_world) +
                           ": expected 0 <= LOCAL_RANK < LOCAL_WORLD_SIZE");
  if (topo.cpus.empty()) throw core::InputError("no CPUs to share (an empty affinity mask)");
  // The physical cores in node order, each with its logical CPUs (topo.cpus keeps siblings adjacent).
  std::vector<std::vector<const LogicalCpu*>> cores;
  for (const LogicalCpu& c : topo.cpus) {
    if (cores.empty() || cores.back().front()->package != c.package || cores.back().front()->core != c.core ||
        cores.back().front()->node != c.node)
      cores.emplace_back();
    cores.back().push_back(&c);
  }
  const size_t n = cores.size(), k = size_t(local_world), r = size_t(local_rank);
  size_t begin = n * r / k, end = n * (r + 1) / k;
  if (begin == end) begin = r % n, end = begin + 1;  // more ranks than cores: shared
  CpuShare s;
  s.cores = int(end - begin);
  std::set<int> nodes;
  for (size_t sibling = 0;; ++sibling) {  // first siblings of every core, then the second ones, ...
    bool any = false;
    for (size_t i = begin; i < end; ++i)
      if (sibling < cores[i].size()) {
        s.worker_cpus.push_back(cores[i][sibling]->cpu);
        nodes.insert(cores[i][sibling]->node);
        any = true;
      }
    if (!any) break;
  }
  s.cpus = s.worker_cpus;
  std::sort(s.cpus.begin(), s.cpus.end());
  s.nodes.assign(nodes.begin(), nodes.end());
  return s;
}

size_t checked_thread_count(long long requested, int host_cores, const std::string& option) {
  const long long hi = 4LL * std::max(1, host_cores);
  if (requested < 1 || requested > hi)
    throw core::InputError(option + " " + std::to_string(requested) + ": expected a thread count in [1, " +
                           std::to_string(hi) + "] (1 to 4 x the " + std::to_string(host_cores) +
                           " physical cores of this host)");
  return size_t(requested);
}

void confine_calling_thread(std::span<const int> cpus) {
  if (cpus.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus)
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  if (const int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set); rc != 0)
    throw core::RuntimeFailure("cannot restrict this process to CPUs " + cpu_list_text(cpus) + ": " +
                               std::strerror(rc));
}

void run_confined(std::span<const int> cpus, const std::function<void()>& fn) {
  std::exception_ptr failed;
  std::thread t([&] {
    try {
      confine_calling_thread(cpus);
      fn();
    } catch (...) {
      failed = std::current_exception();
    }
  });
  t.join();
  if (failed) std::rethrow_exception(failed);
}

std::string cpu_list_text(std::span<const int> cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) {
      out += '-';
      out += std::to_string(cpus[j]);
    }
    i = j + 1;
  }
  return out;
}

}  // namespace tf::backend::cpu
