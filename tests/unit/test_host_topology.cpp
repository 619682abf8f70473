// Host topology from a fake sysfs tree, the per-rank core shares (NUMA order, SMT siblings last), the
// thread-count range, the CPU list text, and pinning to a share.
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "backends/cpu/host_topology.h"
#include "backends/cpu/thread_pool.h"
#include "core/error.h"
#include "tests/temp_dir.h"

namespace tf::backend::cpu {
namespace {

// sysfs for `nodes` NUMA nodes of `cores` cores each, 2 SMT siblings per core, numbered as Linux often
// does on two-socket hosts: the first siblings 0..N-1 in node order, the second siblings N..2N-1.
struct FakeHost {
  test::TempDir dir{"tf_topology"};
  std::vector<int> cpus;
  FakeHost(int nodes, int cores) {
    const int n = nodes * cores;
    for (int node = 0; node < nodes; ++node) {
      std::string list = std::to_string(node * cores) + "-" + std::to_string(node * cores + cores - 1) + "," +
                         std::to_string(n + node * cores) + "-" + std::to_string(n + node * cores + cores - 1);
      dir.write("node/node" + std::to_string(node) + "/cpulist", list + "\n");
    }
    for (int c = 0; c < 2 * n; ++c) {
      const int phys = c % n;
      const std::string t = "cpu/cpu" + std::to_string(c) + "/topology/";
      dir.write(t + "physical_package_id", std::to_string(phys / cores) + "\n");
      dir.write(t + "core_id", std::to_string(phys % cores) + "\n");
      cpus.push_back(c);
    }
  }
  HostTopology read() const { return read_host_topology(dir.path(), cpus); }
};

TEST(HostTopology, ReadsNodesPackagesCoresAndSiblings) {
  const FakeHost h(2, 4);
  const HostTopology t = h.read();
  EXPECT_EQ(t.physical_cores(), 8);
  EXPECT_EQ(t.nodes(), 2);
  ASSERT_EQ(t.cpus.size(), 16u);
  // node 0 first, each core's siblings adjacent: 0, 8, 1, 9, ...
  const std::vector<int> order = {0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15};
  for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(t.cpus[i].cpu, order[i]) << i;
  EXPECT_EQ(t.cpus[8], (LogicalCpu{4, 1, 1, 0}));
}

TEST(HostTopology, MissingSysfsMeansOneNodeAndOneCorePerCpu) {
  const test::TempDir empty("tf_topology_empty");
  const std::vector<int> cpus = {3, 1, 2};
  const HostTopology t = read_host_topology(empty.path(), cpus);
  EXPECT_EQ(t.physical_cores(), 3);
  EXPECT_EQ(t.nodes(), 1);
  EXPECT_EQ(t.cpus.front().cpu, 1);
}

TEST(CpuShare, RanksGetContiguousCoresInNodeOrderAndStayOnTheirNode) {
  const FakeHost h(2, 4);
  const HostTopology t = h.read();
  const CpuShare one = rank_cpu_share(t, 0, 1);
  EXPECT_EQ(one.cores, 8);
  EXPECT_EQ(one.worker_cpus, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(one.nodes, (std::vector<int>{0, 1}));
  // two ranks: one node each, first siblings first
  const CpuShare r1 = rank_cpu_share(t, 1, 2);
  EXPECT_EQ(r1.cores, 4);
  EXPECT_EQ(r1.worker_cpus, (std::vector<int>{4, 5, 6, 7, 12, 13, 14, 15}));
  EXPECT_EQ(r1.cpus, (std::vector<int>{4, 5, 6, 7, 12, 13, 14, 15}));
  EXPECT_EQ(r1.nodes, (std::vector<int>{1}));
  // four ranks: two cores each, all disjoint, covering the host
  std::set<int> seen;
  for (int r = 0; r < 4; ++r) {
    const CpuShare s = rank_cpu_share(t, r, 4);
    EXPECT_EQ(s.cores, 2);
    EXPECT_EQ(s.nodes.size(), 1u);
    for (int c : s.cpus) EXPECT_TRUE(seen.insert(c).second) << "cpu " << c << " in two shares";
  }
  EXPECT_EQ(seen.size(), 16u);
  // three ranks: sizes 2, 3, 3 (floor splits), the middle one spans the node boundary
  EXPECT_EQ(rank_cpu_share(t, 0, 3).cores, 2);
  EXPECT_EQ(rank_cpu_share(t, 1, 3).nodes, (std::vector<int>{0, 1}));
  EXPECT_EQ(rank_cpu_share(t, 2, 3).cores, 3);
}

TEST(CpuShare, MoreRanksThanCoresShareCoresRoundRobin) {
  const FakeHost h(1, 2);
  const HostTopology t = h.read();
  EXPECT_EQ(rank_cpu_share(t, 0, 3).worker_cpus, (std::vector<int>{0, 2}));  // no core of its own: core 0
  EXPECT_EQ(rank_cpu_share(t, 1, 3).worker_cpus, (std::vector<int>{0, 2}));
  EXPECT_EQ(rank_cpu_share(t, 2, 3).worker_cpus, (std::vector<int>{1, 3}));
  EXPECT_THROW(rank_cpu_share(t, 3, 3), core::InputError);
  EXPECT_THROW(rank_cpu_share(t, 0, 0), core::InputError);
  EXPECT_THROW(rank_cpu_share(HostTopology{}, 0, 1), core::InputError);
}

TEST(CheckedThreadCount, TheRangeIsOneToFourTimesTheCores) {
  EXPECT_EQ(checked_thread_count(1, 16, "--threads"), 1u);
  EXPECT_EQ(checked_thread_count(64, 16, "--threads"), 64u);
  for (long long bad : {0LL, -1LL, 65LL, -9223372036854775807LL}) {
    try {
      checked_thread_count(bad, 16, "--threads");
      FAIL() << bad << " accepted";
    } catch (const core::InputError& e) {
      EXPECT_NE(std::string(e.what()).find("--threads " + std::to_string(bad) + ": expected a thread count in [1, 64]"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(CpuListText, CollapsesRuns) {
  EXPECT_EQ(cpu_list_text(std::vector<int>{0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(cpu_list_text(std::vector<int>{5}), "5");
  EXPECT_EQ(cpu_list_text(std::vector<int>{}), "");
}

// The pool's workers run on the CPUs they are given (pinned), on this machine's real CPUs.
TEST(ThreadPool, PinsWorkersToTheGivenCpus) {
  const std::vector<int> allowed = affinity_cpus();
  const std::vector<int> cpus = {allowed.back()};  // every worker on one CPU
  ThreadPool pool(3, true, cpus);
  EXPECT_EQ(pool.cpus(), cpus);
  std::mutex mu;
  std::set<int> ran_on;
  for (int round = 0; round < 20; ++round)
    pool.run(3, [&](size_t) {
      std::lock_guard<std::mutex> lk(mu);
      ran_on.insert(sched_getcpu());
    });
  EXPECT_EQ(ran_on, std::set<int>{allowed.back()});
  EXPECT_EQ(ThreadPool(0, false, {allowed.front()}).size(), 1u);  // one worker per given CPU
}

TEST(ConfineCallingThread, RestrictsThisThreadAndItsChildren) {
  const std::vector<int> allowed = affinity_cpus();
  std::vector<int> child_saw;
  std::thread t([&] {
    confine_calling_thread(std::vector<int>{allowed.front()});
    std::thread inner([&] { child_saw = affinity_cpus(); });
    inner.join();
  });
  t.join();
  EXPECT_EQ(child_saw, std::vector<int>{allowed.front()});
  EXPECT_EQ(affinity_cpus(), allowed);  // the test's own thread is untouched
}

// An engine rank confined to its share measures the whole host through run_confined (run --host-probe): the
// thread it starts holds the CPUs it is given, whatever the caller's, and what it throws comes back.
TEST(RunConfined, TheThreadHoldsTheGivenCpusNotTheCallers) {
  const std::vector<int> allowed = affinity_cpus();
  std::vector<int> saw, saw_empty, saw_process;
  std::thread rank([&] {
    confine_calling_thread(std::vector<int>{allowed.front()});  // the rank's share
    run_confined(allowed, [&] {
      saw = affinity_cpus();
      std::thread worker([&] { saw_process = affinity_cpus(); });  // what a process started here inherits
      worker.join();
    });
    run_confined({}, [&] { saw_empty = affinity_cpus(); });  // empty: the caller's own
  });
  rank.join();
  EXPECT_EQ(saw, allowed);
  EXPECT_EQ(saw_process, allowed);
  EXPECT_EQ(saw_empty, std::vector<int>{allowed.front()});
  EXPECT_THROW(run_confined(allowed, [] { throw core::RuntimeFailure("inside"); }), core::RuntimeFailure);
}

}  // namespace
}  // namespace tf::backend::cpu
