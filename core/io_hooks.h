// What code that writes files takes from its caller: a barrier across the ranks that write together,
// and the tests' fault hook.
#pragma once

#include <filesystem>
#include <functional>
#include <string_view>

namespace tf::core {

// Called by every rank with its own `ok`; returns true only when every rank passed true (an AND over
// ranks), so every rank learns that one failed. It separates the phases of a write that several ranks
// share: a checkpoint's (core::CheckpointBarrier is this type), --save-master's shared file. Ranks that
// are threads use core::AndBarrier (core/and_barrier.h); processes, backend::launch::rank_barrier over
// the rendezvous.
using RankBarrier = std::function<bool(bool ok)>;

// Tests only: called before every durable file-system step (op: "mkdir", "create", "write", "fsync",
// "close", "rename", "remove", "open"), possibly from several I/O threads at once. Returning an errno
// value makes that step fail with it; 0 proceeds.
struct FaultPoint {
  std::string_view op;
  const std::filesystem::path& path;
};
using FaultHook = std::function<int(const FaultPoint&)>;

}  // namespace tf::core
