// gpt_train's text loading on small files of its own: the directory order and what is skipped,
// the train/validation split, byte tokens, the batches' determinism, and the errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "common/scratch_dir.h"
#include "core/error.h"
#include "examples/gpt_train/text_data.h"

namespace fs = std::filesystem;
namespace ex = flow::examples;

namespace {

class GptTrainText : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& text) const {
    const fs::path path = scratch_.path() / name;
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << text;
    return path.string();
  }
  std::string error_of(const std::function<void()>& f) const {
    try {
      f();
    } catch (const flow::Error& e) {
      return e.what();
    }
    return "no error";
  }
  flow::testing::ScratchDir scratch_;
};

TEST_F(GptTrainText, DirectoryIsReadInSortedOrderSkippingIndexesAndSubfolders) {
  write("text/b", "second\n%\n");
  write("text/a", "first\n%\n");
  write("text/a.dat", "index bytes");
  write("text/a.u8", "utf-8 copy");
  write("text/off/rude", "offensive");
  EXPECT_EQ(ex::read_text((scratch_.path() / "text").string()), "first\n%\nsecond\n%\n");
  EXPECT_EQ(ex::read_text(write("one.txt", "just this")), "just this");
}

TEST_F(GptTrainText, SplitKeepsTheEndForValidationAndTokensAreBytes) {
  std::string text;
  for (int i = 0; i < 100; ++i) text.push_back(static_cast<char>(i * 37 % 256));  // bytes above 127 too
  const ex::TextSplit split = ex::split_text(text, 0.1, 4);
  ASSERT_EQ(split.train.size(), 90U);
  ASSERT_EQ(split.validation.size(), 10U);
  for (size_t i = 0; i < 100; ++i) {
    const uint8_t expected = static_cast<uint8_t>(text[i]);
    EXPECT_EQ(i < 90 ? split.train[i] : split.validation[i - 90], expected) << i;
  }
  // Evaluation windows: evenly spaced from the first to the last start, ids = byte values.
  const flow::Tensor windows = ex::evaluation_windows(split.validation, 3, 4);
  ASSERT_EQ(windows.shape(), flow::Shape({3, 4}));
  const auto ids = windows.tolist<int64_t>();
  const std::vector<size_t> starts = {0, 3, 6};
  for (size_t row = 0; row < 3; ++row) {
    for (size_t t = 0; t < 4; ++t) EXPECT_EQ(ids[row * 4 + t], split.validation[starts[row] + t]) << row << "," << t;
  }
}

TEST_F(GptTrainText, BatchesDependOnlyOnSeedStepAndRow) {
  std::string text;
  for (int i = 0; i < 1000; ++i) text.push_back(static_cast<char>('a' + i % 26));
  const ex::TextSplit split = ex::split_text(text, 0.1, 8);
  const auto whole = ex::training_batch(split.train, 7, 3, 4, 0, 4, 8).tolist<int64_t>();
  EXPECT_EQ(ex::training_batch(split.train, 7, 3, 4, 0, 4, 8).tolist<int64_t>(), whole);
  EXPECT_NE(ex::training_batch(split.train, 7, 4, 4, 0, 4, 8).tolist<int64_t>(), whole);
  EXPECT_NE(ex::training_batch(split.train, 8, 3, 4, 0, 4, 8).tolist<int64_t>(), whole);
  // Rows 2 and 3 alone (a second rank's share) are the same rows of the global batch.
  const auto share = ex::training_batch(split.train, 7, 3, 4, 2, 2, 8).tolist<int64_t>();
  EXPECT_EQ(share, std::vector<int64_t>(whole.begin() + 16, whole.end()));
  // Every row is a window of consecutive letters of the training text.
  for (size_t row = 0; row < 4; ++row) {
    for (size_t t = 1; t < 8; ++t) EXPECT_EQ((whole[row * 8 + t] - 'a') % 26, (whole[row * 8 + t - 1] - 'a' + 1) % 26);
  }
}

TEST_F(GptTrainText, MissingEmptyOrShortTextIsAClearError) {
  const std::string missing = (scratch_.path() / "nowhere").string();
  EXPECT_EQ(error_of([&] { ex::read_text(missing); }), "[gpt_train] no text at " + missing);
  const std::string empty = write("empty.txt", "");
  EXPECT_EQ(error_of([&] { ex::read_text(empty); }), "[gpt_train] " + empty + " is empty");
  write("indexes/a.dat", "index");
  EXPECT_EQ(error_of([&] { ex::read_text((scratch_.path() / "indexes").string()); }),
            "[gpt_train] no text in " + (scratch_.path() / "indexes").string() + " (0 text files, all empty)");
  EXPECT_EQ(error_of([] { ex::split_text(std::string(100, 'x'), 0.1, 16); }),
            "[gpt_train] text of 100 bytes splits into 90 training and 10 validation bytes; each part needs at least --block-size = 16");
}

}  // namespace
