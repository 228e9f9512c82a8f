// Generation (models/generation.h, models/decoder.h): GPT-2's cached step against the full forward,
// greedy generation with the KV cache == without it, batches == rows alone, eager == Graph, the
// slot API as a serving loop uses it, seeded sampling, the logits processors on fixed logits,
// stop tokens and every error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "common/test_util.h"
#include "core/grad_mode.h"
#include "core/ops/all.h"
#include "graph/graph.h"
#include "models/decoder.h"
#include "models/generation.h"
#include "models/gpt2.h"

namespace models = flow::models;
using flow::Shape;
using flow::Tensor;
using Tokens = std::vector<std::vector<int64_t>>;

namespace {

constexpr int64_t kVocab = 50;

// 2 layers, 32 wide, vocab 50. Weights drawn wider than GPT-2's 0.02 so that the next-token
// logits are far apart and greedy choices do not hang on rounding.
std::shared_ptr<models::GPT2LMHeadModel> tiny_model(uint64_t seed = 1) {
  flow::manual_seed(seed);
  auto model = std::make_shared<models::GPT2LMHeadModel>(models::GPT2Config()
                                                             .vocab_size(kVocab)
                                                             .n_positions(40)
                                                             .n_embd(32)
                                                             .n_layer(2)
                                                             .n_head(4)
                                                             .dropout(0)
                                                             .initializer_range(0.3));
  model->eval();
  return model;
}

Tokens prompts() { return {{3, 14, 15, 9, 2, 6, 5}, {35}, {8, 9, 7, 9}}; }

// The logits of the last token of `sequence`, from the full forward.
Tensor last_logits(models::GPT2LMHeadModel& model, const std::vector<int64_t>& sequence) {
  const flow::autograd::NoGradGuard no_grad;
  const auto length = static_cast<int64_t>(sequence.size());
  return model.forward(flow::tensor<int64_t>(sequence, Shape{1, length})).select(1, length - 1).select(0, 0);
}

void expect_close(const Tensor& a, const Tensor& b, double tolerance = 1e-4) {
  ASSERT_EQ(a.shape(), b.shape());
  const std::vector<float> x = a.to(flow::kFloat32).contiguous().tolist<float>(), y = b.to(flow::kFloat32).contiguous().tolist<float>();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], y[i], tolerance) << "element " << i;
}

models::PastKeyValues fresh_cache(const models::GPT2LMHeadModel& model, int64_t batch, int64_t max_length) {
  return model.make_cache(batch, max_length)->all();
}

}  // namespace

TEST(Generation, CachedStepsEqualTheFullForward) {
  auto model = tiny_model();
  const flow::autograd::NoGradGuard no_grad;
  flow::manual_seed(5);
  const Tensor ids = flow::randint(0, kVocab, {2, 9});
  const Tensor full = model->forward(ids);
  models::PastKeyValues cache = fresh_cache(*model, 2, 12);
  // A prompt of 5, then one token at a time; logits of every new position.
  const Tensor prompt = model->forward_cached(ids.slice(1, 0, 5), flow::zeros({2}, flow::kInt64), cache).logits;
  expect_close(prompt, full.slice(1, 0, 5));
  for (int64_t t = 5; t < 9; ++t) {
    const Tensor step = model->forward_cached(ids.slice(1, t, t + 1), flow::full({2}, t, flow::kInt64), cache).logits;
    expect_close(step, full.slice(1, t, t + 1));
  }
}

