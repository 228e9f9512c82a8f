#pragma once
// Running the command-line tools from tests: exit status and output, and the checks every tool's
// command line passes (--help, an unknown flag, a bad value).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace test_cli {

// Exit status and output (stdout and stderr) of a shell command.
inline std::pair<int, std::string> run_command(const std::string& command) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  std::string output;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// `tool --help` exits 0 and names each of flags.
inline void expect_help_lists(const std::string& tool, const std::vector<std::string>& flags) {
  const auto [status, output] = run_command(tool + " --help");
  EXPECT_EQ(status, 0) << output;
  for (const std::string& flag : flags) EXPECT_TRUE(contains(output, flag)) << flag << " missing from:\n" << output;
}

// `tool args` is a usage error: exit status 2 and a message naming `named` (the flag at fault).
inline void expect_usage_error(const std::string& tool, const std::string& args, const std::string& named) {
  const auto [status, output] = run_command(tool + " " + args);
  EXPECT_EQ(status, 2) << tool << " " << args << "\n" << output;
  EXPECT_TRUE(contains(output, named)) << tool << " " << args << ": the message should name " << named << "\n" << output;
}

}  // namespace test_cli
