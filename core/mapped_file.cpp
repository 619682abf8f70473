// A read-only memory map of a regular file (see mapped_file.h).
#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/fd.h"

namespace tf::core {

MappedFile::MappedFile(const std::filesystem::path& path, std::string_view what, uint64_t max_bytes)
    : path_(path.string()) {
  const std::string where = std::string(what) + ": '" + path_ + "'";
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below like any non-file.
  const Fd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0)
    throw InputError(where + ": cannot open (" + std::strerror(errno) + "); give an existing, readable file");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw RuntimeFailure(where + ": fstat failed (" + std::strerror(errno) + ")");
  if (!S_ISREG(st.st_mode)) throw InputError(where + ": not a regular file; give a file (not a directory or device)");
  if (uint64_t(st.st_size) > max_bytes)
    throw InputError(where + ": " + std::to_string(st.st_size) + " bytes exceed the limit of " +
                     std::to_string(max_bytes) + " bytes for this kind of file");
  size_bytes_ = size_t(st.st_size);
  if (size_bytes_ == 0) return;  // nothing to map
  void* p = ::mmap(nullptr, size_bytes_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (p == MAP_FAILED)
    throw RuntimeFailure(where + ": mmap of " + std::to_string(size_bytes_) + " bytes failed (" + std::strerror(errno) +
                         ")");
  data_ = static_cast<const std::byte*>(p);
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_bytes_(std::exchange(other.size_bytes_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_bytes_ = std::exchange(other.size_bytes_, 0);
  }
  return *this;
}

void MappedFile::release() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_bytes_);
  data_ = nullptr;
  size_bytes_ = 0;
}

}  // namespace tf::core
