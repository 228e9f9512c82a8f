#pragma once
// Choosing a language model's next tokens from its logits, as Hugging Face's generate() does:
// the logits processors (each a pure function over (B, vocab) floating-point logits; filtered
// tokens get -inf) and the choice itself. Used by flow::models::generate and by flow_serve's
// decoder models, so both pick the same tokens from the same logits and seed.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"

namespace flow {

// Logits processors over (B, vocab) float logits, each a pure function (Hugging Face's warpers
// and processors); filtered tokens get -inf.
// logits / temperature (temperature > 0).
Tensor temperature_logits(const Tensor& logits, double temperature);
// Keeps each row's k largest logits and any equal to the k-th (k >= 1; k >= vocab keeps all).
Tensor top_k_logits(const Tensor& logits, int64_t top_k);
// Keeps each row's likeliest tokens, in order, until their softmax mass reaches top_p (a token
// is kept when the mass of the tokens before it is below top_p); at least min_tokens_to_keep.
Tensor top_p_logits(const Tensor& logits, double top_p, int64_t min_tokens_to_keep = 1);
// Each token that occurs in sequences[b] (any number of times): row b's logit divided by penalty
// when positive, multiplied when negative (CTRL's penalty, as Hugging Face applies it).
Tensor repetition_penalty_logits(const Tensor& logits, const std::vector<std::vector<int64_t>>& sequences, double penalty);

struct SamplingOptions {
  bool do_sample = false;  // false: greedy (argmax, the first of equal logits)
  double temperature = 1.0;
  int64_t top_k = 0;  // 0: no top-k filtering
  double top_p = 1.0;
  double repetition_penalty = 1.0;
};

// What is wrong with options (the first problem, worded for the user), or nullopt when they are
// valid; flow::models::generate and flow_serve's request checks both report it.
std::optional<std::string> sampling_options_error(const SamplingOptions& options);

// One token per row of logits (B, vocab), int64 (B): the repetition penalty over sequences[b]
// (the row's tokens so far), then greedy, or temperature, top-k, top-p and one draw per row from
// `generator` (null: the default generator).
Tensor next_tokens(Tensor logits, const SamplingOptions& options, const std::vector<std::vector<int64_t>>& sequences, Generator* generator);

}  // namespace flow