TEST(Generation, FunctionalStepLeavesTheCacheAndEqualsTheInPlaceOne) {
  auto model = tiny_model();
  const flow::autograd::NoGradGuard no_grad;
  const Tensor ids = flow::tensor<int64_t>({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  const Tensor past = flow::tensor<int64_t>({0, 2});
  models::PastKeyValues in_place = fresh_cache(*model, 2, 8), explicit_cache = fresh_cache(*model, 2, 8);
  const auto written = model->forward_cached(ids, past, in_place);
  const auto functional =
      model->forward_cached(ids, past, explicit_cache, models::CachedForwardOptions().update(models::CacheUpdate::kFunctional));
  expect_close(functional.logits, written.logits, 0);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(flow::sum(flow::abs(explicit_cache.keys[i])).item<float>(), 0.f) << "the given cache is not written";
    expect_close(functional.past_key_values.keys[i], in_place.keys[i], 0);
    expect_close(functional.past_key_values.values[i], in_place.values[i], 0);
    EXPECT_EQ(written.past_key_values.keys[i].data_ptr(), in_place.keys[i].data_ptr()) << "kInPlace returns the given tensors";
  }
}

// The step as an export sees it: a Graph whose inputs and outputs are the cache tensors.
struct ExplicitCacheStep : flow::nn::Graph {
  explicit ExplicitCacheStep(std::shared_ptr<models::GPT2LMHeadModel> net) { model = register_module("model", std::move(net)); }
  flow::TensorList build(const flow::TensorList& in) override {
    const models::PastKeyValues past{{in[3], in[5]}, {in[4], in[6]}};
    const auto out = model->forward_cached(
        in[0], in[1], past, models::CachedForwardOptions().input_lengths(in[2]).update(models::CacheUpdate::kFunctional));
    const models::PastKeyValues& next = out.past_key_values;
    return {out.logits, next.keys[0], next.values[0], next.keys[1], next.values[1]};
  }
  std::shared_ptr<models::GPT2LMHeadModel> model;
};

TEST(Generation, FunctionalStepAsAGraphWithTheCacheAsInputsAndOutputs) {
  auto model = tiny_model(2);
  ExplicitCacheStep graph(model);
  graph.eval();
  models::CachedDecoder eager(model, models::CachedDecoderOptions().slots(2).max_length(12));
  flow::TensorList cache;
  for (const Tensor& t : fresh_cache(*model, 2, 12).keys) cache.push_back(t);
  cache = {cache[0], flow::zeros_like(cache[0]), cache[1], flow::zeros_like(cache[1])};
  auto step = [&](const Tokens& tokens, const std::vector<int64_t>& past) {
    const auto width = static_cast<int64_t>(std::max(tokens[0].size(), tokens[1].size()));
    std::vector<int64_t> ids(static_cast<size_t>(2 * width), 0), lengths;
    for (size_t r = 0; r < 2; ++r) {
      std::copy(tokens[r].begin(), tokens[r].end(), ids.begin() + static_cast<std::ptrdiff_t>(r) * width);
      lengths.push_back(static_cast<int64_t>(tokens[r].size()));
    }
    flow::TensorList out = graph(flow::TensorList{flow::tensor<int64_t>(ids, Shape{2, width}), flow::tensor<int64_t>(past),
                                                  flow::tensor<int64_t>(lengths), cache[0], cache[1], cache[2], cache[3]});
    cache = {out[1], out[2], out[3], out[4]};
    return out[0];
  };
  expect_close(step({{5, 6, 7}, {8}}, {0, 0}), eager.prefill({0, 1}, {{5, 6, 7}, {8}}));
  expect_close(step({{9}, {10}}, {3, 1}), eager.decode({0, 1}, {9, 10}));
  expect_close(step({{11}, {12}}, {4, 2}), eager.decode({0, 1}, {11, 12}));
  EXPECT_EQ(graph.num_compiled_plans(), 2);
}

TEST(Generation, RowsWithDifferentPastLengthsInOneStep) {
  auto model = tiny_model();
  const flow::autograd::NoGradGuard no_grad;
  const std::vector<int64_t> a{4, 8, 15, 16, 23}, b{42, 7};
  models::PastKeyValues cache = fresh_cache(*model, 2, 10);
  // Row 0 caches 4 tokens, row 1 one; the padded step gives each row its next token(s).
  model->forward_cached(flow::tensor<int64_t>({4, 8, 15, 16, 42, 0, 0, 0}, Shape{2, 4}), flow::zeros({2}, flow::kInt64), cache,
                        models::CachedForwardOptions().input_lengths(flow::tensor<int64_t>({4, 1})));
  const Tensor logits = model->forward_cached(flow::tensor<int64_t>({23, 7}, Shape{2, 1}), flow::tensor<int64_t>({4, 1}), cache,
                                              models::CachedForwardOptions().input_lengths(flow::tensor<int64_t>({1, 1})))
                            .logits;
  ASSERT_EQ(logits.shape(), (Shape{2, kVocab}));
  expect_close(logits.select(0, 0), last_logits(*model, a));
  expect_close(logits.select(0, 1), last_logits(*model, b));
}

TEST(Generation, GreedyWithTheCacheEqualsRecomputingEachStep) {
  auto model = tiny_model();
  const auto config = models::GenerationConfig().max_new_tokens(14);
  const Tokens cached = models::generate(model, prompts(), config);
  const Tokens recomputed = models::generate(model, prompts(), models::GenerationConfig(config).use_cache(false));
  EXPECT_EQ(cached, recomputed);
  for (const auto& row : cached) EXPECT_EQ(row.size(), 14u);
}

TEST(Generation, BatchEqualsEachRowAlone) {
  auto model = tiny_model(3);
  const auto config = models::GenerationConfig().max_new_tokens(10);
  const Tokens batch = models::generate(model, prompts(), config);
  for (size_t i = 0; i < prompts().size(); ++i) EXPECT_EQ(models::generate(model, {prompts()[i]}, config).at(0), batch[i]) << "row " << i;
}

TEST(Generation, GraphEqualsEagerWithOnePlanForThePromptAndOneForDecoding) {
  auto model = tiny_model(4);
  const auto config = models::GenerationConfig().max_new_tokens(12);
  const Tokens eager = models::generate(model, prompts(), config);
  models::CachedDecoder decoder(model, models::CachedDecoderOptions().slots(3).max_length(24).use_graph(true));
  EXPECT_EQ(models::generate(decoder, prompts(), config), eager);
  EXPECT_EQ(decoder.graph()->num_compiled_plans(), 2);  // prompts padded to 16 tokens, and decode
  EXPECT_EQ(models::generate(decoder, prompts(), config), eager) << "a second call reuses the plans";
  EXPECT_EQ(decoder.graph()->num_compiled_plans(), 2);
  EXPECT_EQ(models::generate(model, prompts(), models::GenerationConfig(config).use_graph(true)), eager);
}

TEST(Generation, SlotsPrefilledAndFreedWhileOthersDecode) {
  for (bool graph : {false, true}) {
    auto model = tiny_model(6);
    models::CachedDecoder decoder(model, models::CachedDecoderOptions().slots(4).max_length(16).use_graph(graph));
    std::vector<std::vector<int64_t>> sequences(4);
    // The logits of a slot's next token must be those of the full forward over what it holds.
    auto check = [&](const std::vector<int64_t>& slots, const Tensor& logits) {
      for (size_t i = 0; i < slots.size(); ++i) {
        expect_close(logits.select(0, static_cast<int64_t>(i)), last_logits(*model, sequences[static_cast<size_t>(slots[i])]));
      }
    };
    auto prefill = [&](const std::vector<int64_t>& slots, const Tokens& tokens) {
      for (size_t i = 0; i < slots.size(); ++i) {
        auto& sequence = sequences[static_cast<size_t>(slots[i])];
        sequence.insert(sequence.end(), tokens[i].begin(), tokens[i].end());
      }
      check(slots, decoder.prefill(slots, tokens));
    };
    auto decode = [&](const std::vector<int64_t>& slots, const std::vector<int64_t>& tokens) {
      for (size_t i = 0; i < slots.size(); ++i) sequences[static_cast<size_t>(slots[i])].push_back(tokens[i]);
      check(slots, decoder.decode(slots, tokens));
    };
    prefill({0}, {{1, 2, 3}});
    decode({0}, {4});
    prefill({2}, {{10, 11, 12, 13, 14}});  // joins while slot 0 is running
    decode({0, 2}, {5, 15});
    decode({2, 0}, {16, 6});  // any order
    decoder.reset(0);
    sequences[0].clear();
    EXPECT_EQ(decoder.length(0), 0);
    prefill({0, 3}, {{20, 21}, {30}});  // a freed slot reused
    decode({0, 2, 3}, {22, 17, 31});
    EXPECT_EQ(decoder.length(2), 8);
    prefill({1}, {std::vector<int64_t>(16, 9)});  // a whole slot, while others hold tokens
    prefill({3}, {std::vector<int64_t>(13, 4)});  // 2 + 13 of 16: a Graph keeps the exact length
    decode({0, 2}, {23, 18});
    EXPECT_THROW_MSG(decoder.decode({1}, {1}), "[decoder] slot 1 holds 16 tokens; 1 more exceed its max_length 16");
  }
}

TEST(Generation, SamplingIsReproducibleFromTheSeedAndDiffersAcrossSeeds) {
  auto model = tiny_model(7);
  const auto config = models::GenerationConfig().max_new_tokens(16).do_sample(true).top_k(0).temperature(2.0);
  const Tokens first = models::generate(model, prompts(), models::GenerationConfig(config).seed(11));
  EXPECT_EQ(models::generate(model, prompts(), models::GenerationConfig(config).seed(11)), first);
  EXPECT_EQ(models::generate(model, prompts(), models::GenerationConfig(config).seed(11).use_graph(true)), first);
  EXPECT_NE(models::generate(model, prompts(), models::GenerationConfig(config).seed(12)), first);
  flow::manual_seed(3);
  const Tokens from_default = models::generate(model, prompts(), config);
  flow::manual_seed(3);
  EXPECT_EQ(models::generate(model, prompts(), config), from_default) << "unseeded: the default generator";
}

TEST(Generation, TemperatureScalesTheLogits) {
  const Tensor logits = flow::tensor<float>({1, 2, 4, -2}, Shape{1, 4});
  EXPECT_EQ(flow::temperature_logits(logits, 2).tolist<float>(), (std::vector<float>{0.5f, 1, 2, -1}));
  // softmax at temperature 0.5 == softmax of the doubled logits
  expect_close(flow::softmax(flow::temperature_logits(logits, 0.5), -1), flow::softmax(flow::mul(logits, 2.0), -1), 1e-7);
}

TEST(Generation, TopKKeepsTheKLargestAndTiesAtTheKth) {
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor logits = flow::tensor<float>({0.5f, 3, -1, 2, 2, 1, /**/ 4, 3, 2, 1, 0, -1}, Shape{2, 6});
  EXPECT_EQ(flow::top_k_logits(logits, 2).tolist<float>(),
            (std::vector<float>{-inf, 3, -inf, 2, 2, -inf, /**/ 4, 3, -inf, -inf, -inf, -inf}));
  EXPECT_EQ(flow::top_k_logits(logits, 1).tolist<float>()[1], 3.f);
  EXPECT_EQ(flow::top_k_logits(logits, 6).tolist<float>(), logits.tolist<float>());
  EXPECT_EQ(flow::top_k_logits(logits, 60).tolist<float>(), logits.tolist<float>());
}

TEST(Generation, TopPKeepsTheSmallestSetReachingP) {
  const float inf = std::numeric_limits<float>::infinity();
  // Probabilities 0.5, 0.25, 0.125, 0.0625, 0.0625 (in a shuffled order).
  const Tensor logits = flow::log(flow::tensor<float>({0.125f, 0.5f, 0.0625f, 0.25f, 0.0625f}, Shape{1, 5}));
  auto kept = [&](double p, int64_t min_keep = 1) {
    std::vector<int> out;
    for (float v : flow::top_p_logits(logits, p, min_keep).tolist<float>()) out.push_back(v == -inf ? 0 : 1);
    return out;
  };
  EXPECT_EQ(kept(0.4), (std::vector<int>{0, 1, 0, 0, 0}));   // 0.5 reaches 0.4
  EXPECT_EQ(kept(0.6), (std::vector<int>{0, 1, 0, 1, 0}));   // 0.5 < 0.6 <= 0.75
  EXPECT_EQ(kept(0.8), (std::vector<int>{1, 1, 0, 1, 0}));   // 0.75 < 0.8 <= 0.875
  EXPECT_EQ(kept(0.1, 3), (std::vector<int>{1, 1, 0, 1, 0})); // min_tokens_to_keep
  EXPECT_EQ(kept(1.0), (std::vector<int>{1, 1, 1, 1, 1}));
  // The kept logits are unchanged: their softmax renormalises 0.5 and 0.25 to 2/3 and 1/3.
  const std::vector<float> probs = flow::softmax(flow::top_p_logits(logits, 0.6), -1).tolist<float>();
  EXPECT_NEAR(probs[1], 2.0 / 3.0, 1e-6);
  EXPECT_NEAR(probs[3], 1.0 / 3.0, 1e-6);
  EXPECT_EQ(probs[0] + probs[2] + probs[4], 0.f);
}

TEST(Generation, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogitsOfSeenTokens) {
  const Tensor logits = flow::tensor<float>({2, -2, 1, 4, /**/ 2, -2, 1, 4}, Shape{2, 4});
  const Tensor out = flow::repetition_penalty_logits(logits, {{0, 1, 0}, {}}, 2.0);
  EXPECT_EQ(out.tolist<float>(), (std::vector<float>{1, -4, 1, 4, /**/ 2, -2, 1, 4}));
  // Greedy generation never repeats a token under a huge penalty (the tiny model's logits have
  // both signs, so a seen token always falls below an unseen positive one).
  auto model = tiny_model(8);
  const Tokens generated = models::generate(model, {{1}}, models::GenerationConfig().max_new_tokens(12).repetition_penalty(1e6));
  std::vector<int64_t> all{1};
  all.insert(all.end(), generated[0].begin(), generated[0].end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "a token repeated";
}

TEST(Generation, StopTokensEndTheirRow) {
  auto model = tiny_model(9);
  const Tokens free_run = models::generate(model, prompts(), models::GenerationConfig().max_new_tokens(10));
  // Stop on row 0's fourth token: row 0 ends there (the token kept), the others where they first
  // meet it or any other stop token, or after 10.
  const int64_t stop = free_run[0][3];
  const Tokens stopped = models::generate(model, prompts(), models::GenerationConfig().max_new_tokens(10).eos_token_id({49, stop}));
  for (size_t i = 0; i < free_run.size(); ++i) {
    size_t end = 0;
    while (end < free_run[i].size() && free_run[i][end] != stop && free_run[i][end] != 49) ++end;
    const std::vector<int64_t> expected(free_run[i].begin(), free_run[i].begin() + static_cast<std::ptrdiff_t>(std::min(end + 1, free_run[i].size())));
    EXPECT_EQ(stopped[i], expected) << "row " << i;
  }
  EXPECT_LE(stopped[0].size(), 4u);
  // The tensor form pads the rows that ended early.
  const Tensor ids = flow::tensor<int64_t>({3, 14, 15, 9, 8, 9, 7, 9}, Shape{2, 4});
  const Tensor out = models::generate(model, ids, models::GenerationConfig().max_new_tokens(10).eos_token_id(stop).pad_token_id(0));
  EXPECT_EQ(out.size(0), 2);
  EXPECT_EQ(out.slice(1, 0, 4).tolist<int64_t>(), ids.tolist<int64_t>());
}

TEST(Generation, ErrorsNameGenerate) {
  auto model = tiny_model();
  const auto config = models::GenerationConfig().max_new_tokens(4);
  EXPECT_THROW_MSG(models::generate(model, Tokens{}, config), "[generate] no prompts were given");
  EXPECT_THROW_MSG(models::generate(model, {{1}, {}}, config), "[generate] prompt 1 is empty");
  EXPECT_THROW_MSG(models::generate(model, {{1, 50}}, config), "[generate] token id 50 in prompt 0 is outside the vocabulary [0, 50)");
  EXPECT_THROW_MSG(models::generate(model, {{-1}}, config), "[generate] token id -1 in prompt 0");
  EXPECT_THROW_MSG(models::generate(model, {std::vector<int64_t>(38, 1)}, config),
                   "[generate] prompt 0 has 38 tokens; with max_new_tokens 4 that is 42, more than the model's n_positions 40");
  EXPECT_THROW_MSG(models::generate(model, {{1}}, models::GenerationConfig().max_new_tokens(-1)), "[generate] max_new_tokens must be >= 0, got -1");
  EXPECT_THROW_MSG(models::generate(model, {{1}}, models::GenerationConfig().temperature(0)), "[generate] temperature must be a positive number");
  EXPECT_THROW_MSG(models::generate(model, {{1}}, models::GenerationConfig().top_p(0)), "[generate] top_p must be in (0, 1], got 0");
  EXPECT_THROW_MSG(models::generate(model, {{1}}, models::GenerationConfig().top_p(1.5)), "[generate] top_p must be in (0, 1], got 1.5");
  EXPECT_THROW_MSG(models::generate(model, {{1}}, models::GenerationConfig().top_k(-2)), "[generate] top_k must be >= 0");
  EXPECT_THROW_MSG(models::generate(model, {{1}}, models::GenerationConfig().repetition_penalty(0)), "[generate] repetition_penalty must be a positive number");
  EXPECT_THROW_MSG(models::generate(model, {{1}}, models::GenerationConfig().eos_token_id(50)), "[generate] eos_token_id 50 is outside the vocabulary");
  EXPECT_THROW_MSG(models::generate(model, {{1}}, models::GenerationConfig().use_cache(false).use_graph(true)), "[generate] use_graph");
  models::CachedDecoder decoder(model, models::CachedDecoderOptions().slots(1).max_length(8));
  EXPECT_THROW_MSG(models::generate(decoder, {{1}, {2}}, config), "[generate] 2 prompts but the decoder has 1 slots");
  EXPECT_THROW_MSG(models::generate(decoder, {{1, 2, 3, 4, 5}}, config), "more than the decoder's max_length 8");
  EXPECT_THROW_MSG(models::generate(model, flow::tensor<int64_t>({1, 2}, Shape{2, 1}),
                                    models::GenerationConfig().max_new_tokens(5).eos_token_id(models::generate(model, {{1}}, config)[0][0])),
                   "pad_token_id must be set");
  EXPECT_EQ(models::generate(model, {{1}}, models::GenerationConfig().max_new_tokens(0)), Tokens{{}});
  EXPECT_THROW_MSG(flow::top_k_logits(flow::zeros({3}), 1), "[top_k_logits] expects floating-point logits of shape (batch, vocab)");
  EXPECT_THROW_MSG(flow::top_p_logits(flow::zeros({1, 3}), 0), "[top_p_logits] top_p must be in (0, 1]");
  EXPECT_THROW_MSG(flow::repetition_penalty_logits(flow::zeros({2, 3}), {{1}}, 1.5), "[repetition_penalty_logits] needs one token sequence per row");
  // The one check generate() and flow_serve share.
  EXPECT_EQ(flow::sampling_options_error(flow::SamplingOptions{}), std::nullopt);
  auto with = [](auto change) {
    flow::SamplingOptions options;
    change(options);
    return flow::sampling_options_error(options).value_or("");
  };
  EXPECT_EQ(with([](flow::SamplingOptions& o) { o.temperature = std::numeric_limits<double>::infinity(); }),
            "temperature must be a positive number, got inf");
  EXPECT_EQ(with([](flow::SamplingOptions& o) { o.top_k = -1; }), "top_k must be >= 0 (0: no top-k filtering), got -1");
  EXPECT_EQ(with([](flow::SamplingOptions& o) { o.top_p = std::nan(""); }), "top_p must be in (0, 1], got nan");
  EXPECT_EQ(with([](flow::SamplingOptions& o) { o.repetition_penalty = -2; }), "repetition_penalty must be a positive number, got -2");
}

TEST(Generation, DecoderErrors) {
  auto model = tiny_model();
  EXPECT_THROW_MSG(models::CachedDecoder(model, models::CachedDecoderOptions().max_length(41)), "[decoder] max_length must be in [1, n_positions = 40]");
  EXPECT_THROW_MSG(models::CachedDecoder(model, models::CachedDecoderOptions().slots(0)), "[decoder] slots must be positive");
  models::CachedDecoder decoder(model, models::CachedDecoderOptions().slots(2).max_length(8));
  EXPECT_THROW_MSG(decoder.prefill({2}, {{1}}), "[decoder] prefill: slot 2 is not in [0, 2)");
  EXPECT_THROW_MSG(decoder.prefill({0, 0}, {{1}, {2}}), "[decoder] slot 0 is given twice");
  EXPECT_THROW_MSG(decoder.prefill({0}, {{}}), "[decoder] slot 0 was given no tokens");
  EXPECT_THROW_MSG(decoder.prefill({0}, {{1}, {2}}), "[decoder] 1 slots but 2 token lists");
  EXPECT_THROW_MSG(decoder.decode({1}, {kVocab}), "[decoder] token id 50 for slot 1 is outside the vocabulary [0, 50)");
  EXPECT_THROW_MSG(decoder.prefill({0}, {std::vector<int64_t>(9, 1)}), "[decoder] slot 0 holds 0 tokens; 9 more exceed its max_length 8");
  const models::PastKeyValues small = model->make_cache(2, 4)->all();
  EXPECT_THROW_MSG(model->forward_cached(flow::zeros({2, 5}, flow::kInt64), flow::zeros({2}, flow::kInt64), small),
                   "[gpt2] a cached step takes 1 to 4 tokens per row, got 5");
  EXPECT_THROW_MSG(model->forward_cached(flow::zeros({2, 1}, flow::kInt64), flow::zeros({3}, flow::kInt64), small),
                   "[gpt2] past_lengths must be int64 of shape (2)");
}
