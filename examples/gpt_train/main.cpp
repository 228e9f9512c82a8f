// A small GPT trained from scratch on English text: the fortune cookies of Debian's `fortunes`
// package, read as bytes (a vocabulary of 256), 90% to train on and the last 10% to validate.
// models/gpt2's GPT2LMHeadModel learns next-byte prediction with AdamW, eagerly or as an
// nn::Graph (--graph), optionally in bfloat16 (--amp), with gradient clipping (--clip-grad), data
// parallel under flow_run (--parallel), and checkpoints that resume bit for bit (--checkpoint,
// --resume). At the end it prints a sample of generated text (models/generation.h's generate()).
// Usage: gpt_train [--steps N] [--graph] [--amp] [--checkpoint DIR [--resume]] ...   (--help says more)
//        flow_run --nproc-per-node 2 -- gpt_train --parallel [--graph]
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "core/autocast.h"
#include "core/flow.h"
#include "core/grad_mode.h"
#include "core/random.h"
#include "distributed/distributed.h"
#include "examples/gpt_train/checkpoint.h"
#include "models/decoder_export.h"
#include "examples/gpt_train/options.h"
#include "examples/gpt_train/text_data.h"
#include "graph/graph.h"
#include "models/generation.h"
#include "models/gpt2.h"
#include "nn/parallel/ddp.h"
#include "nn/utils/clip_grad.h"
#include "optim/optimizer.h"

namespace {

namespace dist = flow::distributed;
namespace ex = flow::examples;
namespace models = flow::models;
using flow::Tensor;

// One training step in a Graph: the next-byte loss, backward and AdamW's update in one Job.
struct GptTrainGraph : flow::nn::Graph {
  GptTrainGraph(std::shared_ptr<models::GPT2LMHeadModel> net, std::shared_ptr<flow::optim::Optimizer> optimizer) {
    model = register_module("model", std::move(net));
    add_optimizer(std::move(optimizer));
  }
  flow::TensorList build(const flow::TensorList& in) override {
    Tensor loss = model->loss(in[0], in[0]);
    loss.backward();
    return {loss};
  }
  std::shared_ptr<models::GPT2LMHeadModel> model;
};

// What a step computes depends on these; a resumed run must repeat them to continue the same run.
std::string run_signature(const ex::GptTrainOptions& o, int64_t world, size_t text_bytes) {
  std::string clip = o.clip_grad ? std::to_string(*o.clip_grad) : "off";
  return "layers=" + std::to_string(o.layers) + " heads=" + std::to_string(o.heads) + " width=" + std::to_string(o.width) +
         " block-size=" + std::to_string(o.block_size) + " batch-size=" + std::to_string(o.batch_size) + " seed=" +
         std::to_string(o.seed) + " lr=" + std::to_string(o.lr) + " dropout=" + std::to_string(o.dropout) + " clip-grad=" + clip +
         " graph=" + std::to_string(o.graph) + " amp=" + std::to_string(o.amp) + " ranks=" + std::to_string(world) +
         " text-bytes=" + std::to_string(text_bytes) + " validation-fraction=" + std::to_string(o.validation_fraction);
}

class Trainer {
 public:
  Trainer(const ex::GptTrainOptions& options, std::shared_ptr<models::GPT2LMHeadModel> model) : o_(options), model_(std::move(model)) {
    if (o_.parallel) {
      dist::init_process_group();
      // Graph data parallel: replicated (broadcast) parameters and batches split by rows; the
      // compiler inserts the gradient all-reduce. Eager: DDP averages gradients in backward.
      if (o_.graph) {
        placement_ = flow::Placement::all(flow::DeviceType::kCPU);
        model_->to_global(*placement_, {flow::sbp::broadcast()});
      } else {
        ddp_ = std::make_shared<flow::nn::parallel::DistributedDataParallel>(model_);
      }
    }
    auto adamw = flow::optim::AdamWOptions(o_.lr);
    // A Graph clips inside its Job from the param group's setting; eager step() ignores it, so
    // the eager path calls clip_grad_norm_ itself.
    if (o_.graph && o_.clip_grad) adamw.clip_grad_max_norm(*o_.clip_grad);
    optimizer_ = std::make_shared<flow::optim::AdamW>(model_->parameters(), adamw);
    if (o_.graph) {
      graph_ = std::make_unique<GptTrainGraph>(model_, optimizer_);
      graph_->config().enable_amp(o_.amp);
      if (o_.checkpointing) {
        for (int64_t i = 0; i < o_.layers; ++i) graph_->config().set_activation_checkpointing("model.transformer.h." + std::to_string(i));
      }
    } else if (o_.checkpointing) {
      model_->gradient_checkpointing_enable();
    }
  }

