#pragma once
// Crash-safe file replacement. The bytes go to a temporary file beside the target, which is
// fsynced and renamed over the target, and then the directory is fsynced: a process killed (or a
// machine losing power) at any moment leaves either the old complete file or the new complete
// one, never a mix. A killed writer may leave its temporary, which the next write replaces.
#include <cstddef>
#include <string>
#include <string_view>

namespace flow {

class AtomicFile {
 public:
  // Creates `<path>.tmp`, truncating one a killed writer left. Errors name `op` and `path`.
  AtomicFile(std::string path, std::string op);
  // Removes the temporary when commit() did not run (an error part way), so `path` is untouched.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t size);
  // Flushes the temporary to disk, renames it over `path` and flushes the directory entry.
  void commit();

 private:
  std::string path_, temporary_, op_;
  int fd_ = -1;
};

// Writes `bytes` to `path` through an AtomicFile.
void write_file_atomically(const std::string& path, std::string_view bytes, const std::string& op);

// fsyncs a directory, so that entries created, renamed or removed in it survive a crash.
void sync_directory(const std::string& dir, const std::string& op);

}  // namespace flow
