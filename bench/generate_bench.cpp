// Greedy text generation with a GPT-2 of random weights: time to first token (the prompt's step)
// and decode tokens/s, over the KV cache eagerly (--mode eager), through the compiled step Graph
// (--mode graph; plans compiled in an untimed warm-up run), or without a cache (--mode nocache:
// every step reruns the model over each whole sequence), or through oneflow_lite (--mode lite: the
// decoder export of models/decoder_export.h, its prefill step over the whole prompt at once, then
// its decode step, writing the KV cache it is given in place). --model picks the shapes: gpt_train
// (examples/gpt_train's defaults: 4 layers, width 256, 4 heads, 256 byte tokens, 128 positions)
// or gpt2 (GPT-2 small: 12 layers, 768, 12 heads, vocabulary 50257, 1024 positions).
// --profile N prints the N ops with the most self time in one more run. --export-dir DIR (lite)
// keeps the export there (the cache updated in place), with its functional form in
// DIR/functional (for ONNX), prompt_ids.bin (int64 (batch, prompt)) and prefill_logits.bin
// (float32 (batch, vocab): lite's logits after the prompt) for bench/ort/ort_generate.js.
// Prints: "generate <model> <mode> batch <b> prompt <p> new <n> ttft_ms <median> decode_tokens_per_s <median>".
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "bench/generation_models.h"
#include "cli/cli.h"
#include "core/flow.h"
#include "core/grad_mode.h"
#include "core/profiler.h"
#include "models/decoder.h"
#include "models/decoder_export.h"
#include "oneflow_lite/model.h"

namespace {

namespace models = flow::models;
using flow::Tensor;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string model = "gpt_train", mode = "eager";
  int64_t batch = 1, prompt = 32, new_tokens = 32;
  int runs = 3;
  int profile_rows = 0;
  std::string export_dir;
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

// oneflow_lite's steps over the decoder export: (batch, prompt) at once, then one token per row,
// the cache written in place (no batch buckets: a padded batch would be a copy).
class LiteDecoder {
 public:
  static inline const flow::lite::LoadOptions kOptions = flow::lite::LoadOptions().batch_buckets(false);
  LiteDecoder(const std::string& dir, int64_t layers)
      : prefill_(flow::lite::Model::load(dir + "/prefill", kOptions)), decode_(flow::lite::Model::load(dir + "/decode", kOptions)), layers_(layers) {}

  // Logits (batch, vocab) after the prompts; the cache starts empty.
  Tensor prefill(const Tensor& ids) {
    const int64_t batch = ids.size(0);
    cache_.clear();
    for (int64_t i = 0; i < 2 * layers_; ++i) {
      std::vector<int64_t> shape = prefill_->inputs().at(static_cast<size_t>(3 + i)).shape;
      shape[0] = batch;
      cache_.push_back(flow::zeros(flow::Shape(shape)));
    }
    lengths_.assign(static_cast<size_t>(batch), 0);
    return step(*prefill_, ids, std::vector<int64_t>(static_cast<size_t>(batch), ids.size(1)));
  }
  Tensor decode(const std::vector<int64_t>& tokens) {
    return step(*decode_, flow::tensor<int64_t>(tokens, flow::Shape{static_cast<int64_t>(tokens.size()), 1}),
                std::vector<int64_t>(tokens.size(), 1));
  }

 private:
  Tensor step(const flow::lite::Model& model, const Tensor& ids, const std::vector<int64_t>& counts) {
    const auto batch = static_cast<int64_t>(counts.size());
    flow::TensorList inputs{ids, flow::tensor<int64_t>(lengths_, flow::Shape{batch}), flow::tensor<int64_t>(counts, flow::Shape{batch})};
    inputs.insert(inputs.end(), cache_.begin(), cache_.end());
    // The step writes the new keys and values into cache_ in place.
    const Tensor logits = model.run(inputs)[0];
    for (size_t b = 0; b < lengths_.size(); ++b) lengths_[b] += counts[b];
    return logits;
  }

