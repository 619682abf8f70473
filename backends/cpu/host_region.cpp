// Host memory regions: 2 MiB-aligned anonymous mappings with transparent huge pages requested.
#include "backends/cpu/host_region.h"

#include <sys/mman.h>

#include <cstdint>
#include <string>
#include <utility>

#include "core/error.h"

namespace tf::backend::cpu {

namespace {
constexpr size_t kHugePage = size_t(2) << 20;
}

HostRegion::HostRegion(size_t bytes, bool huge_pages) : bytes_(bytes) {
  if (bytes == 0) return;
  mapped_ = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  // Over-map by one huge page and trim both ends, so that data_ sits on a 2 MiB boundary.
  const size_t span = mapped_ + kHugePage;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED)
    throw core::RuntimeFailure("host allocation of " + std::to_string(bytes) +
                               " bytes failed (mmap): free host memory or lower the CPU share");
  const auto base = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (base + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > base) munmap(raw, aligned - base);
  const uintptr_t tail = aligned + mapped_, end = base + span;
  if (end > tail) munmap(reinterpret_cast<void*>(tail), end - tail);
  data_ = reinterpret_cast<void*>(aligned);
  (void)madvise(data_, mapped_, huge_pages ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);  // best effort: THP may be off
}

HostRegion::~HostRegion() { release(); }

HostRegion::HostRegion(HostRegion&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)),
      mapped_(std::exchange(o.mapped_, 0)) {}

HostRegion& HostRegion::operator=(HostRegion&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    mapped_ = std::exchange(o.mapped_, 0);
  }
  return *this;
}

void HostRegion::release() noexcept {
  if (data_) munmap(data_, mapped_);
  data_ = nullptr;
  bytes_ = mapped_ = 0;
}

}  // namespace tf::backend::cpu
