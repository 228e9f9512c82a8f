// flow::models::GPT2: GPT-2 small's parameter count and Hugging Face's state names and shapes, then
// a tiny configuration for shapes, causality, the loss, Graph inference and training against eager,
// and the gradient checker on attention and a block in float64.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/gradcheck.h"
#include "common/graphs.h"
#include "common/language_model_graph.h"
#include "common/test_util.h"
#include "core/autocast.h"
#include "core/grad_mode.h"
#include "core/ops/all.h"
#include "graph/graph.h"
#include "models/gpt2.h"
#include "optim/optimizer.h"

namespace models = flow::models;
using flow::Shape;
using flow::Tensor;
using flow::TensorList;

namespace {

// Small enough for the sanitizer build; every dimension still differs from the others.
models::GPT2Config tiny_config() { return models::GPT2Config().vocab_size(64).n_positions(16).n_embd(32).n_layer(2).n_head(4); }

Tensor token_ids(const Shape& shape, uint64_t seed) {
  flow::manual_seed(seed);
  return flow::randint(0, 64, shape);
}

Tensor eval_logits(models::GPT2LMHeadModel& model, const Tensor& ids) {
  flow::autograd::NoGradGuard no_grad;
  return model.forward(ids);
}

}  // namespace

// GPT-2 small is built once (about 500 MB of float32 parameters) and checked against Hugging Face's
// GPT2LMHeadModel: 124,439,808 parameters with the head tied to wte, and its names.
TEST(GPT2, SmallHasHuggingFaceParameterCountAndNames) {
  const models::GPT2LMHeadModel model;
  int64_t count = 0;
  for (const auto& [name, parameter] : model.named_parameters()) count += parameter.numel();
  EXPECT_EQ(count, 124439808);

  const flow::StateDict state = model.state_dict();
  // wte and wpe, 12 tensors per block, ln_f: no buffers (the causal mask is built by ops) and no
  // lm_head.weight (tied to wte).
  EXPECT_EQ(state.size(), 2u + 12u * 12u + 2u);
  const std::vector<std::pair<std::string, Shape>> expected{
      {"transformer.wte.weight", {50257, 768}},
      {"transformer.wpe.weight", {1024, 768}},
      {"transformer.h.0.ln_1.weight", {768}},
      {"transformer.h.0.ln_1.bias", {768}},
      {"transformer.h.0.attn.c_attn.weight", {768, 2304}},
      {"transformer.h.0.attn.c_attn.bias", {2304}},
      {"transformer.h.0.attn.c_proj.weight", {768, 768}},
      {"transformer.h.0.attn.c_proj.bias", {768}},
      {"transformer.h.0.ln_2.weight", {768}},
      {"transformer.h.0.mlp.c_fc.weight", {768, 3072}},
      {"transformer.h.0.mlp.c_fc.bias", {3072}},
      {"transformer.h.0.mlp.c_proj.weight", {3072, 768}},
      {"transformer.h.11.mlp.c_proj.bias", {768}},
      {"transformer.ln_f.weight", {768}},
      {"transformer.ln_f.bias", {768}},
  };
  for (const auto& [name, shape] : expected) {
    ASSERT_TRUE(state.contains(name)) << name;
    EXPECT_EQ(state.at(name).shape(), shape) << name;
  }
  EXPECT_EQ(state.keys().front(), "transformer.wte.weight");
  EXPECT_EQ(state.keys().back(), "transformer.ln_f.bias");
}

TEST(GPT2, PrintsLikeHuggingFace) {
  const models::GPT2LMHeadModel model(tiny_config());
  std::ostringstream text;
  text << model;
  for (const char* part :
       {"GPT2LMHeadModel(", "(transformer): GPT2Model(", "(wte): Embedding(64, 32)", "(h): ModuleList(", "(0): GPT2Block(",
        "(attn): GPT2Attention(", "(c_attn): Conv1D(nf=96, nx=32)", "(c_proj): Conv1D(nf=32, nx=128)", "(act): GELU(approximate='tanh')"}) {
    EXPECT_NE(text.str().find(part), std::string::npos) << part << "\n" << text.str();
  }
}

