// TCP rendezvous (Boost.Asio): rank 0 hands every rank a blob (e.g. the NCCL unique id), then barriers and a liveness
// watch.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/io_hooks.h"

namespace tf::backend::launch {

struct RendezvousOptions {
  std::string master_addr = "127.0.0.1";  // rank 0 listens here, the others connect here
  uint16_t master_port = 29500;
  int rank = 0;
  int world_size = 1;
  std::chrono::milliseconds timeout_ms{60000};  // every phase (join, barrier) completes or fails by then
  // Where this rank runs, as its launcher said (LOCAL_RANK, LOCAL_WORLD_SIZE) and as the host is (empty:
  // host_identity()). Rank 0 checks them against the ranks that actually joined from each host: the
  // CPU optimizer's share of the cores is cut by them (docs/ARCHITECTURE.md, "CPU path").
  int local_rank = 0;
  int local_world_size = 1;
  std::string host;
};

// One rank's place as it announced it in the rendezvous.
struct RankPlace {
  int rank = 0;
  int local_rank = 0;
  int local_world_size = 1;
  std::string host;
};
// Empty when every host's ranks agree with what the launchers said (each rank's LOCAL_WORLD_SIZE equals
// the number of ranks that joined from its host, and their LOCAL_RANKs are distinct); else what
// disagrees, naming both values.
std::string check_rank_places(const std::vector<RankPlace>& places);
// This machine: its host name and kernel boot id (containers of one host share the boot id).
std::string host_identity();

// One rank's end of the rendezvous. Rank 0 refuses (core::InputError; the others learn why) ranks whose
// LOCAL_WORLD_SIZE or LOCAL_RANK disagree with the ranks that joined from their host. Rank 0 keeps a connection to
// every other rank; the others keep one to rank 0. Every wait has a deadline: a rank that never shows up, dies or sends
// garbage makes the others throw core::RuntimeFailure within the timeout. Rank 0 closes every connection when it fails
// or sees a peer drop, so the failure reaches every rank. barrier() and all_ok() are thread-safe (and run while the
// background watch does); the other calls are not.
class Rendezvous {
 public:
  // barrier()'s channel; all_ok() takes any other.
  static constexpr uint32_t kBarrierChannel = 0;

  // Blocks until every rank holds rank 0's blob (and has passed one barrier), or throws
  // core::RuntimeFailure. `blob` is used on rank 0 only; core::InputError for bad options.
  Rendezvous(const RendezvousOptions& options, std::vector<uint8_t> blob);
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  const std::vector<uint8_t>& blob() const;
  int rank() const;
  int world_size() const;

  // Every rank waits until all have arrived; core::RuntimeFailure on a timeout or a lost peer.
  void barrier();
  void barrier(std::chrono::milliseconds timeout_ms);

  // An AND over ranks: every rank calls it with its own `ok` and gets true only when all passed true
  // (core::RankBarrier's contract; rank 0 collects the votes and sends the verdict). Threads may
  // vote on different channels at once (a checkpoint writer's thread beside the training loop's stop
  // vote) and while the background watch runs; on one channel every rank must vote in the same
  // sequence. core::RuntimeFailure on a timeout (the options' unless given) or a lost peer, after which
  // every call fails. One rank: returns `ok`.
  bool all_ok(bool ok, uint32_t channel = 1);
  bool all_ok(bool ok, uint32_t channel, std::chrono::milliseconds timeout_ms);

  // Watches the connections for up to timeout_ms. Returns what went wrong when a peer's connection
  // dropped (rank 0 then closes every connection, so all other ranks learn it), nullopt when all stayed up.
  std::optional<std::string> watch_for(std::chrono::milliseconds timeout_ms);
  // Runs watch_for in a background thread until stop_watch() (or destruction); on_failure is called
  // once, from that thread, with the description.
  void start_watch(std::function<void(const std::string&)> on_failure);
  void stop_watch();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A core::RankBarrier over `rdv` (a checkpoint's phases, --save-master's shared file: core/output_file.h):
// all_ok on `channel`, which no other user of `rdv` votes on, so every rank learns a failed rank's
// false. It runs beside the background watch; core::RuntimeFailure after `timeout_ms` or on a lost peer.
// `rdv` must outlive the barrier.
core::RankBarrier rank_barrier(Rendezvous& rdv, uint32_t channel, std::chrono::milliseconds timeout_ms);

}  // namespace tf::backend::launch
