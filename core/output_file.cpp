// Output files written whole or not at all (see output_file.h).
#include "core/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "core/error.h"
#include "core/strings.h"

namespace tf::core {

namespace fs = std::filesystem;

namespace {

// True for a path under /proc (by its first component).
bool under_proc(const fs::path& p) {
  auto it = p.begin();
  return p.is_absolute() && it != p.end() && ++it != p.end() && *it == "proc";
}

// True when `p` leads through /proc: it lies in a directory under /proc (/dev/fd/N: /dev/fd is a link
// to /proc/self/fd), or a symbolic link on its way points there (/dev/stdout -> /proc/self/fd/1).
// Such a path names an open descriptor (a terminal, a pipe, the shell's redirection), never a place to
// put a temporary file.
bool through_proc(fs::path p) {
  for (int hop = 0; hop < 40; ++hop) {  // the kernel's own limit on links followed
    std::error_code ec;
    const fs::path dir = fs::weakly_canonical(p.has_parent_path() ? p.parent_path() : fs::path("."), ec);
    if (!ec && under_proc(dir)) return true;
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return false;
    const fs::path link = fs::read_symlink(p, ec);
    if (ec) return false;
    if (under_proc(link)) return true;
    p = link.is_absolute() ? link : dir / link;
  }
  return false;
}

// What an output path turns out to be before anything is written.
struct Target {
  fs::path file;                   // what a rename replaces (symbolic links resolved), or the file itself
  bool in_place = false;           // a device, FIFO or /proc path: written where it is
  std::optional<mode_t> old_mode;  // an existing regular file's permission bits, kept
};

[[noreturn]] void io_failure(const std::string& option, const fs::path& path, std::string_view action, int err,
                             bool unchanged) {
  std::string msg =
      option + " " + printable(path.string()) + ": cannot " + std::string(action) + ": " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) msg += " (the file system is full)";
  if (unchanged) msg += "; " + printable(path.string()) + " was left as it was";
  throw RuntimeFailure(msg);
}

Target resolve_target(const fs::path& path, const std::string& option) {
  if (path.empty()) throw InputError(option + ": the file name is empty");
  Target t;
  t.file = path;
  if (through_proc(path)) {
    t.in_place = true;
    return t;
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return t;  // a new file (a missing directory fails when the temporary is made)
    io_failure(option, path, "look it up", errno, true);
  }
  if (S_ISDIR(st.st_mode))
    throw InputError(option + " " + printable(path.string()) + ": is a directory; give the path of a file");
  if (!S_ISREG(st.st_mode)) {
    t.in_place = true;
    return t;
  }
  std::error_code ec;
  const fs::path real = fs::canonical(path, ec);
  if (ec) io_failure(option, path, "resolve its links", ec.value(), true);
  t.file = real;
  t.old_mode = st.st_mode & 07777;
  return t;
}

fs::path directory_of(const fs::path& file) { return file.has_parent_path() ? file.parent_path() : fs::path("."); }

// Makes the rename durable; best effort (the file is complete under its name already).
void sync_directory(const fs::path& dir) {
  const Fd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (d.get() >= 0) (void)::fsync(d.get());
}

}  // namespace

OutputFile::OutputFile(const fs::path& path, std::string option, FaultHook hook)
    : path_(path), option_(std::move(option)), hook_(std::move(hook)) {
  const Target t = resolve_target(path_, option_);
  target_ = t.file;
  if (t.in_place) {
    mode_ = Mode::kInPlace;
    int err = step("open", path_);
    if (!err) {
      fd_ = Fd(::open(path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOCTTY));
      if (fd_.get() < 0) err = errno;
    }
    if (err) io_failure(option_, path_, "open it for writing", err, false);
    return;
  }
  static std::atomic<uint64_t> counter{0};
  temp_ = directory_of(target_) /
          (target_.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  int err = step("create", temp_);
  if (!err) {
    fd_ = Fd(::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666));
    if (fd_.get() < 0) err = errno;
  }
  if (err) io_failure(option_, path_, "create a file in " + printable(directory_of(target_).string()), err, true);
  if (t.old_mode && ::fchmod(fd_.get(), *t.old_mode) != 0) fail("keep its permissions", errno);
}

OutputFile::OutputFile(SharedTag, const fs::path& path, const fs::path& shared, std::string option, FaultHook hook)
    : path_(path),
      target_(path),
      temp_(shared),
      option_(std::move(option)),
      hook_(std::move(hook)),
      mode_(Mode::kSharedMember) {
  int err = step("open", temp_);
  if (!err) {
    fd_ = Fd(::open(temp_.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY));
    if (fd_.get() < 0) err = errno;
  }
  if (err)
    io_failure(
        option_, path_,
        "open the file every rank writes (" + printable(temp_.string()) + "; do the ranks share this directory?)", err,
        true);
}

OutputFile::~OutputFile() {
  if (!committed_) remove_temporary();
}

int OutputFile::step(std::string_view op, const fs::path& p) const { return hook_ ? hook_(FaultPoint{op, p}) : 0; }

void OutputFile::fail(std::string_view action, int err) {
  remove_temporary();
  io_failure(option_, path_, action, err, mode_ != Mode::kInPlace);
}

void OutputFile::remove_temporary() noexcept {
  (void)fd_.close();
  if (mode_ == Mode::kTemporary && !temp_.empty()) (void)::unlink(temp_.c_str());
}