  int64_t world() const { return dist::get_world_size(); }
  bool prints() const { return dist::get_rank() == 0; }

  // One optimizer step on this step's global batch; returns the loss over all of it.
  double step(const Tensor& global_batch) {
    if (graph_) return (*graph_)(placed(global_batch, flow::sbp::split(0))).at(0).item<double>();
    const int64_t rows = o_.batch_size;
    const Tensor ids = global_batch.slice(0, dist::get_rank() * rows, (dist::get_rank() + 1) * rows);
    optimizer_->zero_grad();
    Tensor loss;
    {
      const flow::autocast autocast(flow::kBFloat16, o_.amp);
      loss = ddp_ ? models::causal_lm_loss((*ddp_)(ids), ids) : model_->loss(ids, ids);
    }
    loss.backward();
    if (o_.clip_grad) flow::nn::utils::clip_grad_norm_(model_->parameters(), *o_.clip_grad);
    optimizer_->step();
    double value = loss.item<double>();
    if (ddp_) {
      // Each rank's loss covers its rows; their mean is the global batch's loss.
      Tensor sum = flow::tensor<double>({value});
      dist::process_group("gpt_train").all_reduce(sum, dist::ReduceOp::kSum, {})->wait();
      value = sum.item<double>() / static_cast<double>(world());
    }
    return value;
  }

  // Mean next-byte loss over the windows, in batches of --batch-size, without dropout.
  double evaluate(const Tensor& windows) {
    const flow::autograd::NoGradGuard no_grad;
    const flow::autocast autocast(flow::kBFloat16, o_.amp);
    model_->eval();
    double total = 0;
    const int64_t count = windows.size(0);
    for (int64_t start = 0; start < count; start += o_.batch_size) {
      const Tensor ids = placed(windows.slice(0, start, std::min(count, start + o_.batch_size)), flow::sbp::broadcast());
      total += model_->loss(ids, ids).item<double>() * static_cast<double>(ids.size(0));
    }
    model_->train();
    return total / static_cast<double>(count);
  }

  // Continues `prompt` by `tokens` bytes with models::generate over a KV cache (eagerly, or as a
  // Graph with --graph), in float32: greedy for --top-k 0, else top-k sampling seeded by --seed.
  // One generate() call fills the --block-size context; past it, generation restarts from the
  // last half of the context (the prefix is prefilled again, then decoding continues).
  std::string sample(const std::string& prompt, int64_t tokens) {
    const std::shared_ptr<models::GPT2LMHeadModel> model = local_model();
    model->eval();
    std::vector<int64_t> context;
    for (char c : prompt) context.push_back(static_cast<uint8_t>(c));
    models::CachedDecoder decoder(model, models::CachedDecoderOptions().max_length(o_.block_size).use_graph(o_.graph));
    auto config = models::GenerationConfig().do_sample(o_.top_k > 0).top_k(o_.top_k);
    std::string generated;
    for (uint64_t round = 0; static_cast<int64_t>(generated.size()) < tokens; ++round) {
      const auto keep = std::min<size_t>(context.size(), static_cast<size_t>(o_.block_size / 2));
      const std::vector<int64_t> window(context.end() - static_cast<std::ptrdiff_t>(keep), context.end());
      const int64_t room = std::min(tokens - static_cast<int64_t>(generated.size()), o_.block_size - static_cast<int64_t>(keep));
      // Held in a variable: a range-for over .at(0) of the returned temporary would read freed memory.
      const std::vector<std::vector<int64_t>> rows = models::generate(decoder, {window}, config.max_new_tokens(room).seed(o_.seed + round));
      for (int64_t next : rows.at(0)) {
        context.push_back(next);
        generated.push_back(static_cast<char>(next));
      }
    }
    model_->train();
    return generated;
  }

  // The trained model as a served decoder (a local copy under --parallel; rank 0 writes it).
  void export_decoder(const std::string& dir) {
    const std::shared_ptr<models::GPT2LMHeadModel> model = local_model();
    if (prints()) models::export_decoder(model, dir, models::DecoderExportOptions().tokenizer("bytes").prefill_length(16));
    model_->train();
  }

