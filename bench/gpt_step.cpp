// One GPT-2 training step (next-token loss, backward, AdamW) timed eagerly or as an nn::Graph: the
// model of issue 37's thread measurements (4 layers, 256 wide, 4 heads, 128 tokens, batch 8, GPT-2's
// vocabulary, dropout off). bench/torch_gpt_step.py is its PyTorch twin; bench/cpu_threads.sh runs
// both at 1-16 threads. Threads: FLOW_NUM_THREADS, else OMP_NUM_THREADS, else the CPUs.
// --profile N prints the N ops (eager) or Graph nodes with the most self time in one more step.
// --amp: bfloat16 autocast, printed as mode "<mode>-amp" (--amp-dtype float16: "<mode>-amp-float16").
// --device cuda: the model, optimizer state and tokens on the GPU (GPT-2 small there:
// --layers 12 --width 768 --heads 12 --tokens 1024); the step's loss.item() waits for the GPU.
// --checkpoint: every block checkpointed (eager: gradient_checkpointing_enable; graph:
// config().set_activation_checkpointing per block).
// Prints: "flow-<mode>[-cuda] threads <n> ms/step <median> tokens/s <rate> loss <first> -> <last> peak_rss_mb <mb>".
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "core/flow.h"
#include "core/profiler.h"
#include "core/thread_pool.h"
#include "graph/graph.h"
#include "models/gpt2.h"
#include "optim/optimizer.h"
#include "tests/common/language_model_graph.h"

namespace {

namespace models = flow::models;
using flow::Tensor;

struct Options {
  std::string mode = "graph";
  int64_t batch = 8, tokens = 128, layers = 4, width = 256, heads = 4, vocab = 50257;
  int warmup = 2, steps = 5;
  int profile_rows = 0;
  std::string trace;
  bool amp = false;
  std::string amp_dtype = "bfloat16";
  std::string device = "cpu";
  bool checkpoint = false;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("One GPT-2 training step, eager or as an nn::Graph, timed");
  app.add_option("--mode", o.mode, "eager or graph")->check(CLI::IsMember({"eager", "graph"}))->capture_default_str();
  app.add_option("--batch", o.batch, "sequences per step")->check(flow::cli::at_least<int64_t>(1))->capture_default_str();
  app.add_option("--tokens", o.tokens, "tokens per sequence")->check(flow::cli::at_least<int64_t>(2))->capture_default_str();
  app.add_option("--layers", o.layers, "transformer blocks")->check(flow::cli::at_least<int64_t>(1))->capture_default_str();
  app.add_option("--width", o.width, "n_embd")->check(flow::cli::at_least<int64_t>(1))->capture_default_str();
  app.add_option("--heads", o.heads, "attention heads")->check(flow::cli::at_least<int64_t>(1))->capture_default_str();
  app.add_option("--vocab", o.vocab, "vocabulary size")->check(flow::cli::at_least<int64_t>(2))->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed steps first")->check(flow::cli::at_least(0))->capture_default_str();
  app.add_option("--steps", o.steps, "timed steps (the median counts)")->check(flow::cli::at_least(1))->capture_default_str();
  app.add_flag("--amp", o.amp, "16-bit autocast (eager: flow::autocast around the forward; graph: config().enable_amp())");
  app.add_option("--amp-dtype", o.amp_dtype, "the autocast dtype")->check(CLI::IsMember({"bfloat16", "float16"}))->capture_default_str();
  app.add_option("--device", o.device, "cpu or cuda[:N]")->capture_default_str();
  app.add_option("--profile", o.profile_rows, "after the timed steps, profile one more and print this many rows by self time")
      ->check(flow::cli::at_least(0))
      ->capture_default_str();
  app.add_option("--trace", o.trace, "with --profile: also write that step's Chrome trace (with input shapes) to this file");
  app.add_flag("--checkpoint", o.checkpoint, "activation checkpointing of every transformer block");
  if (const auto status = flow::cli::parse(app, argc, argv)) return *status;

  const flow::Device device(o.device);
  if (device.is_cuda() && !flow::cuda_is_available()) {
    std::fprintf(stderr, "gpt_step: --device %s, but no CUDA device is present\n", o.device.c_str());
    return 1;
  }
  flow::manual_seed(0);
  const auto config = models::GPT2Config().vocab_size(o.vocab).n_positions(o.tokens).n_embd(o.width).n_layer(o.layers).n_head(o.heads).dropout(0.0);
  auto model = std::make_shared<models::GPT2LMHeadModel>(config);
  model->to(device);
  const flow::DType amp_dtype = o.amp_dtype == "float16" ? flow::kFloat16 : flow::kBFloat16;
  auto optimizer = std::make_shared<flow::optim::AdamW>(model->parameters(), flow::optim::AdamWOptions(1e-4));
  test_graphs::LanguageModelTrainGraph graph(model, optimizer);
  if (o.amp) graph.config().enable_amp(true, amp_dtype);
  if (o.checkpoint) {
    model->gradient_checkpointing_enable();
    for (int64_t i = 0; i < o.layers; ++i) graph.config().set_activation_checkpointing("model.transformer.h." + std::to_string(i));
  }
  const Tensor ids = flow::randint(0, o.vocab, {o.batch, o.tokens}).to(device);
  auto step = [&]() -> double {
    if (o.mode == "graph") return graph(ids, ids).at(0).item<double>();
    optimizer->zero_grad();
    Tensor loss;
    {
      flow::autocast guard(amp_dtype, o.amp);
      loss = model->loss(ids, ids);
    }
    loss.backward();
    optimizer->step();
    return loss.item<double>();
  };

  double first_loss = 0, last_loss = 0;
  for (int i = 0; i < o.warmup; ++i) first_loss = step();
  std::vector<double> seconds;
  for (int i = 0; i < o.steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    last_loss = step();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (o.warmup == 0 && i == 0) first_loss = last_loss;
  }
  std::nth_element(seconds.begin(), seconds.begin() + o.steps / 2, seconds.end());
  const double median = seconds[static_cast<size_t>(o.steps / 2)];
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  if (o.profile_rows > 0) {
    flow::profiler::Profile profile;
    step();
    profile.stop();
    std::printf("%s", profile.key_averages().table("self", o.profile_rows).c_str());
    if (!o.trace.empty()) profile.export_chrome_trace(o.trace);
  }
  const std::string amp = !o.amp ? "" : amp_dtype == flow::kFloat16 ? "-amp-float16" : "-amp";
  std::printf("flow-%s%s%s threads %d ms/step %.1f tokens/s %.0f loss %.4f -> %.4f peak_rss_mb %.1f\n", o.mode.c_str(), amp.c_str(),
              device.is_cuda() ? "-cuda" : "", flow::get_num_threads(), median * 1e3, static_cast<double>(o.batch * o.tokens) / median,
              first_loss, last_loss, static_cast<double>(usage.ru_maxrss) / 1024.0);
  return 0;
}
