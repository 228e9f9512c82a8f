#pragma once
// gpt_train's command line. Range checks happen while parsing (exit status 2 naming the flag);
// check_options rejects combinations that no single flag's check can see.
#include <cstdint>
#include <optional>
#include <string>

#include "cli/cli.h"
#include "core/error.h"
#include "examples/gpt_train/text_data.h"

namespace flow::examples {

struct GptTrainOptions {
  std::string data = kFortunesDir;
  double validation_fraction = 0.1;  // the end of the text
  int64_t steps = 400;               // total optimizer steps, counting those before a --resume
  int64_t batch_size = 8;            // sequences per step (per rank with --parallel)
  int64_t block_size = 128;          // tokens of context
  int64_t layers = 4, heads = 4, width = 256;
  double dropout = 0;
  double lr = 1e-3;  // AdamW, constant
  uint64_t seed = 0;
  bool graph = false;
  bool amp = false;
  bool checkpointing = false;  // activation checkpointing of every block
  std::optional<double> clip_grad;  // max total gradient norm
  bool parallel = false;
  int64_t log_every = 20, eval_every = 100, eval_windows = 64;
  std::string checkpoint;  // directory
  bool resume = false;
  int64_t sample_tokens = 200;
  std::string prompt = "The ";
  int64_t top_k = 10;  // 0: greedy
  std::string export_dir;  // the trained model, exported for flow_serve
};

inline void add_options(CLI::App& app, GptTrainOptions& o) {
  using flow::cli::at_least;
  using flow::cli::positive;
  app.add_option("--data", o.data, "a text file, or a directory whose files are read in sorted order (*.dat, *.u8 skipped)")
      ->capture_default_str();
  app.add_option("--validation-fraction", o.validation_fraction, "the share of the text, at its end, kept for validation")
      ->check(positive(0.5))
      ->capture_default_str();
  app.add_option("--steps", o.steps, "optimizer steps in all (a resumed run continues up to this step)")
      ->check(at_least<int64_t>(0))
      ->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "sequences per step (per rank with --parallel)")->check(at_least<int64_t>(1))->capture_default_str();
  app.add_option("--block-size", o.block_size, "tokens of context per sequence")->check(at_least<int64_t>(2))->capture_default_str();
  app.add_option("--layers", o.layers, "transformer blocks")->check(at_least<int64_t>(1))->capture_default_str();
  app.add_option("--heads", o.heads, "attention heads (must divide --width)")->check(at_least<int64_t>(1))->capture_default_str();
  app.add_option("--width", o.width, "embedding width (n_embd)")->check(at_least<int64_t>(1))->capture_default_str();
  app.add_option("--dropout", o.dropout, "dropout probability of the embeddings, attention and residual branches")
      ->check(CLI::Range(0.0, 0.99))
      ->capture_default_str();
  app.add_option("--lr", o.lr, "AdamW learning rate")->check(positive(1.0))->capture_default_str();
  app.add_option("--seed", o.seed, "seeds the initial weights, the batches, dropout and the sample")->capture_default_str();
  app.add_flag("--graph", o.graph, "train with a compiled nn::Graph instead of eagerly");
  app.add_flag("--amp", o.amp, "bfloat16 autocast (eager) or config().enable_amp() (Graph); float32 master weights");
  app.add_flag("--checkpointing", o.checkpointing,
               "activation checkpointing: each transformer block's activations are recomputed for backward instead of kept "
               "(eager: gradient_checkpointing_enable(); Graph: config().set_activation_checkpointing per block)");
  app.add_option("--clip-grad", o.clip_grad, "clip the gradients' total 2-norm to this before each update")->check(positive());
  app.add_flag("--parallel", o.parallel, "data parallel over the ranks of flow_run: DistributedDataParallel, or with --graph the Graph's own");
  app.add_option("--log-every", o.log_every, "print the mean training loss every this many steps")->check(at_least<int64_t>(1))->capture_default_str();
  app.add_option("--eval-every", o.eval_every, "print the validation loss every this many steps (and after the last one); 0: only then")
      ->check(at_least<int64_t>(0))
      ->capture_default_str();
  app.add_option("--eval-windows", o.eval_windows, "validation windows of --block-size tokens, evenly spaced over the validation text")
      ->check(at_least<int64_t>(1))
      ->capture_default_str();
  app.add_option("--checkpoint", o.checkpoint, "a directory: the state is saved there at each evaluation and at the end");
  app.add_flag("--resume", o.resume, "continue from the state in --checkpoint (bit-identical to a run that never stopped)");
  app.add_option("--sample-tokens", o.sample_tokens, "bytes to generate after training (0: none)")->check(at_least<int64_t>(0))->capture_default_str();
  app.add_option("--prompt", o.prompt, "the text generation continues")->capture_default_str();
  app.add_option("--top-k", o.top_k, "sample among the k likeliest next bytes (seeded by --seed); 0: greedy")
      ->check(CLI::Range(int64_t{0}, kByteVocabulary))
      ->capture_default_str();
  app.add_option("--export", o.export_dir,
                 "a directory: after training, the model is exported there as a decoder flow_serve serves (models/decoder_export.h, "
                 "byte tokens)");
}

// Throws flow::Error("[gpt_train] ...") for options that are valid alone but not together.
inline void check_options(const GptTrainOptions& o) {
  if (o.width % o.heads != 0) fail("gpt_train", "--width ", o.width, " must be divisible by --heads ", o.heads);
  if (o.resume && o.checkpoint.empty()) fail("gpt_train", "--resume needs --checkpoint DIR (where the state was saved)");
  if (o.sample_tokens > 0 && o.prompt.empty()) fail("gpt_train", "--prompt must not be empty when --sample-tokens is above 0");
}

}  // namespace flow::examples
