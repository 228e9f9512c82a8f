#pragma once
// Helpers shared by all test areas.
#include <gtest/gtest.h>

#include <string>

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
