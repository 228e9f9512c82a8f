// Greedy text generation with a GPT-2 of random weights: time to first token (the prompt's step)
// and decode tokens/s, over the KV cache eagerly (--mode eager), through the compiled step Graph
// (--mode graph; plans compiled in an untimed warm-up run), or without a cache (--mode nocache:
// every step reruns the model over each whole sequence). --model picks the shapes: gpt_train
// (examples/gpt_train's defaults: 4 layers, width 256, 4 heads, 256 byte tokens, 128 positions)
// or gpt2 (GPT-2 small: 12 layers, 768, 12 heads, vocabulary 50257, 1024 positions).
// --profile N prints the N ops with the most self time in one more run.
// Prints: "generate <model> <mode> batch <b> prompt <p> new <n> ttft_ms <median> decode_tokens_per_s <median>".
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "core/flow.h"
#include "core/grad_mode.h"
#include "core/profiler.h"
#include "models/decoder.h"
#include "models/gpt2.h"

namespace {

namespace models = flow::models;
using flow::Tensor;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string model = "gpt_train", mode = "eager";
  int64_t batch = 1, prompt = 32, new_tokens = 32;
  int runs = 3;
  int profile_rows = 0;
};

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<int64_t> argmax_rows(const Tensor& logits) { return flow::argmax(logits, -1).tolist<int64_t>(); }

// One generation of new_tokens per row: {seconds to the first token, seconds of the rest}.
std::pair<double, double> run_cached(models::CachedDecoder& decoder, const std::vector<std::vector<int64_t>>& prompts, int64_t new_tokens) {
  std::vector<int64_t> slots(prompts.size());
  for (size_t i = 0; i < slots.size(); ++i) slots[i] = static_cast<int64_t>(i);
  decoder.reset();
  const auto start = Clock::now();
  std::vector<int64_t> next = argmax_rows(decoder.prefill(slots, prompts));
  const double first = seconds_since(start);
  const auto decoding = Clock::now();
  for (int64_t t = 1; t < new_tokens; ++t) next = argmax_rows(decoder.decode(slots, next));
  return {first, seconds_since(decoding)};
}

std::pair<double, double> run_uncached(models::GPT2LMHeadModel& model, std::vector<std::vector<int64_t>> sequences, int64_t new_tokens) {
  const flow::autograd::NoGradGuard no_grad;
  auto step = [&] {
    const auto batch = static_cast<int64_t>(sequences.size()), length = static_cast<int64_t>(sequences[0].size());
    std::vector<int64_t> ids;
    for (const auto& s : sequences) ids.insert(ids.end(), s.begin(), s.end());
    const Tensor logits = model.forward(flow::tensor<int64_t>(ids, flow::Shape{batch, length})).select(1, length - 1);
    const std::vector<int64_t> next = argmax_rows(logits);
    for (size_t i = 0; i < sequences.size(); ++i) sequences[i].push_back(next[i]);
  };
  const auto start = Clock::now();
  step();
  const double first = seconds_since(start);
  const auto decoding = Clock::now();
  for (int64_t t = 1; t < new_tokens; ++t) step();
  return {first, seconds_since(decoding)};
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("Greedy generation with a random GPT-2: time to first token and decode tokens/s");
  app.add_option("--model", o.model, "gpt_train or gpt2 (GPT-2 small)")->check(CLI::IsMember({"gpt_train", "gpt2"}))->capture_default_str();
  app.add_option("--mode", o.mode, "eager, graph (KV cache) or nocache")->check(CLI::IsMember({"eager", "graph", "nocache"}))->capture_default_str();
  app.add_option("--batch", o.batch, "sequences generated side by side")->check(flow::cli::at_least<int64_t>(1))->capture_default_str();
  app.add_option("--prompt", o.prompt, "prompt tokens per sequence")->check(flow::cli::at_least<int64_t>(1))->capture_default_str();
  app.add_option("--new", o.new_tokens, "tokens generated per sequence")->check(flow::cli::at_least<int64_t>(2))->capture_default_str();
  app.add_option("--runs", o.runs, "timed generations (the median counts)")->check(flow::cli::at_least(1))->capture_default_str();
  app.add_option("--profile", o.profile_rows, "after the timed runs, profile one more and print this many ops by self time")
      ->check(flow::cli::at_least(0))
      ->capture_default_str();
  if (const auto status = flow::cli::parse(app, argc, argv)) return *status;
  try {
    const bool small = o.model == "gpt_train";
    const auto config = models::GPT2Config()
                            .vocab_size(small ? 256 : 50257)
                            .n_positions(small ? 128 : 1024)
                            .n_embd(small ? 256 : 768)
                            .n_layer(small ? 4 : 12)
                            .n_head(small ? 4 : 12)
                            .dropout(0);
    if (o.prompt + o.new_tokens > config.n_positions_) flow::fail("generate_bench", "--prompt + --new exceed the model's ", config.n_positions_, " positions");
    flow::manual_seed(0);
    auto model = std::make_shared<models::GPT2LMHeadModel>(config);
    model->eval();
    const Tensor ids = flow::randint(0, config.vocab_size_, {o.batch, o.prompt});
    const std::vector<int64_t> flat = ids.tolist<int64_t>();
    std::vector<std::vector<int64_t>> prompts;
    for (int64_t b = 0; b < o.batch; ++b) prompts.emplace_back(flat.begin() + b * o.prompt, flat.begin() + (b + 1) * o.prompt);
    std::unique_ptr<models::CachedDecoder> decoder;
    if (o.mode != "nocache") {
      decoder = std::make_unique<models::CachedDecoder>(
          model, models::CachedDecoderOptions().slots(o.batch).max_length(o.prompt + o.new_tokens).use_graph(o.mode == "graph"));
    }
    auto run = [&] { return decoder ? run_cached(*decoder, prompts, o.new_tokens) : run_uncached(*model, prompts, o.new_tokens); };
    run();  // warm-up: allocator caches, and the Graph's plans
    std::vector<double> first, rate;
    for (int r = 0; r < o.runs; ++r) {
      const auto [ttft, decode] = run();
      first.push_back(ttft * 1e3);
      rate.push_back(static_cast<double>(o.batch * (o.new_tokens - 1)) / decode);
    }
    std::printf("generate %s %s batch %lld prompt %lld new %lld ttft_ms %.2f decode_tokens_per_s %.1f\n", o.model.c_str(), o.mode.c_str(),
                static_cast<long long>(o.batch), static_cast<long long>(o.prompt), static_cast<long long>(o.new_tokens), median(first),
                median(rate));
    if (o.profile_rows > 0) {
      flow::profiler::Profile profile;
      run();
      profile.stop();
      std::printf("%s", profile.key_averages().table("self", o.profile_rows).c_str());
    }
  } catch (const flow::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