TEST(GPT2, LogitsHaveVocabularyShapeAndRejectLongSequences) {
  models::GPT2LMHeadModel model(tiny_config());
  model.eval();
  EXPECT_EQ(eval_logits(model, token_ids({3, 5}, 1)).shape(), (Shape{3, 5, 64}));
  EXPECT_EQ(eval_logits(model, token_ids({2, 16}, 2)).shape(), (Shape{2, 16, 64}));
  EXPECT_THROW_MSG(model.forward(token_ids({1, 17}, 3)), "[gpt2] sequence length 17 exceeds n_positions 16");
  EXPECT_THROW_MSG(model.forward(token_ids({6}, 4)), "[gpt2] input_ids must be (batch, sequence)");
  EXPECT_THROW_MSG(models::GPT2Model(tiny_config().n_head(5)), "[gpt2] n_embd 32 must be divisible by n_head 5");
}

TEST(GPT2, EarlierLogitsDoNotSeeLaterTokens) {
  models::GPT2LMHeadModel model(tiny_config());
  model.eval();
  const Tensor ids = token_ids({2, 8}, 5);
  Tensor changed = ids.clone();
  changed.data_ptr<int64_t>()[5] = (ids.data_ptr<int64_t>()[5] + 1) % 64;    // sequence 0, position 5
  changed.data_ptr<int64_t>()[15] = (ids.data_ptr<int64_t>()[15] + 7) % 64;  // sequence 1, position 7
  const Tensor before = eval_logits(model, ids), after = eval_logits(model, changed);
  EXPECT_TRUE(flow::allclose(before.select(0, 0).slice(0, 0, 5), after.select(0, 0).slice(0, 0, 5), 0, 0));
  EXPECT_TRUE(flow::allclose(before.select(0, 1).slice(0, 0, 7), after.select(0, 1).slice(0, 0, 7), 0, 0));
  EXPECT_FALSE(flow::allclose(before.select(0, 0).slice(0, 5, 8), after.select(0, 0).slice(0, 5, 8)));
}

TEST(GPT2, LossIsShiftedNextTokenCrossEntropy) {
  models::GPT2LMHeadModel model(tiny_config());
  model.eval();
  const Tensor ids = token_ids({2, 6}, 6);
  Tensor labels = ids.clone();
  labels.data_ptr<int64_t>()[3] = -100;  // ignored, like Hugging Face's padding label
  const Tensor logits = eval_logits(model, ids);
  const auto log_probabilities = flow::log_softmax(logits, -1).tolist<double>();
  const auto label_values = labels.tolist<int64_t>();
  double total = 0;
  int counted = 0;
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t t = 0; t + 1 < 6; ++t) {
      const int64_t label = label_values[b * 6 + t + 1];
      if (label == -100) continue;
      total -= log_probabilities[(b * 6 + t) * 64 + label];
      ++counted;
    }
  }
  EXPECT_EQ(counted, 9);
  flow::autograd::NoGradGuard no_grad;
  EXPECT_NEAR(model.loss(ids, labels).item<double>(), total / counted, 1e-5);
  EXPECT_THROW_MSG(models::causal_lm_loss(logits, labels.slice(1, 0, 5)), "[gpt2] causal_lm_loss expects logits (B, T, V)");
}

TEST(GPT2, GraphInferenceMatchesEager) {
  auto model = std::make_shared<models::GPT2LMHeadModel>(tiny_config());
  model->eval();
  test_graphs::PredictGraph graph(model);
  for (uint64_t k = 0; k < 2; ++k) {
    const Tensor ids = token_ids({2, 12}, 10 + k);
    const Tensor lazy = graph(ids).at(0);
    EXPECT_TRUE(flow::allclose(lazy, eval_logits(*model, ids), 1e-5, 1e-6));
  }
  EXPECT_TRUE(graph.is_compiled());
}

