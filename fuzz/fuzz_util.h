#pragma once
// Shared by the fuzz targets: a scratch directory for the parsers that read files, and the
// checked-in real data (FLOW_FUZZ_DATA_DIR: fuzz/data, written by make_corpus.cpp).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>

namespace flow_fuzz {

namespace fs = std::filesystem;

// A directory of this process's own under the temp dir, removed at exit.
inline const fs::path& scratch_dir() {
  struct Scratch {
    fs::path path;
    Scratch() {
      std::string pattern = (fs::temp_directory_path() / "flow_fuzz_XXXXXX").string();
      if (::mkdtemp(pattern.data()) == nullptr) {
        std::perror("flow_fuzz: mkdtemp");
        std::abort();
      }
      path = pattern;
    }
    ~Scratch() {
      std::error_code ignored;
      fs::remove_all(path, ignored);
    }
  };
  static const Scratch scratch;
  return scratch.path;
}

inline void write_file(const fs::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "flow_fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
}

inline std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "flow_fuzz: cannot read %s (run flow_fuzz_make_corpus?)\n", path.c_str());
    std::abort();
  }
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// fuzz/data/<name>: a real export or file the targets pair with the fuzzed bytes.
inline fs::path data_path(const std::string& name) { return fs::path(FLOW_FUZZ_DATA_DIR) / name; }

// A property of an accepted input does not hold: the parser accepted something invalid.
[[noreturn]] inline void invalid_accepted(const char* what) {
  std::fprintf(stderr, "flow_fuzz: accepted an invalid input: %s\n", what);
  std::abort();
}

}  // namespace flow_fuzz