  std::shared_ptr<const flow::lite::Model> prefill_, decode_;
  int64_t layers_;
  flow::TensorList cache_;
  std::vector<int64_t> lengths_;
};

std::pair<double, double> run_lite(LiteDecoder& decoder, const Tensor& ids, int64_t new_tokens) {
  const auto start = Clock::now();
  std::vector<int64_t> next = argmax_rows(decoder.prefill(ids));
  const double first = seconds_since(start);
  const auto decoding = Clock::now();
  for (int64_t t = 1; t < new_tokens; ++t) next = argmax_rows(decoder.decode(next));
  return {first, seconds_since(decoding)};
}

void write_raw(const Tensor& t, const std::string& path) {
  const Tensor host = t.contiguous();
  std::ofstream file(path, std::ios::binary);
  file.write(static_cast<const char*>(host.data_ptr()), static_cast<std::streamsize>(host.nbytes()));
  if (!file) flow::fail("generate_bench", "cannot write ", path);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("Greedy generation with a random GPT-2: time to first token and decode tokens/s");
  app.add_option("--model", o.model, "gpt_train or gpt2 (GPT-2 small)")->check(CLI::IsMember({"gpt_train", "gpt2"}))->capture_default_str();
  app.add_option("--mode", o.mode, "eager, graph (KV cache), nocache or lite (oneflow_lite over the decoder export)")
      ->check(CLI::IsMember({"eager", "graph", "nocache", "lite"}))
      ->capture_default_str();
  app.add_option("--batch", o.batch, "sequences generated side by side")->check(flow::cli::at_least<int64_t>(1))->capture_default_str();
  app.add_option("--prompt", o.prompt, "prompt tokens per sequence")->check(flow::cli::at_least<int64_t>(1))->capture_default_str();
  app.add_option("--new", o.new_tokens, "tokens generated per sequence")->check(flow::cli::at_least<int64_t>(2))->capture_default_str();
  app.add_option("--runs", o.runs, "timed generations (the median counts)")->check(flow::cli::at_least(1))->capture_default_str();
  app.add_option("--profile", o.profile_rows, "after the timed runs, profile one more and print this many ops by self time")
      ->check(flow::cli::at_least(0))
      ->capture_default_str();
  app.add_option("--export-dir", o.export_dir, "with --mode lite: keep the decoder export here, with prompt_ids.bin and prefill_logits.bin");
  if (const auto status = flow::cli::parse(app, argc, argv)) return *status;
  try {
    const auto config = bench::generation_model_config(o.model);
    if (o.prompt + o.new_tokens > config.n_positions_) flow::fail("generate_bench", "--prompt + --new exceed the model's ", config.n_positions_, " positions");
    flow::manual_seed(0);
    auto model = std::make_shared<models::GPT2LMHeadModel>(config);
    model->eval();
    const Tensor ids = flow::randint(0, config.vocab_size_, {o.batch, o.prompt});
    const std::vector<int64_t> flat = ids.tolist<int64_t>();
    std::vector<std::vector<int64_t>> prompts;
    for (int64_t b = 0; b < o.batch; ++b) prompts.emplace_back(flat.begin() + b * o.prompt, flat.begin() + (b + 1) * o.prompt);
    std::unique_ptr<LiteDecoder> lite;
    // Without --export-dir the export lives in a temporary directory, removed on the way out.
    struct RemovedAtExit {
      std::filesystem::path path;
      ~RemovedAtExit() {
        std::error_code ignored;
        if (!path.empty()) std::filesystem::remove_all(path, ignored);
      }
    } scratch;
    if (o.mode == "lite") {
      std::string dir = o.export_dir;
      if (dir.empty()) {
        scratch.path = std::filesystem::temp_directory_path() / ("generate_bench_" + std::to_string(getpid()));
        dir = scratch.path.string();
      }
      const auto options = models::DecoderExportOptions().max_length(o.prompt + o.new_tokens).prefill_length(o.prompt);
      models::export_decoder(model, dir, options);
      lite = std::make_unique<LiteDecoder>(dir, config.n_layer_);
      if (!o.export_dir.empty()) {
        // The functional form too (caches as outputs), which flow_onnx_export converts to ONNX.
        auto functional = options;
        models::export_decoder(model, dir + "/functional", functional.cache_update(models::CacheUpdate::kFunctional));
        write_raw(ids, dir + "/prompt_ids.bin");
        write_raw(lite->prefill(ids), dir + "/prefill_logits.bin");
      }
    }
    std::unique_ptr<models::CachedDecoder> decoder;
    if (o.mode == "eager" || o.mode == "graph") {
      decoder = std::make_unique<models::CachedDecoder>(
          model, models::CachedDecoderOptions().slots(o.batch).max_length(o.prompt + o.new_tokens).use_graph(o.mode == "graph"));
    }
    auto run = [&] {
      if (lite) return run_lite(*lite, ids, o.new_tokens);
      return decoder ? run_cached(*decoder, prompts, o.new_tokens) : run_uncached(*model, prompts, o.new_tokens);
    };
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