// Dropout off, so that the eager and Graph steps see the same network.
TEST(GPT2, GraphTrainingStepsMatchEager) {
  const models::GPT2Config config = tiny_config().dropout(0.0);
  auto eager_model = std::make_shared<models::GPT2LMHeadModel>(config);
  auto graph_model = std::make_shared<models::GPT2LMHeadModel>(config);
  graph_model->load_state_dict(eager_model->state_dict());
  const auto options = flow::optim::AdamWOptions(1e-2).weight_decay(0.01);
  flow::optim::AdamW eager_opt(eager_model->parameters(), options);
  test_graphs::LanguageModelTrainGraph graph(graph_model, std::make_shared<flow::optim::AdamW>(graph_model->parameters(), options));
  for (uint64_t k = 0; k < 3; ++k) {
    const Tensor ids = token_ids({4, 10}, 20 + k);
    eager_opt.zero_grad();
    Tensor eager_loss = eager_model->loss(ids, ids);
    eager_loss.backward();
    eager_opt.step();
    const Tensor graph_loss = graph(ids, ids).at(0);
    EXPECT_NEAR(graph_loss.item<double>(), eager_loss.item<double>(), 1e-5) << "step " << k;
  }
  EXPECT_EQ(graph.train_step(), 3);
  const auto eager_parameters = eager_model->named_parameters(), graph_parameters = graph_model->named_parameters();
  ASSERT_EQ(eager_parameters.size(), graph_parameters.size());
  for (size_t i = 0; i < eager_parameters.size(); ++i) {
    EXPECT_TRUE(flow::allclose(graph_parameters[i].second, eager_parameters[i].second, 1e-4, 1e-6)) << eager_parameters[i].first;
  }
}

// bfloat16 autocast through embeddings, attention, layer norm and GELU: the AMP Graph computes
// what eager autocast computes, the parameters stay float32, and training still lowers the loss.
TEST(GPT2, MixedPrecisionGraphTrainingMatchesEagerAutocast) {
  const models::GPT2Config config = tiny_config().dropout(0.0);
  auto eager_model = std::make_shared<models::GPT2LMHeadModel>(config);
  auto graph_model = std::make_shared<models::GPT2LMHeadModel>(config);
  graph_model->load_state_dict(eager_model->state_dict());
  const auto options = flow::optim::AdamWOptions(1e-2);  // weight decay 0.01, PyTorch's default
  flow::optim::AdamW eager_opt(eager_model->parameters(), options);
  test_graphs::LanguageModelTrainGraph graph(graph_model, std::make_shared<flow::optim::AdamW>(graph_model->parameters(), options));
  graph.config().enable_amp();
  const Tensor ids = token_ids({4, 10}, 30);
  std::vector<double> losses;
  for (int k = 0; k < 8; ++k) {
    eager_opt.zero_grad();
    Tensor eager_loss;
    {
      const flow::autocast amp;
      eager_loss = eager_model->loss(ids, ids);
    }
    EXPECT_EQ(eager_loss.dtype(), flow::kFloat32);
    eager_loss.backward();
    eager_opt.step();
    const Tensor graph_loss = graph(ids, ids).at(0);
    EXPECT_NEAR(graph_loss.item<double>(), eager_loss.item<double>(), 2e-2 * std::abs(eager_loss.item<double>())) << "step " << k;
    losses.push_back(graph_loss.item<double>());
  }
  EXPECT_LT(losses.back(), 0.8 * losses.front());
  for (const auto& [name, p] : graph_model->named_parameters()) EXPECT_EQ(p.dtype(), flow::kFloat32) << name;
}

// Attention (through both projections, the heads and the causal mask) and a whole block, in
// float64. The projection weights are the module's own tensors, passed as inputs so that the
// checker perturbs them in place.
TEST(GPT2, GradientsMatchFiniteDifferences) {
  flow::manual_seed(30);
  const models::GPT2Config config = models::GPT2Config().n_positions(8).n_embd(8).n_head(2).n_layer(1).dropout(0.0);
  models::GPT2Attention attention(config);
  attention.to(flow::kFloat64);
  const Tensor x = flow::testing::grad_input({2, 4, 8});
  EXPECT_TRUE(flow::testing::gradcheck([&](const TensorList& in) { return attention.forward(in[0]); },
                                       {x, attention.c_attn->weight, attention.c_attn->bias, attention.c_proj->weight}));

  models::GPT2Block block(config);
  block.to(flow::kFloat64);
  EXPECT_TRUE(flow::testing::gradcheck([&](const TensorList& in) { return block.forward(in[0]); },
                                       {flow::testing::grad_input({2, 4, 8}), block.ln_1->weight, block.mlp->c_fc->weight}));
}
