#pragma once
// Reading the small text files the server and its clients are given by flag (PEM certificates
// and keys, a bearer token); header-only, so that the client library, which links no server code,
// shares it.
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>

#include "core/error.h"

namespace flow::serving {

// The whole file. Throws flow::Error from `op` naming the file and what it is for when it cannot
// be read.
inline std::string read_text_file(const char* op, const std::string& path, const char* what) {
  std::ifstream file(path, std::ios::binary);
  if (!file) fail(op, "cannot read the ", what, " file '", path, "'");
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

// The file's first line without the blanks around it. Throws flow::Error from `op` when the file
// cannot be read or that line is blank.
inline std::string first_line_of(const char* op, const std::string& path, const char* what) {
  const std::string text = read_text_file(op, path, what);
  const std::string_view line = std::string_view(text).substr(0, text.find('\n'));
  const auto first = line.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) fail(op, "the ", what, " file '", path, "' holds nothing on its first line");
  return std::string(line.substr(first, line.find_last_not_of(" \t\r") - first + 1));
}

}  // namespace flow::serving
