// An owned POSIX file descriptor and whole writes through it (short writes and EINTR retried).
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>

namespace tf::core {

// An owned file descriptor, closed on destruction (unchecked there: call close() to check it).
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Closes now; 0, or the errno of close(2) (a delayed write error on some file systems). The
  // descriptor is released either way.
  int close() {
    const int fd = fd_;
    fd_ = -1;
    return fd < 0 || ::close(fd) == 0 ? 0 : errno;
  }

 private:
  int fd_ = -1;
};

// Writes all `bytes` (at `offset` when given: pwrite, so several threads may write one file); 0, or the
// errno of the call that failed.
inline int write_fully(int fd, const void* data, size_t bytes) {
  const char* c = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, c, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EIO;  // no progress: never loop forever
    c += n;
    bytes -= size_t(n);
  }
  return 0;
}
inline int pwrite_fully(int fd, const void* data, size_t bytes, uint64_t offset) {
  const char* c = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd, c, bytes, off_t(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EIO;
    c += n;
    bytes -= size_t(n);
    offset += uint64_t(n);
  }
  return 0;
}

}  // namespace tf::core
