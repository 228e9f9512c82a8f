// oneflow_lite_run, the command line of oneflow_lite: prints a model's outputs for given or
// generated inputs, benchmarks it, and rejects bad flags with exit status 2 naming the flag.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "common/command_line.h"
#include "common/graphs.h"
#include "common/models.h"
#include "common/scratch_dir.h"
#include "core/serialization.h"
#include "graph/export.h"
#include "oneflow_lite/model.h"

namespace fs = std::filesystem;
using test_cli::contains;
using test_cli::run_command;

namespace {

class LiteRunCliTest : public ::testing::Test {
 protected:
  // The quickstart MLP exported with a dynamic batch: input "image" (-1, 1, 28, 28), output "logits".
  void SetUp() override {
    flow::manual_seed(0);
    test_graphs::PredictGraph graph(test_models::mlp());
    graph(flow::randn({2, 1, 28, 28}));
    flow::save(graph, model_dir(), flow::ExportOptions().input_names({"image"}).output_names({"logits"}));
  }
  std::string model_dir() const { return (scratch_ / "model").string(); }
  std::string path(const std::string& name) const { return (scratch_ / name).string(); }
  const std::string tool_ = FLOW_LITE_RUN_PATH;
  flow::testing::ScratchDir scratch_;
};

TEST_F(LiteRunCliTest, PrintsTheOutputsOfGivenInputs) {
  const flow::Tensor images = flow::randn({3, 1, 28, 28});
  flow::StateDict inputs;
  inputs.insert("image", images);
  flow::save(inputs, path("images.safetensors"));
  std::ostringstream expected;
  expected << "logits = " << flow::lite::Model::load(model_dir())->run({images}).at(0);

  const auto [status, output] = run_command(tool_ + " " + model_dir() + " --input=" + path("images.safetensors"));
  ASSERT_EQ(status, 0) << output;
  EXPECT_TRUE(contains(output, "dynamic batch")) << output;
  EXPECT_TRUE(contains(output, "input image: float32 (-1, 1, 28, 28)")) << output;
  EXPECT_TRUE(contains(output, expected.str())) << output << "\nexpected:\n" << expected.str();
}

TEST_F(LiteRunCliTest, GeneratesInputsOfTheGivenBatchAndBenchmarks) {
  const auto [status, output] = run_command(tool_ + " " + model_dir() + " --batch 5");
  ASSERT_EQ(status, 0) << output;
  const size_t logits = output.find("logits = tensor([");
  ASSERT_NE(logits, std::string::npos) << output;
  EXPECT_EQ(std::count(output.begin() + static_cast<std::ptrdiff_t>(logits), output.end(), '['), 1 + 5) << "5 rows:\n" << output;

  const auto [bench_status, bench_output] = run_command(tool_ + " " + model_dir() + " --batch 2 --bench 3 --warmup=1");
  ASSERT_EQ(bench_status, 0) << bench_output;
  EXPECT_TRUE(contains(bench_output, "latency over 3 runs (us): p50")) << bench_output;
}

TEST_F(LiteRunCliTest, ProfilesTheTimedRunsPerOp) {
  const auto [status, output] =
      run_command(tool_ + " " + model_dir() + " --batch 2 --bench 4 --warmup 1 --threads 1 --profile --trace " + path("trace.json"));
  ASSERT_EQ(status, 0) << output;
  // The export runs the MLP's Linear + ReLU pairs as fused_linear and its last Linear as linear:
  // one step each per timed run.
  EXPECT_TRUE(contains(output, "Self CPU time total")) << output;
  auto calls_of = [&output = output](const std::string& op) {
    const size_t row = output.find("\n" + op + " ");
    if (row == std::string::npos) return int64_t{-1};
    std::istringstream fields(output.substr(row + 1));
    std::string name, category;
    int64_t calls = 0;
    fields >> name >> category >> calls;
    EXPECT_TRUE(category == "lite_blocked" || category == "lite_node") << output;
    return calls;
  };
  EXPECT_EQ(calls_of("fused_linear"), 2 * 4) << output;
  EXPECT_EQ(calls_of("linear"), 4) << output;
  EXPECT_TRUE(contains(output, "latency over 4 runs (us): p50")) << output;
  EXPECT_TRUE(fs::file_size(path("trace.json")) > 0);
}

TEST_F(LiteRunCliTest, CommandLineErrorsNameTheFlag) {
  test_cli::expect_help_lists(tool_, {"--input", "--batch", "--bench", "--warmup", "dir"});
  test_cli::expect_usage_error(tool_, "", "dir is required");
  test_cli::expect_usage_error(tool_, path("nowhere"), "does not exist");
  test_cli::expect_usage_error(tool_, model_dir() + " --batch -3", "--batch");
  test_cli::expect_usage_error(tool_, model_dir() + " --batch abc", "--batch");
  test_cli::expect_usage_error(tool_, model_dir() + " --bench 0", "--bench");
  test_cli::expect_usage_error(tool_, model_dir() + " --warmup", "--warmup");
  test_cli::expect_usage_error(tool_, model_dir() + " --input " + path("none.safetensors"), "--input");
  test_cli::expect_usage_error(tool_, model_dir() + " --threads 0", "--threads");
  test_cli::expect_usage_error(tool_, model_dir() + " --profile", "--bench");
  test_cli::expect_usage_error(tool_, model_dir() + " --trace " + path("t.json"), "--bench");
}

TEST_F(LiteRunCliTest, AModelErrorExitsWithStatusOne) {
  flow::StateDict inputs;
  inputs.insert("pixels", flow::randn({1, 1, 28, 28}));
  flow::save(inputs, path("wrong.safetensors"));
  const auto [status, output] = run_command(tool_ + " " + model_dir() + " --input " + path("wrong.safetensors"));
  EXPECT_EQ(status, 1) << output;
  EXPECT_TRUE(contains(output, "has no tensor named 'image'")) << output;
}

}  // namespace
