// gpt_train run as a program on a tiny GPT for a few dozen steps: its command line, the loss
// falling on the fortunes package's text, resuming bit for bit (eager and Graph), and eager and
// Graph training alike.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>

#include "common/command_line.h"
#include "common/scratch_dir.h"
#include "core/flow.h"
#include "examples/gpt_train/text_data.h"
#include "oneflow_lite/model.h"

namespace fs = std::filesystem;
using test_cli::contains;
using test_cli::run_command;

namespace {

// A GPT of one block, 32 wide, over 32 bytes of context, 8 sequences a step unless args say
// otherwise: 20-odd steps take about a second.
const std::string kTiny = " --layers 1 --heads 2 --width 32 --block-size 32 --lr 3e-3 --eval-windows 16 --log-every 1";

struct TrainingRun {
  std::map<int64_t, double> train, validation;  // by step
  std::string output;
};

// Runs gpt_train (prefixed by launcher, e.g. flow_run) on the tiny model with args and parses
// the losses it prints.
TrainingRun run_gpt_train(const std::string& args, const std::string& launcher = "") {
  if (!fs::exists(flow::examples::kFortunesDir)) {
    ADD_FAILURE() << flow::examples::kFortunesDir << " is missing: install Debian's fortunes package (scripts/setup.sh does)";
    return {};
  }
  TrainingRun run;
  int status = 0;
  std::tie(status, run.output) = run_command(launcher + GPT_TRAIN_PATH + kTiny + (contains(args, "--batch-size") ? " " : " --batch-size 8 ") + args);
  EXPECT_EQ(status, 0) << args << "\n" << run.output;
  // Under flow_run each line is prefixed by its rank; rank 0 prints the losses.
  const std::regex train(R"(step (\d+)/\d+: train loss ([0-9.]+))"), validation(R"(step (\d+): validation loss ([0-9.]+))");
  for (auto it = std::sregex_iterator(run.output.begin(), run.output.end(), train); it != std::sregex_iterator(); ++it) {
    run.train[std::stoll((*it)[1])] = std::stod((*it)[2]);
  }
  for (auto it = std::sregex_iterator(run.output.begin(), run.output.end(), validation); it != std::sregex_iterator(); ++it) {
    run.validation[std::stoll((*it)[1])] = std::stod((*it)[2]);
  }
  return run;
}

// Every tensor of two checkpoints, bit for bit (float32 and bfloat16 values are exact in double).
void expect_same_checkpoint(const std::string& a, const std::string& b) {
  const flow::StateDict left = flow::load(a), right = flow::load(b);
  ASSERT_EQ(left.keys(), right.keys());
  ASSERT_GT(left.size(), 0U);
  for (const auto& [name, tensor] : left) {
    const flow::Tensor& other = right.at(name);
    ASSERT_EQ(tensor.dtype(), other.dtype()) << name;
    EXPECT_EQ(tensor.to(flow::kFloat64).tolist<double>(), other.to(flow::kFloat64).tolist<double>()) << name;
  }
  EXPECT_EQ(left.metadata(), right.metadata());
}

class GptTrain : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return (scratch_.path() / name).string(); }

  // 20 steps straight, and 10 steps, save, resume, 10 more: the same losses and final state.
  void expect_resume_is_exact(const std::string& mode) {
    const TrainingRun straight = run_gpt_train(mode + " --steps 20 --eval-every 10 --sample-tokens 0 --checkpoint " + path("straight"));
    const TrainingRun first = run_gpt_train(mode + " --steps 10 --eval-every 10 --sample-tokens 0 --checkpoint " + path("halves"));
    const TrainingRun second = run_gpt_train(mode + " --steps 20 --eval-every 10 --sample-tokens 0 --checkpoint " + path("halves") + " --resume");
    EXPECT_TRUE(contains(second.output, "resumed from " + path("halves") + "/gpt_train.safetensors at step 10")) << second.output;
    ASSERT_EQ(straight.train.size(), 20U) << straight.output;
    ASSERT_EQ(first.train.size(), 10U) << first.output;
    ASSERT_EQ(second.train.size(), 10U) << second.output;
    for (const auto& [step, loss] : straight.train) EXPECT_EQ(loss, (step <= 10 ? first : second).train.at(step)) << "step " << step;
    EXPECT_EQ(straight.validation.at(20), second.validation.at(20));
    expect_same_checkpoint(path("straight") + "/gpt_train.safetensors", path("halves") + "/gpt_train.safetensors");
  }

  flow::testing::ScratchDir scratch_;
};