void OutputFile::write(const void* data, size_t bytes) {
  if (committed_) throw std::logic_error("OutputFile::write after commit");
  const fs::path& p = mode_ == Mode::kInPlace ? path_ : temp_;
  int err = step("write", p);
  if (!err) err = write_fully(fd_.get(), data, bytes);
  if (err) fail("write", err);
}

void OutputFile::write_at(const void* data, size_t bytes, uint64_t offset) {
  if (committed_) throw std::logic_error("OutputFile::write_at after commit");
  const fs::path& p = mode_ == Mode::kInPlace ? path_ : temp_;
  int err = step("write", p);
  if (!err) err = pwrite_fully(fd_.get(), data, bytes, offset);
  if (err) fail("write", err);
}

void OutputFile::set_size(uint64_t bytes) {
  const fs::path& p = mode_ == Mode::kInPlace ? path_ : temp_;
  struct stat st {};
  int err = ::fstat(fd_.get(), &st) != 0 ? errno : 0;
  if (!err && !S_ISREG(st.st_mode)) return;
  if (!err) err = step("write", p);
  if (!err && ::ftruncate(fd_.get(), off_t(bytes)) != 0) err = errno;
  if (err) fail("size it to " + std::to_string(bytes) + " bytes", err);
}

void OutputFile::commit() {
  if (committed_) return;
  const fs::path& p = mode_ == Mode::kInPlace ? path_ : temp_;
  struct stat st {};
  int err = ::fstat(fd_.get(), &st) != 0 ? errno : 0;
  if (!err && S_ISREG(st.st_mode)) {  // devices and pipes have nothing to sync (fsync fails with EINVAL there)
    err = step("fsync", p);
    if (!err && ::fsync(fd_.get()) != 0) err = errno;
  }
  if (err) fail("write it to disk (fsync)", err);
  err = step("close", p);
  if (err) (void)fd_.close();
  if (!err) err = fd_.close();
  if (err) fail("close it", err);
  if (mode_ == Mode::kTemporary) {
    err = step("rename", target_);
    if (!err && ::rename(temp_.c_str(), target_.c_str()) != 0) err = errno;
    if (err) fail("move it into place", err);
    sync_directory(directory_of(target_));
  }
  committed_ = true;
}

void write_output_file(const fs::path& path, std::string_view content, const std::string& option,
                       const FaultHook& hook) {
  OutputFile f(path, option, hook);
  f.write(content);
  f.commit();
}

namespace {

// Rank 0's shared temporary file, removed unless it was renamed into place.
class SharedTemporary {
 public:
  SharedTemporary(const Target& t, const fs::path& shared, uint64_t size_bytes, const std::string& option,
                  const fs::path& path, const FaultHook& hook)
      : shared_(shared) {
    (void)::unlink(shared.c_str());  // a stale one, left by a crash
    int err = hook ? hook(FaultPoint{"create", shared}) : 0;
    Fd fd;
    if (!err) {
      fd = Fd(::open(shared.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666));
      if (fd.get() < 0) err = errno;
    }
    if (err) io_failure(option, path, "create a file in " + printable(directory_of(t.file).string()), err, true);
    active_ = true;
    if (t.old_mode && ::fchmod(fd.get(), *t.old_mode) != 0) err = errno;
    if (!err && ::ftruncate(fd.get(), off_t(size_bytes)) != 0) err = errno;
    if (!err) err = fd.close();
    if (err) io_failure(option, path, "size the file every rank writes", err, true);
  }
  ~SharedTemporary() {
    if (active_) (void)::unlink(shared_.c_str());
  }
  SharedTemporary(const SharedTemporary&) = delete;
  SharedTemporary& operator=(const SharedTemporary&) = delete;
  void release() { active_ = false; }

 private:
  fs::path shared_;
  bool active_ = false;
};

}  // namespace

void write_shared_output_file(const fs::path& path, const std::string& option, uint64_t size_bytes, int rank, int world,
                              const RankBarrier& barrier, const std::function<void(OutputFile&)>& write_mine,
                              const FaultHook& hook) {
  if (world <= 1) {
    OutputFile f(path, option, hook);
    f.set_size(size_bytes);
    write_mine(f);
    f.commit();
    return;
  }
  if (!barrier)
    throw std::invalid_argument("write_shared_output_file: " + std::to_string(world) + " ranks need a barrier");
  const Target t = resolve_target(path, option);
  const fs::path shared = t.in_place ? path : directory_of(t.file) / (t.file.filename().string() + ".tmp-shared");
  std::optional<SharedTemporary> temp;  // rank 0's
  if (rank == 0 && !t.in_place) {
    try {
      temp.emplace(t, shared, size_bytes, option, path, hook);
    } catch (...) {
      (void)barrier(false);
      throw;
    }
  }
  if (!barrier(true))
    throw RuntimeFailure(option + " " + printable(path.string()) + ": rank 0 could not create the file; " +
                         "nothing was written");
  try {
    OutputFile f(OutputFile::SharedTag{}, path, shared, option, hook);
    write_mine(f);
    f.commit();
  } catch (...) {
    (void)barrier(false);
    throw;
  }
  const bool all = barrier(true);
  if (!all)
    throw RuntimeFailure(option + " " + printable(path.string()) + ": another rank failed to write its part" +
                         (t.in_place ? std::string() : "; the file was left as it was"));
  if (rank != 0 || t.in_place) return;
  int err = hook ? hook(FaultPoint{"rename", t.file}) : 0;
  if (!err && ::rename(shared.c_str(), t.file.c_str()) != 0) err = errno;
  if (err) io_failure(option, path, "move it into place", err, true);
  temp->release();
  sync_directory(directory_of(t.file));
}

}  // namespace tf::core
