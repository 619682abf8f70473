// This host's CPUs as the CPU optimizer sees them (NUMA nodes, packages, physical cores, SMT siblings),
// and the share of them that each local rank's optimizer threads get (docs/ARCHITECTURE.md, "CPU path").
#pragma once

#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace tf::backend::cpu {

// One logical CPU.
struct LogicalCpu {
  int cpu = 0;      // the kernel's CPU number
  int node = 0;     // NUMA node (0 when sysfs names none)
  int package = 0;  // physical package (socket)
  int core = 0;     // core id within the package (SMT siblings share it)
  bool operator==(const LogicalCpu&) const = default;
};

// The CPUs of an affinity mask, ordered by (node, package, core, cpu): the cores of one node are
// contiguous and the SMT siblings of a core are adjacent.
struct HostTopology {
  std::vector<LogicalCpu> cpus;
  int physical_cores() const;  // distinct (package, core) pairs
  int nodes() const;           // distinct NUMA nodes
};

// The topology of the `allowed` CPUs as sysfs describes them under `sysfs` (normally
// /sys/devices/system: cpu/cpuN/topology/{physical_package_id,core_id}, node/nodeM/cpulist). Missing
// files mean one node and each CPU its own core.
HostTopology read_host_topology(const std::filesystem::path& sysfs, std::span<const int> allowed);
// The CPUs this process may run on (sched_getaffinity of the calling thread), ascending.
std::vector<int> affinity_cpus();
// read_host_topology("/sys/devices/system", affinity_cpus()).
HostTopology host_topology();

// One local rank's part of the host: a contiguous run of the physical cores in node order.
struct CpuShare {
  std::vector<int> worker_cpus;  // the first CPU of each core of the share, then the cores' other SMT siblings
  std::vector<int> cpus;         // every logical CPU of the share, ascending
  int cores = 0;                 // physical cores in the share
  std::vector<int> nodes;        // the NUMA nodes it spans, ascending
};

// The physical cores (node order) cut into `local_world` contiguous shares whose sizes differ by at
// most one; rank `local_rank`'s. A rank therefore stays on one NUMA node whenever the ranks divide the
// nodes' cores evenly. With more ranks than cores, rank r gets core r mod cores (shared; the caller
// warns). Throws core::InputError for local_rank outside [0, local_world) or an empty topology.
CpuShare rank_cpu_share(const HostTopology& topo, int local_rank, int local_world);

// CPU optimizer threads from an option: `requested` must be in [1, 4 x host_cores] (more threads than
// that only oversubscribes the cores of a memory-bound pass). Throws core::InputError naming `option`,
// the value and the range.
size_t checked_thread_count(long long requested, int host_cores, const std::string& option);

// Restricts the calling thread, and so every thread it creates afterwards, to `cpus` (a rank's share:
// its issuing threads then never preempt another rank's optimizer threads). Throws
// core::RuntimeFailure when the kernel refuses.
void confine_calling_thread(std::span<const int> cpus);

// Runs fn on a new thread confined to `cpus` (all of the calling thread's when empty) and waits for it;
// what fn throws is rethrown here. A thread confined to its rank's share starts processes that share out
// the whole host this way (they inherit the starting thread's CPUs).
void run_confined(std::span<const int> cpus, const std::function<void()>& fn);

// "0-3,8,10-11" for ascending CPU numbers.
std::string cpu_list_text(std::span<const int> cpus);

}  // namespace tf::backend::cpu