TEST_F(GptTrain, CommandLineErrorsNameTheFlag) {
  const std::string tool = GPT_TRAIN_PATH;
  test_cli::expect_help_lists(tool, {"--steps", "--batch-size", "--block-size", "--layers", "--heads", "--width", "--lr", "--seed",
                                     "--graph", "--amp", "--checkpointing", "--clip-grad", "--parallel", "--eval-every", "--checkpoint", "--resume",
                                     "--sample-tokens", "--data"});
  test_cli::expect_usage_error(tool, "--steps -1", "--steps");
  test_cli::expect_usage_error(tool, "--batch-size 0", "--batch-size");
  test_cli::expect_usage_error(tool, "--block-size 1", "--block-size");
  test_cli::expect_usage_error(tool, "--lr 0", "--lr");
  test_cli::expect_usage_error(tool, "--clip-grad -1", "--clip-grad");
  test_cli::expect_usage_error(tool, "--top-k 257", "--top-k");
  test_cli::expect_usage_error(tool, "--width 30 --heads 4", "--width 30 must be divisible by --heads 4");
  test_cli::expect_usage_error(tool, "--resume", "--resume needs --checkpoint");
  const auto [status, output] = run_command(tool + " --data " + path("nowhere"));
  EXPECT_EQ(status, 1) << output;
  EXPECT_TRUE(contains(output, "error: [gpt_train] no text at " + path("nowhere"))) << output;
}

TEST_F(GptTrain, LossFallsOnTheFortunesAndASampleIsPrinted) {
  const TrainingRun run = run_gpt_train("--steps 40 --eval-every 20 --sample-tokens 30 --prompt Q:");
  ASSERT_EQ(run.train.size(), 40U) << run.output;
  // Uniform guessing over 256 bytes costs ln 256 = 5.55; English bytes are far more predictable.
  EXPECT_GT(run.train.at(1), 5.0) << run.output;
  EXPECT_LT(run.train.at(40), run.train.at(1) - 1.5) << run.output;
  ASSERT_EQ(run.validation.size(), 2U) << run.output;
  EXPECT_LT(run.validation.at(40), run.validation.at(20)) << run.output;
  EXPECT_LT(run.validation.at(40), 4.0) << run.output;
  EXPECT_TRUE(contains(run.output, "sample (top-k 10, seed 0):\nQ:")) << run.output;
}