  flow::StateDict state_dict() const {
    if (graph_) return graph_->state_dict();
    flow::StateDict state;
    ex::add_prefixed(state, model_->state_dict(), "model.");
    ex::add_prefixed(state, optimizer_->state_dict(), "optimizer.");
    return state;
  }

  void load_state_dict(const flow::StateDict& state) {
    if (graph_) return graph_->load_state_dict(state);
    model_->load_state_dict(ex::strip_prefix(state, "model."));
    optimizer_->load_state_dict(ex::strip_prefix(state, "optimizer."));
  }

 private:
  // The model with local parameters: itself, or for a data-parallel Graph (global parameters) a
  // copy holding their whole values.
  std::shared_ptr<models::GPT2LMHeadModel> local_model() const {
    if (!placement_) return model_;
    auto copy = std::make_shared<models::GPT2LMHeadModel>(model_->transformer->config());
    flow::StateDict whole;
    for (const auto& [name, tensor] : model_->state_dict()) whole.insert(name, tensor.is_global() ? tensor.whole_local() : tensor);
    copy->load_state_dict(whole);
    return copy;
  }

  // The whole tensor as this run feeds it: laid out over the ranks for a data-parallel Graph.
  Tensor placed(const Tensor& whole, const flow::Sbp& sbp) const {
    return placement_ ? flow::distributed::from_whole(whole, *placement_, {sbp}) : whole;
  }

