// NCCL error checking and an owning communicator (one rank of one process).
#pragma once

#include <nccl.h>

#include <string>

#include "core/error.h"

namespace tf::backend::cuda {

[[noreturn]] inline void nccl_fail(ncclResult_t r, const char* call, const char* file, int line) {
  std::string msg =
      std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " + ncclGetErrorString(r);
  if (r == ncclSystemError || r == ncclRemoteError)
    msg += " (a peer rank may have died or the network failed; NCCL_DEBUG=INFO shows more)";
  throw core::RuntimeFailure(msg);
}

#define TF_NCCL_CHECK(expr)                                                                                   \
  do {                                                                                                        \
    const ncclResult_t tf_nccl_res_ = (expr);                                                                 \
    if (tf_nccl_res_ != ncclSuccess) ::tf::backend::cuda::nccl_fail(tf_nccl_res_, #expr, __FILE__, __LINE__); \
  } while (0)

// An open NCCL group, closed on every path: end() closes it and reports ncclGroupEnd's error; when an
// exception leaves the scope inside the group, the destructor closes it without throwing.
class NcclGroup {
 public:
  NcclGroup() { TF_NCCL_CHECK(ncclGroupStart()); }
  ~NcclGroup() {
    if (open_) (void)ncclGroupEnd();
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  void end() {
    open_ = false;
    TF_NCCL_CHECK(ncclGroupEnd());
  }

 private:
  bool open_ = true;
};

class NcclComm {
 public:
  NcclComm() = default;
  NcclComm(int world, const ncclUniqueId& id, int rank) { TF_NCCL_CHECK(ncclCommInitRank(&c_, world, id, rank)); }
  ~NcclComm() {
    if (c_) (void)ncclCommDestroy(c_);
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  ncclComm_t get() const { return c_; }
  // After a failure: abort outstanding operations instead of waiting for them.
  void abort() {
    if (c_) (void)ncclCommAbort(c_);
    c_ = nullptr;
  }

 private:
  ncclComm_t c_ = nullptr;
};

}  // namespace tf::backend::cuda
