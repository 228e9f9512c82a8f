#include "examples/gpt_train/text_data.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "core/error.h"
#include "core/ops/all.h"
#include "core/random.h"

namespace flow::examples {
namespace fs = std::filesystem;
namespace {

std::string read_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) fail("gpt_train", "cannot read ", file.string());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// int64 (rows, block_size) ids of the windows starting at `starts`.
Tensor windows(const std::vector<uint8_t>& tokens, const std::vector<int64_t>& starts, int64_t block_size) {
  std::vector<int64_t> ids;
  ids.reserve(starts.size() * static_cast<size_t>(block_size));
  for (const int64_t start : starts) ids.insert(ids.end(), tokens.begin() + start, tokens.begin() + start + block_size);
  return tensor<int64_t>(ids, Shape{static_cast<int64_t>(starts.size()), block_size});
}

}  // namespace

std::string read_text(const std::string& path) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (!fs::exists(status)) {
    fail("gpt_train", "no text at ", path, path == kFortunesDir ? " (install Debian's fortunes package: scripts/setup.sh does)" : "");
  }
  if (!fs::is_directory(status)) {
    std::string text = read_file(path);
    if (text.empty()) fail("gpt_train", path, " is empty");
    return text;
  }
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(path)) {
    const std::string extension = entry.path().extension().string();
    if (entry.is_regular_file() && extension != ".dat" && extension != ".u8") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  std::string text;
  for (const fs::path& file : files) text += read_file(file);
  if (text.empty()) fail("gpt_train", "no text in ", path, " (", files.size(), " text files, all empty)");
  return text;
}

TextSplit split_text(const std::string& text, double validation_fraction, int64_t block_size) {
  if (!(validation_fraction > 0 && validation_fraction < 1)) {
    fail("gpt_train", "the validation fraction must be in (0, 1), got ", validation_fraction);
  }
  const auto size = static_cast<int64_t>(text.size());
  const auto validation = static_cast<int64_t>(static_cast<double>(size) * validation_fraction);
  const int64_t train = size - validation;
  if (std::min(train, validation) < block_size) {
    fail("gpt_train", "text of ", size, " bytes splits into ", train, " training and ", validation,
         " validation bytes; each part needs at least --block-size = ", block_size);
  }
  TextSplit split;
  split.train.assign(text.begin(), text.begin() + train);
  split.validation.assign(text.begin() + train, text.end());
  return split;
}

Tensor training_batch(const std::vector<uint8_t>& tokens, uint64_t seed, int64_t step, int64_t global_rows, int64_t first_row,
                      int64_t rows, int64_t block_size) {
  const auto starts_possible = static_cast<uint64_t>(static_cast<int64_t>(tokens.size()) - block_size + 1);
  std::vector<int64_t> starts;
  for (int64_t row = first_row; row < first_row + rows; ++row) {
    uint32_t words[4];
    Philox::block(seed, static_cast<uint64_t>(step * global_rows + row), words);
    const uint64_t draw = (static_cast<uint64_t>(words[0]) << 32) | words[1];
    // The modulo's bias is below starts_possible / 2^64: negligible for any text.
    starts.push_back(static_cast<int64_t>(draw % starts_possible));
  }
  return windows(tokens, starts, block_size);
}

Tensor evaluation_windows(const std::vector<uint8_t>& tokens, int64_t count, int64_t block_size) {
  const int64_t last = static_cast<int64_t>(tokens.size()) - block_size;
  std::vector<int64_t> starts;
  for (int64_t i = 0; i < count; ++i) starts.push_back(count == 1 ? 0 : i * last / (count - 1));
  return windows(tokens, starts, block_size);
}

}  // namespace flow::examples
