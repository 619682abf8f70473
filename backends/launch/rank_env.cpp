// Rank discovery: this process's rank, world and master address from torchrun, OpenMPI or Slurm variables.
#include "backends/launch/rank_env.h"

#include <charconv>
#include <cstdlib>
#include <vector>

#include "core/error.h"

namespace tf::backend::launch {

namespace {

constexpr int64_t kMaxWorld = 1 << 20;

[[noreturn]] void bad(const std::string& var, const std::string& value, const std::string& expected) {
  throw core::InputError("environment variable " + var + "='" + value + "': expected " + expected);
}

int64_t parse_int(const std::string& var, const std::string& value, int64_t lo, int64_t hi) {
  int64_t v = 0;
  const char* b = value.data();
  const char* e = b + value.size();
  auto [p, ec] = std::from_chars(b, e, v);
  if (value.empty() || ec != std::errc() || p != e || v < lo || v > hi)
    bad(var, value, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

struct Getter {
  const EnvLookup& get;
  std::optional<std::string> operator()(const std::string& var) const { return get(var); }
  int number(const std::string& var, int64_t lo, int64_t hi) const {
    const auto v = get(var);
    if (!v)
      throw core::InputError("environment variable " + var + " is not set: expected an integer in [" +
                             std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return int(parse_int(var, *v, lo, hi));
  }
};

// SLURM_TASKS_PER_NODE: "4", "4(x2)", "2(x3),1": tasks on each node in node order.
std::vector<int> expand_tasks_per_node(const std::string& var, const std::string& value) {
  std::vector<int> out;
  size_t pos = 0;
  const std::string expected = "a list like '4', '4(x2)' or '2(x3),1'";
  while (pos <= value.size()) {
    const size_t comma = value.find(',', pos);
    const std::string item = value.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    const size_t paren = item.find('(');
    int64_t count = 0, repeat = 1;
    if (paren == std::string::npos) {
      count = parse_int(var, item, 1, kMaxWorld);
    } else {
      if (item.size() < paren + 4 || item.compare(paren, 2, "(x") != 0 || item.back() != ')') bad(var, value, expected);
      count = parse_int(var, item.substr(0, paren), 1, kMaxWorld);
      repeat = parse_int(var, item.substr(paren + 2, item.size() - paren - 3), 1, kMaxWorld);
    }
    if (int64_t(out.size()) + repeat > kMaxWorld) bad(var, value, "at most " + std::to_string(kMaxWorld) + " nodes");
    out.insert(out.end(), size_t(repeat), int(count));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

void read_master(const Getter& g, RankEnv& env) {
  const auto addr = g("MASTER_ADDR");
  const auto port = g("MASTER_PORT");
  const bool single_node = env.local_world_size == env.world_size;
  if (addr) {
    if (addr->empty()) bad("MASTER_ADDR", *addr, "a host name or IP address of rank 0");
    env.master_addr = *addr;
  } else if (!single_node) {
    throw core::InputError(
        "environment variable MASTER_ADDR is not set: expected the address of rank 0's host "
        "(required when the " +
        std::to_string(env.world_size) + " ranks span more than one node; local world size " +
        std::to_string(env.local_world_size) + ")");
  }
  if (port) env.master_port = uint16_t(parse_int("MASTER_PORT", *port, 1, 65535));
}

void check(const RankEnv& env, const std::string& rank_var, const std::string& world_var, const std::string& local_var,
           const std::string& local_world_var, const Getter& g) {
  if (env.rank >= env.world_size)
    bad(rank_var, *g(rank_var), "a rank below " + world_var + "=" + std::to_string(env.world_size));
  if (env.local_world_size > env.world_size)
    bad(local_world_var, std::to_string(env.local_world_size),
        "at most " + world_var + "=" + std::to_string(env.world_size));
  if (env.local_rank >= env.local_world_size)
    bad(local_var, std::to_string(env.local_rank),
        "a local rank below " + local_world_var + "=" + std::to_string(env.local_world_size));
}

// RANK/WORLD_SIZE style: both or neither of a pair.
void require_pair(const Getter& g, const std::string& a, const std::string& b) {
  const bool ha = g(a).has_value(), hb = g(b).has_value();
  if (ha != hb) {
    const std::string& set = ha ? a : b;
    const std::string& missing = ha ? b : a;
    throw core::InputError("environment variable " + set + "='" + *g(set) + "' is set but " + missing +
                           " is not: expected both");
  }
}

RankEnv parse_torchrun(const Getter& g) {
  require_pair(g, "RANK", "WORLD_SIZE");
  RankEnv env;
  env.source = RankSource::kTorchrun;
  env.world_size = g.number("WORLD_SIZE", 1, kMaxWorld);
  env.rank = g.number("RANK", 0, kMaxWorld);
  if (g("LOCAL_RANK") || g("LOCAL_WORLD_SIZE")) {
    require_pair(g, "LOCAL_RANK", "LOCAL_WORLD_SIZE");
    env.local_world_size = g.number("LOCAL_WORLD_SIZE", 1, kMaxWorld);
    env.local_rank = g.number("LOCAL_RANK", 0, kMaxWorld);
  } else {
    if (env.world_size > 1)
      throw core::InputError("environment variables RANK='" + *g("RANK") + "' and WORLD_SIZE='" + *g("WORLD_SIZE") +
                             "' are set but LOCAL_RANK and LOCAL_WORLD_SIZE are not: expected all four");
    env.local_rank = env.rank;
    env.local_world_size = env.world_size;
  }
  check(env, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", g);
  read_master(g, env);
  return env;
}

RankEnv parse_openmpi(const Getter& g) {
  const char* r = "OMPI_COMM_WORLD_RANK";
  const char* w = "OMPI_COMM_WORLD_SIZE";
  const char* lr = "OMPI_COMM_WORLD_LOCAL_RANK";
  const char* lw = "OMPI_COMM_WORLD_LOCAL_SIZE";
  require_pair(g, r, w);
  require_pair(g, w, lr);
  require_pair(g, lr, lw);
  RankEnv env;
  env.source = RankSource::kOpenMpi;
  env.world_size = g.number(w, 1, kMaxWorld);
  env.rank = g.number(r, 0, kMaxWorld);
  env.local_world_size = g.number(lw, 1, kMaxWorld);
  env.local_rank = g.number(lr, 0, kMaxWorld);
  check(env, r, w, lr, lw, g);
  read_master(g, env);
  return env;
}

RankEnv parse_slurm(const Getter& g) {
  require_pair(g, "SLURM_PROCID", "SLURM_NTASKS");
  require_pair(g, "SLURM_NTASKS", "SLURM_LOCALID");
  RankEnv env;
  env.source = RankSource::kSlurm;
  env.world_size = g.number("SLURM_NTASKS", 1, kMaxWorld);
  env.rank = g.number("SLURM_PROCID", 0, kMaxWorld);
  env.local_rank = g.number("SLURM_LOCALID", 0, kMaxWorld);
  std::string local_var = "SLURM_NTASKS_PER_NODE";
  if (g(local_var)) {
    env.local_world_size = g.number(local_var, 1, kMaxWorld);
  } else if (g("SLURM_TASKS_PER_NODE")) {
    local_var = "SLURM_TASKS_PER_NODE";
    const std::string value = *g(local_var);
    const std::vector<int> per_node = expand_tasks_per_node(local_var, value);
    if (per_node.size() == 1) {
      env.local_world_size = per_node[0];
    } else if (g("SLURM_NODEID")) {
      const int node = g.number("SLURM_NODEID", 0, kMaxWorld);
      if (node >= int(per_node.size()))
        bad("SLURM_NODEID", *g("SLURM_NODEID"),
            "a node index below the " + std::to_string(per_node.size()) + " nodes of SLURM_TASKS_PER_NODE='" + value +
                "'");
      env.local_world_size = per_node[size_t(node)];
    } else {
      bool uniform = true;
      for (int n : per_node) uniform = uniform && n == per_node[0];
      if (!uniform) bad(local_var, value, "equal counts on every node, or SLURM_NODEID set");
      env.local_world_size = per_node[0];
    }
  } else {
    throw core::InputError("environment variables SLURM_PROCID='" + *g("SLURM_PROCID") +
                           "' is set but neither SLURM_NTASKS_PER_NODE nor SLURM_TASKS_PER_NODE is: expected one");
  }
  check(env, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", local_var, g);
  read_master(g, env);
  return env;
}

}  // namespace

const char* rank_source_name(RankSource s) {
  switch (s) {
    case RankSource::kNone: return "none";
    case RankSource::kTorchrun: return "torchrun";
    case RankSource::kOpenMpi: return "openmpi";
    case RankSource::kSlurm: return "slurm";
  }
  return "?";
}

RankEnv parse_rank_env(const EnvLookup& get) {
  const Getter g{get};
  if (g("RANK") || g("WORLD_SIZE") || g("LOCAL_RANK") || g("LOCAL_WORLD_SIZE")) return parse_torchrun(g);
  if (g("OMPI_COMM_WORLD_RANK") || g("OMPI_COMM_WORLD_SIZE")) return parse_openmpi(g);
  if (g("SLURM_PROCID") || g("SLURM_NTASKS")) return parse_slurm(g);
  RankEnv env;
  read_master(g, env);
  return env;
}

RankEnv rank_env_from_process() {
  return parse_rank_env([](const std::string& var) -> std::optional<std::string> {
    const char* v = std::getenv(var.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  });
}

}  // namespace tf::backend::launch
