// Files the commands write (--json, --csv, --svg, --trace, --save-master, calibrate's profile, exported
// weights): each appears under its name complete, or not at all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

#include "core/fd.h"
#include "core/io_hooks.h"

namespace tf::core {

// One output file.
// - A regular file (new, or existing: its permission bits are kept, and a symbolic link to it stays a
//   link) is written as a temporary file beside the target ("NAME.tmp-PID-N"), then commit() fsyncs
//   it, closes it (checked) and renames it over the target. Until then the target is untouched; an
//   OutputFile destroyed without commit() (an exception) removes its temporary file.
// - A target that exists and is not a regular file (a device such as /dev/full or /dev/null, a FIFO),
//   or a path through /proc (/dev/stdout, /dev/fd/N), is written in place, appending, with every call
//   checked; commit() closes it (checked).
// Every failure is a core::RuntimeFailure "OPTION PATH: cannot STEP: ERRNO TEXT" (exit 3); a directory
// as the target is a core::InputError. `option` says where the path came from ("--json").
class OutputFile {
 public:
  OutputFile(const std::filesystem::path& path, std::string option, FaultHook hook = {});
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  void write(const void* data, size_t bytes);
  // Writes at `offset` from the file's start (pwrite); a file written in place must be seekable.
  void write_at(const void* data, size_t bytes, uint64_t offset);
  // Sets the file's size (ftruncate: zeros where nothing was written); nothing for a file written in
  // place that is not a regular file.
  void set_size(uint64_t bytes);
  void commit();

  bool in_place() const { return mode_ == Mode::kInPlace; }
  const std::filesystem::path& path() const { return path_; }

 private:
  enum class Mode { kTemporary, kInPlace, kSharedMember };
  struct SharedTag {};
  // A rank's handle on the temporary file rank 0 made for write_shared_output_file (no rename).
  OutputFile(SharedTag, const std::filesystem::path& path, const std::filesystem::path& shared, std::string option,
             FaultHook hook);
  friend void write_shared_output_file(const std::filesystem::path&, const std::string&, uint64_t, int, int,
                                       const RankBarrier&, const std::function<void(OutputFile&)>&, const FaultHook&);

  int step(std::string_view op, const std::filesystem::path& p) const;  // the hook's errno, 0 to proceed
  [[noreturn]] void fail(std::string_view action, int err);             // removes the temporary file, then throws
  void remove_temporary() noexcept;

  std::filesystem::path path_;    // as given (messages)
  std::filesystem::path target_;  // what the rename replaces: path_ with symbolic links resolved
  std::filesystem::path temp_;    // kTemporary: the file being written; kSharedMember: the shared file
  std::string option_;
  FaultHook hook_;
  Mode mode_ = Mode::kTemporary;
  Fd fd_;
  bool committed_ = false;
};

// Writes `content` to `path` as an OutputFile and commits it.
void write_output_file(const std::filesystem::path& path, std::string_view content, const std::string& option,
                       const FaultHook& hook = {});

// One file of `size_bytes` that `world` ranks (processes sharing the file system) write together, each
// its own byte ranges through write_mine(file) with write_at. With one rank: an OutputFile. Otherwise
// rank 0 creates the shared temporary file "NAME.tmp-shared" beside the target (replacing a stale one
// left by a crash); after `barrier`, every rank writes, fsyncs and closes its part; after a second
// `barrier` that every rank passed true, rank 0 renames it over the target, and removes it otherwise. A
// rank that fails passes false to the barrier that follows and throws. A target written in place (a
// device) is opened by every rank.
void write_shared_output_file(const std::filesystem::path& path, const std::string& option, uint64_t size_bytes,
                              int rank, int world, const RankBarrier& barrier,
                              const std::function<void(OutputFile&)>& write_mine, const FaultHook& hook = {});

}  // namespace tf::core
