// Rank discovery: torchrun, OpenMPI and Slurm variables, defaults, and the errors for bad values.
#include <gtest/gtest.h>

#include <map>

#include "backends/launch/rank_env.h"
#include "core/error.h"

namespace tf::backend::launch {
namespace {

RankEnv parse(const std::map<std::string, std::string>& vars) {
  return parse_rank_env([&](const std::string& k) -> std::optional<std::string> {
    auto it = vars.find(k);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

// Expects an InputError whose message contains every fragment.
void expect_error(const std::map<std::string, std::string>& vars, std::initializer_list<const char*> fragments) {
  try {
    parse(vars);
    FAIL() << "expected core::InputError";
  } catch (const core::InputError& e) {
    for (const char* f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
  }
}

TEST(RankEnv, NoEnvironmentIsOneRank) {
  const RankEnv e = parse({});
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_EQ(e.local_world_size, 1);
  EXPECT_EQ(e.master_addr, "127.0.0.1");
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_EQ(e.source, RankSource::kNone);
}

TEST(RankEnv, Torchrun) {
  const RankEnv e = parse({{"RANK", "5"},
                           {"WORLD_SIZE", "8"},
                           {"LOCAL_RANK", "1"},
                           {"LOCAL_WORLD_SIZE", "4"},
                           {"MASTER_ADDR", "10.0.0.7"},
                           {"MASTER_PORT", "12345"}});
  EXPECT_EQ(e.source, RankSource::kTorchrun);
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.master_addr, "10.0.0.7");
  EXPECT_EQ(e.master_port, 12345);
}

TEST(RankEnv, TorchrunSingleNodeDefaultsMaster) {
  const RankEnv e = parse({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "4"}});
  EXPECT_EQ(e.master_addr, "127.0.0.1");
  EXPECT_EQ(e.master_port, 29500);
}

TEST(RankEnv, TorchrunTakesPrecedenceOverMpiAndSlurm) {
  const RankEnv e = parse({{"RANK", "0"},
                           {"WORLD_SIZE", "1"},
                           {"OMPI_COMM_WORLD_RANK", "3"},
                           {"OMPI_COMM_WORLD_SIZE", "4"},
                           {"SLURM_PROCID", "1"},
                           {"SLURM_NTASKS", "2"}});
  EXPECT_EQ(e.source, RankSource::kTorchrun);
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
}

TEST(RankEnv, OpenMpi) {
  const RankEnv e = parse({{"OMPI_COMM_WORLD_RANK", "3"},
                           {"OMPI_COMM_WORLD_SIZE", "4"},
                           {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                           {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                           {"MASTER_PORT", "29600"}});
  EXPECT_EQ(e.source, RankSource::kOpenMpi);
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 3);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.master_port, 29600);
}

TEST(RankEnv, SlurmNtasksPerNode) {
  const RankEnv e = parse({{"SLURM_PROCID", "6"},
                           {"SLURM_NTASKS", "8"},
                           {"SLURM_LOCALID", "2"},
                           {"SLURM_NTASKS_PER_NODE", "4"},
                           {"MASTER_ADDR", "node01"}});
  EXPECT_EQ(e.source, RankSource::kSlurm);
  EXPECT_EQ(e.rank, 6);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 2);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.master_addr, "node01");
}

TEST(RankEnv, SlurmTasksPerNodeLists) {
  EXPECT_EQ(parse({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "1"}, {"SLURM_TASKS_PER_NODE", "2"}})
                .local_world_size,
            2);
  EXPECT_EQ(parse({{"SLURM_PROCID", "5"},
                   {"SLURM_NTASKS", "8"},
                   {"SLURM_LOCALID", "1"},
                   {"SLURM_TASKS_PER_NODE", "4(x2)"},
                   {"MASTER_ADDR", "n0"}})
                .local_world_size,
            4);
  EXPECT_EQ(parse({{"SLURM_PROCID", "6"},
                   {"SLURM_NTASKS", "7"},
                   {"SLURM_LOCALID", "0"},
                   {"SLURM_TASKS_PER_NODE", "2(x3),1"},
                   {"SLURM_NODEID", "3"},
                   {"MASTER_ADDR", "n0"}})
                .local_world_size,
            1);
  expect_error({{"SLURM_PROCID", "6"},
                {"SLURM_NTASKS", "7"},
                {"SLURM_LOCALID", "0"},
                {"SLURM_TASKS_PER_NODE", "2(x3),1"},
                {"MASTER_ADDR", "n0"}},
               {"SLURM_TASKS_PER_NODE", "2(x3),1", "SLURM_NODEID"});
  expect_error(
      {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}, {"SLURM_TASKS_PER_NODE", "2(y3)"}},
      {"SLURM_TASKS_PER_NODE", "2(y3)", "expected"});
}

TEST(RankEnv, Errors) {
  // rank >= world
  expect_error({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "4"}},
               {"RANK", "'4'", "below WORLD_SIZE=4"});
  // non-numeric
  expect_error({{"RANK", "one"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "4"}},
               {"RANK", "'one'", "integer"});
  expect_error({{"RANK", "1x"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "4"}}, {"'1x'"});
  expect_error({{"RANK", "-1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "4"}}, {"'-1'"});
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "0"}}, {"WORLD_SIZE", "'0'"});
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "70000"}}, {"MASTER_PORT", "'70000'", "65535"});
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", ""}}, {"MASTER_PORT", "''"});
  // missing pieces
  expect_error({{"RANK", "0"}}, {"RANK", "WORLD_SIZE", "expected both"});
  expect_error({{"LOCAL_RANK", "0"}}, {"WORLD_SIZE", "not set"});
  expect_error({{"RANK", "1"}, {"WORLD_SIZE", "2"}}, {"LOCAL_RANK", "LOCAL_WORLD_SIZE"});
  expect_error({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}}, {"OMPI_COMM_WORLD_LOCAL_RANK"});
  expect_error({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "1"}},
               {"SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
  // inconsistent local values
  expect_error({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}},
               {"LOCAL_RANK", "below LOCAL_WORLD_SIZE=2"});
  expect_error({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "3"}},
               {"LOCAL_WORLD_SIZE", "at most WORLD_SIZE=2"});
  expect_error({{"OMPI_COMM_WORLD_RANK", "2"},
                {"OMPI_COMM_WORLD_SIZE", "2"},
                {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}},
               {"OMPI_COMM_WORLD_RANK", "'2'"});
  // multi-node without MASTER_ADDR
  expect_error({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"}},
               {"MASTER_ADDR", "not set"});
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", ""}}, {"MASTER_ADDR", "''"});
}

}  // namespace
}  // namespace tf::backend::launch
