// POSIX file operations of the checkpoint store: owned descriptors, whole writes and reads, fsync,
// no-replace renames, each through the test fault hook, with errors that name the path and its cause.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "core/checkpoint.h"
#include "core/fd.h"

namespace tf::core::ckpt {

using core::Fd;  // an owned descriptor (core/fd.h)

// Throws for a failed file-system call on `p`: InputError when the cause is the user's to fix
// (permission, read-only file system, a missing path or one that is not a directory), with `advice`;
// RuntimeFailure otherwise (disk full, I/O error).
[[noreturn]] void throw_fs_error(std::string_view action, const std::filesystem::path& p, int err,
                                 std::string_view advice);

// File-system steps, each preceded by the fault hook (which may inject an errno). `advice` ends every
// error message: what the user should do.
class FsOps {
 public:
  FsOps(FaultHook hook, std::string advice) : hook_(std::move(hook)), advice_(std::move(advice)) {}

  Fd create_exclusive(const std::filesystem::path& p) const;  // a new file; an existing one is an error
  Fd open_read(const std::filesystem::path& p) const;
  void write_all(const Fd& fd, const void* data, size_t bytes, const std::filesystem::path& p) const;
  // Writes all `bytes` at `offset` (pwrite: several threads may write one file).
  void pwrite_all(const Fd& fd, const void* data, size_t bytes, uint64_t offset, const std::filesystem::path& p) const;
  // Reads exactly `bytes` at `offset`; returns false at a premature end of file.
  bool read_exact(const Fd& fd, void* data, size_t bytes, uint64_t offset, const std::filesystem::path& p) const;
  std::string read_file(const std::filesystem::path& p) const;
  // Size of a file; nullopt when it does not exist.
  std::optional<uint64_t> file_size(const std::filesystem::path& p) const;
  void fsync_file(const Fd& fd, const std::filesystem::path& p) const;
  void fsync_dir(const std::filesystem::path& p) const;
  void make_dir(const std::filesystem::path& p) const;   // an existing one is an error
  void make_dirs(const std::filesystem::path& p) const;  // mkdir -p
  // rename(2) that never replaces `to` (renameat2 RENAME_NOREPLACE; a checked rename where the file
  // system lacks it).
  void rename_noreplace(const std::filesystem::path& from, const std::filesystem::path& to) const;
  void remove_tree(const std::filesystem::path& p) const;

 private:
  // The hook's injected errno for this step, 0 to proceed.
  int inject(std::string_view op, const std::filesystem::path& p) const;
  FaultHook hook_;
  std::string advice_;
};

// Threads for a save's or a load's I/O: `requested`, or min(4, CPUs) for 0.
size_t io_threads(size_t requested);

// Runs fn(item, worker) for every item in [0, n) on `threads` threads (the caller's among them); items
// are taken in order from a shared counter. The first exception stops the others and is rethrown.
void parallel_for(size_t n, size_t threads, const std::function<void(size_t item, size_t worker)>& fn);

}  // namespace tf::core::ckpt