// --export writes the served decoder (models/decoder_export.h): generation.json with byte tokens,
// and prefill and decode steps oneflow_lite loads, the cache of the one layer as inputs it writes.
TEST_F(GptTrain, ExportWritesADecoderThatOneflowLiteLoads) {
  const TrainingRun run = run_gpt_train("--steps 3 --sample-tokens 0 --export " + path("lm"));
  EXPECT_TRUE(contains(run.output, "exported to " + path("lm"))) << run.output;
  std::ifstream spec(fs::path(path("lm")) / "generation.json");
  const std::string text((std::istreambuf_iterator<char>(spec)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(contains(text, "\"tokenizer\": \"bytes\"")) << text;
  EXPECT_TRUE(contains(text, "\"max_length\": 32")) << text;
  for (const char* step : {"prefill", "decode"}) {
    const auto model = flow::lite::Model::load((fs::path(path("lm")) / step).string());
    ASSERT_EQ(model->inputs().size(), 5U) << step;
    EXPECT_EQ(model->inputs()[0].name, "input_ids");
    EXPECT_EQ(model->inputs()[0].shape, (std::vector<int64_t>{-1, std::string(step) == "decode" ? 1 : 16}));
    ASSERT_EQ(model->outputs().size(), 1U) << step;  // the logits: the cache is written in place
    EXPECT_EQ(model->outputs()[0].shape, (std::vector<int64_t>{-1, 256}));
  }
}

TEST_F(GptTrain, EagerResumeIsBitIdentical) { expect_resume_is_exact("--dropout 0.1 --clip-grad 1"); }

TEST_F(GptTrain, GraphResumeIsBitIdentical) { expect_resume_is_exact("--graph --dropout 0.1 --clip-grad 1"); }

TEST_F(GptTrain, ResumeRefusesADifferentRun) {
  run_gpt_train("--steps 2 --sample-tokens 0 --checkpoint " + path("run"));
  const auto [status, output] = run_command(std::string(GPT_TRAIN_PATH) + kTiny + " --batch-size 8 --steps 4 --seed 1 --checkpoint " + path("run") + " --resume");
  EXPECT_EQ(status, 1) << output;
  EXPECT_TRUE(contains(output, "was trained with")) << output;
  EXPECT_TRUE(contains(output, "seed=0")) << output;
}

// A Graph runs the eager step's ops, but its passes fuse some of them (matmul epilogues, the
// AdamW updates), which may round differently; the printed losses agreed to all 6 decimals when
// this was written, so 1e-5 relative leaves room for such rounding and still catches any real
// difference (a wrong batch, a missed clip or update moves the loss by far more).
TEST_F(GptTrain, EagerAndGraphTrainAlike) {
  const TrainingRun eager = run_gpt_train("--steps 20 --eval-every 0 --sample-tokens 0");
  const TrainingRun graph = run_gpt_train("--graph --steps 20 --eval-every 0 --sample-tokens 0");
  ASSERT_EQ(eager.train.size(), 20U) << eager.output;
  ASSERT_EQ(graph.train.size(), 20U) << graph.output;
  for (const auto& [step, loss] : eager.train) EXPECT_NEAR(graph.train.at(step), loss, 1e-5 * loss) << "step " << step;
  EXPECT_NEAR(graph.validation.at(20), eager.validation.at(20), 1e-5 * eager.validation.at(20));
}

// Checkpointed blocks recompute their activations in backward from the same inputs and, with
// dropout, the same draws: eager gradients are bit for bit those of the plain run. The Graph's
// recomputed nodes sit in other fusion groups than the originals, so its losses get the 1e-5
// relative of the test above.
TEST_F(GptTrain, CheckpointingTrainsLikeKeepingActivations) {
  for (const std::string mode : {"", "--graph"}) {
    const std::string args = mode + " --dropout 0.1 --steps 10 --eval-every 0 --sample-tokens 0";
    const TrainingRun plain = run_gpt_train(args), checkpointed = run_gpt_train(args + " --checkpointing");
    ASSERT_EQ(checkpointed.train.size(), 10U) << checkpointed.output;
    for (const auto& [step, loss] : plain.train) {
      if (mode.empty()) EXPECT_EQ(checkpointed.train.at(step), loss) << "step " << step;
      else EXPECT_NEAR(checkpointed.train.at(step), loss, 1e-5 * loss) << "graph step " << step;
    }
  }
}

// Two ranks of 4 sequences read the rows of one process's batch of 8, so they train alike: DDP
// averages two half-batch gradients and a data-parallel Graph all-reduces them, which rounds
// differently from one batch's sum, hence the same 1e-5 relative as above.
TEST_F(GptTrain, TwoRanksTrainLikeOneProcessWithTheWholeBatch) {
  const TrainingRun one = run_gpt_train("--steps 10 --eval-every 0 --sample-tokens 0");
  const std::string flow_run = std::string(FLOW_RUN_PATH) + " --nproc-per-node 2 --timeout 50 -- ";
  for (const std::string mode : {"", "--graph"}) {
    const TrainingRun two = run_gpt_train(mode + " --parallel --batch-size 4 --steps 10 --eval-every 0 --sample-tokens 0", flow_run);
    EXPECT_TRUE(contains(two.output, "data parallel, 2 x 4 sequences")) << two.output;
    ASSERT_EQ(two.train.size(), 10U) << two.output;
    for (const auto& [step, loss] : one.train) EXPECT_NEAR(two.train.at(step), loss, 1e-5 * loss) << mode << " step " << step;
    EXPECT_NEAR(two.validation.at(10), one.validation.at(10), 1e-5 * one.validation.at(10)) << mode;
  }
}

}  // namespace
