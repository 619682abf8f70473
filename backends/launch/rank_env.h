// Rank discovery: this process's rank, world and master address from torchrun, OpenMPI or Slurm variables.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace tf::backend::launch {

// Where the rank came from.
enum class RankSource { kNone, kTorchrun, kOpenMpi, kSlurm };

const char* rank_source_name(RankSource s);

// The environment read once. With no launcher variables at all: world 1, rank 0.
struct RankEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  uint16_t master_port = 29500;
  RankSource source = RankSource::kNone;
};

// Looks up one variable; nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

// Parses the variables given by `get`, trying torchrun-style (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE), then OpenMPI (OMPI_COMM_WORLD_*), then Slurm (SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID, SLURM_NTASKS_PER_NODE or SLURM_TASKS_PER_NODE). MASTER_ADDR/MASTER_PORT default to
// 127.0.0.1:29500 when all ranks are on one node. Throws core::InputError naming the variable, its value
// and what is expected when a value is malformed, missing or inconsistent.
RankEnv parse_rank_env(const EnvLookup& get);

// parse_rank_env over this process's environment (std::getenv).
RankEnv rank_env_from_process();

}  // namespace tf::backend::launch
