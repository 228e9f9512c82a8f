#include "core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace flow {
namespace {

std::string parent_directory(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

}  // namespace

AtomicFile::AtomicFile(std::string path, std::string op) : path_(std::move(path)), temporary_(path_ + ".tmp"), op_(std::move(op)) {
  fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail(op_, path_, ": cannot open ", temporary_, " for writing: ", std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(temporary_.c_str());
}

void AtomicFile::write(const void* data, size_t size) {
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t written = ::write(fd_, bytes, size);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) fail(op_, path_, ": write failed: ", std::strerror(errno));
    bytes += written;
    size -= static_cast<size_t>(written);
  }
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) fail(op_, path_, ": fsync failed: ", std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    ::unlink(temporary_.c_str());
    fail(op_, path_, ": close failed: ", std::strerror(errno));
  }
  if (std::rename(temporary_.c_str(), path_.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary_.c_str());
    fail(op_, path_, ": cannot rename ", temporary_, " into place: ", std::strerror(error));
  }
  sync_directory(parent_directory(path_), op_);
}

void write_file_atomically(const std::string& path, std::string_view bytes, const std::string& op) {
  AtomicFile file(path, op);
  file.write(bytes.data(), bytes.size());
  file.commit();
}

void sync_directory(const std::string& dir, const std::string& op) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail(op, dir, ": cannot open the directory to sync it: ", std::strerror(errno));
  const bool synced = ::fsync(fd) == 0;
  const int error = errno;
  ::close(fd);
  if (!synced) fail(op, dir, ": directory fsync failed: ", std::strerror(error));
}

}  // namespace flow
