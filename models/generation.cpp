#include "models/generation.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/grad_mode.h"
#include "core/ops/all.h"

namespace flow::models {
namespace {

SamplingOptions sampling_options(const GenerationConfig& c) {
  SamplingOptions options;
  options.do_sample = c.do_sample_;
  options.temperature = c.temperature_;
  options.top_k = c.top_k_;
  options.top_p = c.top_p_;
  options.repetition_penalty = c.repetition_penalty_;
  return options;
}

void check_config(const GenerationConfig& c, int64_t vocab) {
  if (c.max_new_tokens_ < 0) fail("generate", "max_new_tokens must be >= 0, got ", c.max_new_tokens_);
  if (const auto error = sampling_options_error(sampling_options(c))) fail("generate", *error);
  for (int64_t id : c.eos_token_id_) {
    if (id < 0 || id >= vocab) fail("generate", "eos_token_id ", id, " is outside the vocabulary [0, ", vocab, ")");
  }
  if (c.pad_token_id_ && (*c.pad_token_id_ < 0 || *c.pad_token_id_ >= vocab)) {
    fail("generate", "pad_token_id ", *c.pad_token_id_, " is outside the vocabulary [0, ", vocab, ")");
  }
}

void check_prompts(const std::vector<std::vector<int64_t>>& prompts, const GenerationConfig& c, int64_t vocab, int64_t max_length,
                   const char* limit) {
  if (prompts.empty()) fail("generate", "no prompts were given");
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) fail("generate", "prompt ", i, " is empty");
    for (int64_t id : prompts[i]) {
      if (id < 0 || id >= vocab) fail("generate", "token id ", id, " in prompt ", i, " is outside the vocabulary [0, ", vocab, ")");
    }
    const auto total = static_cast<int64_t>(prompts[i].size()) + c.max_new_tokens_;
    if (total > max_length) {
      fail("generate", "prompt ", i, " has ", prompts[i].size(), " tokens; with max_new_tokens ", c.max_new_tokens_, " that is ", total,
           ", more than the ", limit, " ", max_length);
    }
  }
}

// The next token of each row from its logits (rows, vocab): Hugging Face's processors, then
// argmax or a draw (core/sampling.h).
std::vector<int64_t> choose(const Tensor& logits, const std::vector<std::vector<int64_t>>& sequences, const GenerationConfig& c,
                            Generator* generator) {
  return next_tokens(logits, sampling_options(c), sequences, generator).to(kCPU).tolist<int64_t>();
}

bool stops(int64_t token, const GenerationConfig& c) {
  return std::find(c.eos_token_id_.begin(), c.eos_token_id_.end(), token) != c.eos_token_id_.end();
}

// The loop shared by both paths: next(rows) gives the logits of the listed rows' next tokens after
// what they hold so far (rows in ascending order; they grow by the token chosen for them).
template <typename Next>
std::vector<std::vector<int64_t>> generation_loop(const std::vector<std::vector<int64_t>>& prompts, const GenerationConfig& c,
                                                  Next&& next) {
  const size_t batch = prompts.size();
  std::vector<std::vector<int64_t>> generated(batch), sequences = prompts;
  if (c.max_new_tokens_ == 0) return generated;
  std::optional<Generator> own;
  if (c.seed_) own.emplace(*c.seed_);
  Generator* generator = own ? &*own : &default_generator();
  std::vector<int64_t> active(batch);
  for (size_t i = 0; i < batch; ++i) active[i] = static_cast<int64_t>(i);
  Tensor logits = next(active, std::vector<int64_t>());
  while (true) {
    std::vector<std::vector<int64_t>> histories;
    for (int64_t row : active) histories.push_back(sequences[static_cast<size_t>(row)]);
    const std::vector<int64_t> tokens = choose(logits, histories, c, generator);
    std::vector<int64_t> still, fed;
    for (size_t i = 0; i < active.size(); ++i) {
      const auto row = static_cast<size_t>(active[i]);
      generated[row].push_back(tokens[i]);
      sequences[row].push_back(tokens[i]);
      if (stops(tokens[i], c) || static_cast<int64_t>(generated[row].size()) == c.max_new_tokens_) continue;
      still.push_back(active[i]);
      fed.push_back(tokens[i]);
    }
    if (still.empty()) return generated;
    active = std::move(still);
    logits = next(active, fed);
  }
}

}  // namespace

