// Host memory for the CPU optimizer's buffers: anonymous pages mapped at 2 MiB alignment with
// transparent huge pages requested and left untouched, so that the first write places each page on
// the NUMA node of the thread that writes it (docs/ARCHITECTURE.md, "CPU path").
#pragma once

#include <cstddef>

#include "backends/cpu/cpu_tuning.h"

namespace tf::backend::cpu {

class HostRegion {
 public:
  HostRegion() = default;
  // `bytes` of untouched memory (reads as zero); nothing for 0. huge_pages: madvise(MADV_HUGEPAGE)
  // (2 MiB pages where THP is "madvise"), else MADV_NOHUGEPAGE (4 KiB pages even where THP is
  // "always": the measurement of what the huge pages bring). Throws core::RuntimeFailure when the
  // mapping fails (naming the size).
  explicit HostRegion(size_t bytes, bool huge_pages = kCpuTuning.huge_pages);
  ~HostRegion();
  HostRegion(HostRegion&& o) noexcept;
  HostRegion& operator=(HostRegion&& o) noexcept;
  HostRegion(const HostRegion&) = delete;
  HostRegion& operator=(const HostRegion&) = delete;

  // data() .. data() + bytes() rounded up to 2 MiB is mapped (the engine registers whole pages of it).
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void release() noexcept;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  size_t mapped_ = 0;  // bytes mapped at data_ (bytes_ rounded up to 2 MiB)
};

}  // namespace tf::backend::cpu
