#pragma once
// The training text of gpt_train: bytes read from a file or a directory of files, split into a
// training and a validation part, and cut into (batch, block) windows of byte tokens.
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace flow::examples {

// Where Debian's `fortunes` package installs its plain-text fortune files.
inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

// Byte-level tokens: each byte of the text is one token, so the vocabulary is every byte value.
inline constexpr int64_t kByteVocabulary = 256;

// The text under `path`: a file's bytes, or a directory's regular files concatenated in sorted
// name order (so every machine reads the same stream). In a directory, strfile's indexes (*.dat)
// and the UTF-8 copies some packages ship beside them (*.u8) are skipped, and so are
// subdirectories (fortunes' optional offensive/ folder). flow::Error "[gpt_train] ..." for a
// missing path, an unreadable file or no text at all.
std::string read_text(const std::string& path);

struct TextSplit {
  std::vector<uint8_t> train, validation;
};

// The first (1 - validation_fraction) of the bytes train, the rest validates. Both parts must hold
// at least block_size bytes (one window; its tokens are also its next-token targets), else a
// flow::Error.
TextSplit split_text(const std::string& text, double validation_fraction, int64_t block_size);

// Windows of block_size tokens for one step: row r of the step's global batch starts at an offset
// drawn with Philox from (seed, step * global_rows + r), so a step's batch depends only on the seed
// and the step number, never on what ran before: a resumed run reads what a straight run reads,
// and with several ranks each takes rows [first_row, first_row + rows) of the same global batch.
// Returns int64 (rows, block_size) token ids.
Tensor training_batch(const std::vector<uint8_t>& tokens, uint64_t seed, int64_t step, int64_t global_rows, int64_t first_row,
                      int64_t rows, int64_t block_size);

// Evaluation windows: `count` windows of block_size tokens starting at evenly spaced offsets from
// the first to the last possible one (the same windows every time), as int64 (count, block_size).
Tensor evaluation_windows(const std::vector<uint8_t>& tokens, int64_t count, int64_t block_size);

}  // namespace flow::examples