std::vector<std::vector<int64_t>> generate(CachedDecoder& decoder, const std::vector<std::vector<int64_t>>& input_ids,
                                           const GenerationConfig& config) {
  const int64_t vocab = decoder.model().transformer->config().vocab_size_;
  check_config(config, vocab);
  check_prompts(input_ids, config, vocab, decoder.max_length(), "decoder's max_length");
  const auto batch = static_cast<int64_t>(input_ids.size());
  if (batch > decoder.num_slots()) fail("generate", batch, " prompts but the decoder has ", decoder.num_slots(), " slots");
  for (int64_t slot = 0; slot < batch; ++slot) decoder.reset(slot);
  return generation_loop(input_ids, config, [&](const std::vector<int64_t>& rows, const std::vector<int64_t>& tokens) {
    if (tokens.empty()) return decoder.prefill(rows, input_ids);
    return decoder.decode(rows, tokens);
  });
}

std::vector<std::vector<int64_t>> generate(const std::shared_ptr<GPT2LMHeadModel>& model, const std::vector<std::vector<int64_t>>& input_ids,
                                           const GenerationConfig& config) {
  if (!model) fail("generate", "no model");
  const GPT2Config& gpt = model->transformer->config();
  check_config(config, gpt.vocab_size_);
  check_prompts(input_ids, config, gpt.vocab_size_, gpt.n_positions_, "model's n_positions");
  if (config.use_cache_) {
    int64_t longest = 0;
    for (const auto& prompt : input_ids) longest = std::max(longest, static_cast<int64_t>(prompt.size()) + config.max_new_tokens_);
    CachedDecoder decoder(model, CachedDecoderOptions()
                                     .slots(static_cast<int64_t>(input_ids.size()))
                                     .max_length(std::max<int64_t>(longest, 1))
                                     .use_graph(config.use_graph_));
    return generate(decoder, input_ids, config);
  }
  if (config.use_graph_) fail("generate", "use_graph runs the KV-cache steps as a Graph; it needs use_cache");
  // No cache: each step runs the whole of every active sequence, right-padded to the longest
  // (causal attention: a token never sees the padding after it).
  std::vector<std::vector<int64_t>> sequences = input_ids;
  const autograd::NoGradGuard no_grad;
  const TensorOptions on = TensorOptions(kInt64).device(model->transformer->wte->weight.device());
  return generation_loop(input_ids, config, [&](const std::vector<int64_t>& rows, const std::vector<int64_t>& tokens) {
    for (size_t i = 0; i < tokens.size(); ++i) sequences[static_cast<size_t>(rows[i])].push_back(tokens[i]);
    size_t length = 0;
    for (int64_t row : rows) length = std::max(length, sequences[static_cast<size_t>(row)].size());
    std::vector<int64_t> ids(rows.size() * length, 0), last;
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto& sequence = sequences[static_cast<size_t>(rows[i])];
      std::copy(sequence.begin(), sequence.end(), ids.begin() + static_cast<std::ptrdiff_t>(i * length));
      last.push_back(static_cast<int64_t>(sequence.size()) - 1);
    }
    const auto count = static_cast<int64_t>(rows.size());
    const Tensor logits = model->forward(tensor<int64_t>(ids, Shape{count, static_cast<int64_t>(length)}, on));
    const Tensor at = tensor<int64_t>(last, Shape{count, 1, 1}, on).expand({count, 1, logits.size(2)});
    return gather(logits, 1, at).reshape({count, logits.size(2)});
  });
}

Tensor generate(const std::shared_ptr<GPT2LMHeadModel>& model, const Tensor& input_ids, const GenerationConfig& config) {
  if (input_ids.dim() != 2 || input_ids.dtype() != kInt64) {
    fail("generate", "input_ids must be int64 (batch, sequence), got ", dtype_name(input_ids.dtype()), " ", input_ids.shape());
  }
  const int64_t batch = input_ids.size(0), length = input_ids.size(1);
  const std::vector<int64_t> flat = input_ids.to(kCPU).contiguous().tolist<int64_t>();
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t b = 0; b < batch; ++b) prompts.emplace_back(flat.begin() + b * length, flat.begin() + (b + 1) * length);
  const std::vector<std::vector<int64_t>> generated = generate(model, prompts, config);
  size_t most = 0;
  for (const auto& row : generated) most = std::max(most, row.size());
  std::vector<int64_t> out;
  for (int64_t b = 0; b < batch; ++b) {
    const auto& row = generated[static_cast<size_t>(b)];
    if (row.size() < most && !config.pad_token_id_) {
      fail("generate", "row ", b, " ended after ", row.size(), " of ", most, " tokens; pad_token_id must be set to pad it");
    }
    out.insert(out.end(), prompts[static_cast<size_t>(b)].begin(), prompts[static_cast<size_t>(b)].end());
    out.insert(out.end(), row.begin(), row.end());
    out.insert(out.end(), most - row.size(), config.pad_token_id_.value_or(0));
  }
  return tensor<int64_t>(out, Shape{batch, length + static_cast<int64_t>(most)}, TensorOptions(kInt64).device(input_ids.device()));
}

}  // namespace flow::models
