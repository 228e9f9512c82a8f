// flow::save(graph, dir) is crash-safe and atomic for readers: a child process that writes two
// exports of the same graph (different weights) into one directory in turn is killed with SIGKILL
// at random moments (seeded), and the directory always loads in oneflow_lite and answers like one
// of the two. Also: a re-export replaces the previous one, and a directory holding other files
// is not replaced.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "common/graphs.h"
#include "common/scratch_dir.h"
#include "common/test_util.h"
#include "graph/export.h"
#include "oneflow_lite/model.h"

namespace fs = std::filesystem;
using flow::Tensor;

namespace {

class ExportCrashTest : public ::testing::Test {
 protected:
  flow::testing::ScratchDir scratch_;
};

// A two-layer MLP of about 8 MB of weights, so that an export takes a while; seed picks them.
flow::graph::InferenceExport make_export(uint64_t seed) {
  flow::manual_seed(seed);
  auto net = std::make_shared<flow::nn::Sequential>(std::make_shared<flow::nn::Linear>(256, 4096), std::make_shared<flow::nn::ReLU>(),
                                                    std::make_shared<flow::nn::Linear>(4096, 256));
  test_graphs::PredictGraph graph(net);
  graph(flow::zeros({2, 256}));
  return flow::graph::export_inference(graph);
}

Tensor answer(const std::string& dir, const Tensor& x) { return flow::lite::Model::load(dir)->run({x}).at(0); }

bool equal(const Tensor& a, const Tensor& b) { return a.tolist<float>() == b.tolist<float>(); }

[[noreturn]] void export_forever(const flow::graph::InferenceExport& a, const flow::graph::InferenceExport& b, const std::string& dir) {
  try {
    for (uint64_t i = 0;; ++i) flow::graph::write_export(i % 2 ? b : a, dir);
  } catch (...) {
    _exit(1);
  }
}

}  // namespace

TEST_F(ExportCrashTest, KilledExportLeavesOldOrNewExport) {
  const auto a = make_export(1), b = make_export(2);
  const std::string dir = (scratch_ / "model" / "1").string();
  const Tensor x = flow::randn({3, 256});
  flow::graph::write_export(b, dir);
  const Tensor answer_b = answer(dir, x);
  const auto start = std::chrono::steady_clock::now();
  flow::graph::write_export(a, dir);
  const auto export_time = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start);
  const Tensor answer_a = answer(dir, x);
  ASSERT_FALSE(equal(answer_a, answer_b));
  // The kill delays scale with one export on this machine (never asserted on).
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> delay_us(0, 3 * export_time.count() + 1000);

  for (int round = 0; round < 30; ++round) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) export_forever(a, b, dir);
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us(rng)));
    ASSERT_EQ(::kill(child, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the exporting child stopped by itself (status " << status << ")";
    Tensor got;
    ASSERT_NO_THROW(got = answer(dir, x)) << "round " << round;
    EXPECT_TRUE(equal(got, answer_a) || equal(got, answer_b)) << "round " << round << ": the directory is neither export";
  }
  // The next export cleans up what a killed one left beside the directory.
  flow::graph::write_export(b, dir);
  EXPECT_TRUE(equal(answer(dir, x), answer_b));
  std::vector<std::string> entries;
  for (const auto& entry : fs::directory_iterator(scratch_ / "model")) entries.push_back(entry.path().filename().string());
  EXPECT_EQ(entries, std::vector<std::string>{"1"});
}

TEST_F(ExportCrashTest, ReexportReplacesOnlyAnExportDirectory) {
  flow::manual_seed(3);
  test_graphs::PredictGraph graph(std::make_shared<flow::nn::Linear>(4, 2));
  graph(flow::zeros({1, 4}));
  const std::string dir = (scratch_ / "export").string();
  flow::save(graph, dir + "/");  // a trailing slash names the same directory
  flow::save(graph, dir);
  EXPECT_EQ(flow::lite::Model::load(dir)->outputs().size(), 1u);
  std::ofstream(fs::path(dir) / "notes.txt") << "mine";
  EXPECT_THROW_MSG(flow::save(graph, dir), "holds 'notes.txt', which is not part of an export");
  EXPECT_TRUE(fs::exists(fs::path(dir) / "notes.txt"));
  std::ofstream(scratch_ / "file") << "x";
  EXPECT_THROW_MSG(flow::save(graph, (scratch_ / "file").string()), "exists and is not a directory");
}