  const ex::GptTrainOptions& o_;
  std::shared_ptr<models::GPT2LMHeadModel> model_;
  std::shared_ptr<flow::nn::parallel::DistributedDataParallel> ddp_;
  std::optional<flow::Placement> placement_;
  std::shared_ptr<flow::optim::AdamW> optimizer_;
  std::unique_ptr<GptTrainGraph> graph_;
};

void save_checkpoint(Trainer& trainer, const ex::GptTrainOptions& o, int64_t step, const std::string& run) {
  std::filesystem::create_directories(o.checkpoint);
  flow::StateDict state = trainer.state_dict();
  const flow::Generator& generator = flow::default_generator();
  ex::add_checkpoint_info(state, {step, generator.seed(), generator.offset(), run});
  // A Graph's global state is saved collectively; DDP replicas are equal, so rank 0 saves alone.
  if (o.graph || !o.parallel) {
    flow::save(state, ex::checkpoint_file(o.checkpoint));
  } else {
    flow::nn::parallel::save_on_rank0(state, ex::checkpoint_file(o.checkpoint));
  }
}

// Loads the checkpoint into the trainer and the default generator; returns its step.
int64_t resume(Trainer& trainer, const ex::GptTrainOptions& o, const std::string& run) {
  const std::string path = ex::checkpoint_file(o.checkpoint);
  const flow::StateDict state = flow::load(path);
  const ex::CheckpointInfo info = ex::checkpoint_info(state, path);
  if (info.run != run) flow::fail("gpt_train", "--resume: ", path, " was trained with\n  ", info.run, "\nbut this run has\n  ", run);
  if (info.step > o.steps) flow::fail("gpt_train", "--resume: ", path, " is at step ", info.step, ", past --steps ", o.steps);
  trainer.load_state_dict(state);
  flow::default_generator().manual_seed(info.generator_seed);
  flow::default_generator().set_offset(info.generator_offset);
  return info.step;
}

int train(const ex::GptTrainOptions& o) {
  const std::string text = ex::read_text(o.data);
  const ex::TextSplit split = ex::split_text(text, o.validation_fraction, o.block_size);
  flow::manual_seed(o.seed);
  const auto config = models::GPT2Config()
                          .vocab_size(ex::kByteVocabulary)
                          .n_positions(o.block_size)
                          .n_embd(o.width)
                          .n_layer(o.layers)
                          .n_head(o.heads)
                          .dropout(o.dropout);
  auto model = std::make_shared<models::GPT2LMHeadModel>(config);
  int64_t parameters = 0;
  for (const Tensor& p : model->parameters()) parameters += p.numel();
  Trainer trainer(o, model);
  const int64_t world = trainer.world();
  const std::string run = run_signature(o, world, text.size());
  if (trainer.prints()) {
    std::printf("text: %zu bytes from %s: %zu to train on, %zu to validate\n", text.size(), o.data.c_str(), split.train.size(),
                split.validation.size());
    std::printf("model: GPT-2, %lld layers, %lld heads, width %lld, context %lld, 256 byte tokens: %lld parameters\n",
                static_cast<long long>(o.layers), static_cast<long long>(o.heads), static_cast<long long>(o.width),
                static_cast<long long>(o.block_size), static_cast<long long>(parameters));
    std::printf("training: %s%s%s, %lld x %lld sequences of %lld bytes per step, AdamW lr %g\n", o.graph ? "nn::Graph" : "eager",
                o.amp ? ", bfloat16 autocast" : "", o.parallel ? ", data parallel" : "", static_cast<long long>(world),
                static_cast<long long>(o.batch_size), static_cast<long long>(o.block_size), o.lr);
  }
  const int64_t first_step = o.resume ? resume(trainer, o, run) : 0;
  if (o.resume && trainer.prints()) std::printf("resumed from %s at step %lld\n", ex::checkpoint_file(o.checkpoint).c_str(), static_cast<long long>(first_step));
  const Tensor validation = ex::evaluation_windows(split.validation, o.eval_windows, o.block_size);
  const int64_t global_rows = o.batch_size * world;
  const double tokens_per_step = static_cast<double>(global_rows * o.block_size);
  double interval_loss = 0, interval_seconds = 0, train_seconds = 0;
  int64_t interval_steps = 0;
  for (int64_t step = first_step + 1; step <= o.steps; ++step) {
    const Tensor batch = ex::training_batch(split.train, o.seed, step - 1, global_rows, 0, global_rows, o.block_size);
    const auto start = std::chrono::steady_clock::now();
    interval_loss += trainer.step(batch);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    interval_seconds += seconds;
    train_seconds += seconds;
    ++interval_steps;
    if ((step % o.log_every == 0 || step == o.steps) && trainer.prints()) {
      std::printf("step %lld/%lld: train loss %.6f (%.0f tokens/s)\n", static_cast<long long>(step), static_cast<long long>(o.steps),
                  interval_loss / static_cast<double>(interval_steps), tokens_per_step * static_cast<double>(interval_steps) / interval_seconds);
      std::fflush(stdout);
      interval_loss = interval_seconds = 0;
      interval_steps = 0;
    }
    if ((o.eval_every > 0 && step % o.eval_every == 0) || step == o.steps) {
      const double loss = trainer.evaluate(validation);
      if (trainer.prints()) std::printf("step %lld: validation loss %.6f\n", static_cast<long long>(step), loss);
      if (!o.checkpoint.empty()) save_checkpoint(trainer, o, step, run);
    }
  }
  if (o.steps > first_step && trainer.prints()) {
    std::printf("trained %lld steps in %.1f s: %.0f tokens/s\n", static_cast<long long>(o.steps - first_step), train_seconds,
                tokens_per_step * static_cast<double>(o.steps - first_step) / train_seconds);
  }
  if (o.sample_tokens > 0) {
    const std::string generated = trainer.sample(o.prompt, o.sample_tokens);
    if (trainer.prints()) {
      std::printf("sample (%s, seed %llu):\n", o.top_k == 0 ? "greedy" : ("top-k " + std::to_string(o.top_k)).c_str(),
                  static_cast<unsigned long long>(o.seed));
      // Written as bytes: the model may generate any byte, NUL included.
      const std::string text = o.prompt + generated + "\n";
      std::fwrite(text.data(), 1, text.size(), stdout);
    }
  }
  if (!o.export_dir.empty()) {
    trainer.export_decoder(o.export_dir);
    if (trainer.prints()) std::printf("exported to %s: serve it with flow_serve (serving/README.md)\n", o.export_dir.c_str());
  }
  if (o.parallel) dist::destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Trains a small GPT from scratch on the text of Debian's fortunes package (bytes as tokens) and prints\n"
               "a sample of generated text. Eager by default; --graph compiles each step as an nn::Graph.",
               "gpt_train");
  ex::GptTrainOptions options;
  ex::add_options(app, options);
  if (const auto status = flow::cli::parse(app, argc, argv)) return *status;
  try {
    ex::check_options(options);
  } catch (const flow::Error& e) {
    std::fprintf(stderr, "error: %s\nRun with --help for more information.\n", e.what());
    return 2;
  }
  try {
    return train(options);
  } catch (const flow::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
