#pragma once
// Helpers shared by all test areas.
#include <gtest/gtest.h>

#include <unistd.h>

#include <string>

#include "core/allocator.h"
#include "core/error.h"

// Expects statement to throw flow::Error whose message contains substring.
#define EXPECT_THROW_MSG(statement, substring)                                                   \
  do {                                                                                           \
    try {                                                                                        \
      statement;                                                                                 \
      ADD_FAILURE() << "expected flow::Error containing \"" << (substring) << "\", nothing thrown"; \
    } catch (const ::flow::Error& e) {                                                           \
      EXPECT_NE(std::string(e.what()).find(substring), std::string::npos)                        \
          << "message: " << e.what() << "\nexpected to contain: " << (substring);                \
    }                                                                                            \
  } while (0)

// Skips the test on a machine without a CUDA device (CUDA results are compared with CPU results).
#define REQUIRE_CUDA() \
  if (!::flow::cuda_is_available()) GTEST_SKIP() << "no CUDA device"

// A path under the test temp dir that no other process uses: the Release and sanitizer suites, or
// two runs of one test binary, may run at once on a machine.
inline std::string unique_temp_path(const std::string& name) {
  return ::testing::TempDir() + "/flow_" + std::to_string(::getpid()) + "_" + name;
}
