// POSIX file operations of the checkpoint store, each behind the fault hook.
#include "core/checkpoint_io.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2, RENAME_NOREPLACE (glibc >= 2.28)
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "core/error.h"

namespace tf::core::ckpt {

namespace fs = std::filesystem;

void throw_fs_error(std::string_view action, const fs::path& p, int err, std::string_view advice) {
  std::string msg = std::string(action) + " " + p.string() + ": " + std::strerror(err);
  switch (err) {
    case EACCES:
    case EPERM:
    case EROFS:
    case ENOENT:
    case ENOTDIR:
    case EISDIR:
    case EEXIST: throw InputError(msg + "; " + std::string(advice));
    case ENOSPC:
    case EDQUOT: throw RuntimeFailure(msg + "; free space on that file system or choose another directory");
    default: throw RuntimeFailure(msg + " (an I/O failure of the machine; retry, or check the disk)");
  }
}

int FsOps::inject(std::string_view op, const fs::path& p) const {
  if (!hook_) return 0;
  return hook_(FaultPoint{op, p});
}

Fd FsOps::create_exclusive(const fs::path& p) const {
  int err = inject("create", p);
  int fd = -1;
  if (!err) {
    fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) err = errno;
  }
  if (err) throw_fs_error("cannot create", p, err, advice_);
  return Fd(fd);
}

Fd FsOps::open_read(const fs::path& p) const {
  int err = inject("open", p);
  int fd = -1;
  if (!err) {
    fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) err = errno;
  }
  if (err) throw_fs_error("cannot open", p, err, advice_);
  return Fd(fd);
}

void FsOps::write_all(const Fd& fd, const void* data, size_t bytes, const fs::path& p) const {
  int err = inject("write", p);
  if (!err) err = write_fully(fd.get(), data, bytes);
  if (err) throw_fs_error("cannot write", p, err, advice_);
}

void FsOps::pwrite_all(const Fd& fd, const void* data, size_t bytes, uint64_t offset, const fs::path& p) const {
  int err = inject("write", p);
  if (!err) err = pwrite_fully(fd.get(), data, bytes, offset);
  if (err) throw_fs_error("cannot write", p, err, advice_);
}

bool FsOps::read_exact(const Fd& fd, void* data, size_t bytes, uint64_t offset, const fs::path& p) const {
  char* c = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd.get(), c, bytes, off_t(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_fs_error("cannot read", p, errno, advice_);
    }
    if (n == 0) return false;
    c += n;
    bytes -= size_t(n);
    offset += uint64_t(n);
  }
  return true;
}

std::string FsOps::read_file(const fs::path& p) const {
  const Fd fd = open_read(p);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw_fs_error("cannot stat", p, errno, advice_);
  std::string text(size_t(st.st_size), '\0');
  if (!read_exact(fd, text.data(), text.size(), 0, p))
    throw RuntimeFailure("cannot read " + p.string() + ": it shrank while being read (is another process writing it?)");
  return text;
}

std::optional<uint64_t> FsOps::file_size(const fs::path& p) const {
  int err = inject("open", p);
  struct stat st {};
  if (!err && ::stat(p.c_str(), &st) != 0) err = errno;
  if (err == ENOENT) return std::nullopt;
  if (err) throw_fs_error("cannot stat", p, err, advice_);
  return uint64_t(st.st_size);
}

void FsOps::fsync_file(const Fd& fd, const fs::path& p) const {
  int err = inject("fsync", p);
  if (!err && ::fsync(fd.get()) != 0) err = errno;
  if (err) throw_fs_error("cannot fsync", p, err, advice_);
}

void FsOps::fsync_dir(const fs::path& p) const {
  int err = inject("fsync", p);
  if (!err) {
    const Fd fd(::open(p.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (fd.get() < 0 || ::fsync(fd.get()) != 0) err = errno;
  }
  if (err) throw_fs_error("cannot fsync directory", p, err, advice_);
}

void FsOps::make_dir(const fs::path& p) const {
  int err = inject("mkdir", p);
  if (!err && ::mkdir(p.c_str(), 0755) != 0) err = errno;
  if (err) throw_fs_error("cannot create directory", p, err, advice_);
}

void FsOps::make_dirs(const fs::path& p) const {
  std::error_code ec;
  if (fs::is_directory(p, ec)) return;
  if (int err = inject("mkdir", p)) throw_fs_error("cannot create directory", p, err, advice_);
  fs::create_directories(p, ec);
  if (ec) throw_fs_error("cannot create directory", p, ec.value(), advice_);
}

void FsOps::rename_noreplace(const fs::path& from, const fs::path& to) const {
  int err = inject("rename", to);
  if (!err && ::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) != 0) {
    err = errno;
    if (err == EINVAL || err == ENOSYS) {  // the file system lacks RENAME_NOREPLACE: check, then rename
      struct stat st {};
      err = ::lstat(to.c_str(), &st) == 0 ? EEXIST : 0;
      if (!err && ::rename(from.c_str(), to.c_str()) != 0) err = errno;
    }
  }
  if (err) throw_fs_error("cannot rename " + from.string() + " to", to, err, advice_);
}

void FsOps::remove_tree(const fs::path& p) const {
  if (int err = inject("remove", p)) throw_fs_error("cannot remove", p, err, advice_);
  std::error_code ec;
  fs::remove_all(p, ec);
  if (ec) throw_fs_error("cannot remove", p, ec.value(), advice_);
}

size_t io_threads(size_t requested) {
  if (requested > 0) return requested;
  return std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 4);
}

void parallel_for(size_t n, size_t threads, const std::function<void(size_t, size_t)>& fn) {
  threads = std::max<size_t>(1, std::min(threads, n));
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr first;
  std::mutex mu;
  auto work = [&](size_t worker) {
    try {
      for (size_t i = next++; i < n && !failed; i = next++) fn(i, worker);
    } catch (...) {
      const std::lock_guard<std::mutex> lock(mu);
      if (!first) first = std::current_exception();
      failed = true;
    }
  };
  std::vector<std::thread> pool;
  for (size_t w = 1; w < threads; ++w) pool.emplace_back(work, w);
  work(0);
  for (std::thread& t : pool) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace tf::core::ckpt
