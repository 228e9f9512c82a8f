#pragma once
// A fresh scratch directory for the running test, removed with the object:
//   <tmp>/flow_<suite>_<test>[_<label>]_<pid>
// (<tmp> is std::filesystem::temp_directory_path(); '/' in parameterized suite and test names
// becomes '_'). The pid keeps parallel ctest runs, and the Release and sanitizer suites run at
// once, out of each other's way; a directory an earlier, killed run left is removed first.
// Make it a member of a fixture (gtest sets the current test before constructing the fixture) or
// a local of a test body; a label tells apart several in one test.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>
#include <string_view>

namespace flow::testing {

class ScratchDir {
 public:
  explicit ScratchDir(std::string_view label = {}) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = "flow_";
    name += info ? std::string(info->test_suite_name()) + "_" + info->name() : std::string("no_test");
    if (!label.empty()) (name += "_") += label;
    name += "_" + std::to_string(::getpid());
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    path_ = std::filesystem::temp_directory_path() / name;
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;  // never throw from a destructor; a leftover directory is harmless
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // A path inside the directory: scratch / "model".
  std::filesystem::path operator/(const std::filesystem::path& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

}  // namespace flow::testing
