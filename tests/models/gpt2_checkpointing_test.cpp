// Activation checkpointing of GPT-2's blocks, with dropout on: in eager mode
// (gradient_checkpointing_enable) the gradients equal those of the unchecked model element for
// element; in a Graph (config().set_activation_checkpointing per block) a few training steps give
// the plain Graph's losses and parameters, with a smaller planned peak.
#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <string>

#include "common/language_model_graph.h"
#include "core/ops/all.h"
#include "core/random.h"
#include "graph/graph.h"
#include "models/gpt2.h"
#include "optim/optimizer.h"

namespace models = flow::models;
using flow::Tensor;

namespace {

models::GPT2Config tiny_config() { return models::GPT2Config().vocab_size(64).n_positions(16).n_embd(32).n_layer(2).n_head(4).dropout(0.1); }

std::shared_ptr<models::GPT2LMHeadModel> make_model() {
  flow::manual_seed(1);
  return std::make_shared<models::GPT2LMHeadModel>(tiny_config());
}

Tensor token_ids(uint64_t seed) {
  flow::manual_seed(seed);
  return flow::randint(0, 64, {4, 12});
}

}  // namespace

TEST(GPT2Checkpointing, EagerGradientsEqualUnchecked) {
  auto plain = make_model(), checked = make_model();
  checked->gradient_checkpointing_enable();
  for (auto* model : {plain.get(), checked.get()}) {
    const Tensor ids = token_ids(7);
    flow::manual_seed(8);
    model->loss(ids, ids).backward();
  }
  const auto a = plain->named_parameters(), b = checked->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(b[i].second.grad().defined()) << b[i].first;
    EXPECT_EQ(a[i].second.grad().tolist<float>(), b[i].second.grad().tolist<float>()) << a[i].first;
  }
}

TEST(GPT2Checkpointing, GraphStepsEqualPlainGraphWithSmallerPeak) {
  auto plain_model = make_model(), checked_model = make_model();
  const auto options = flow::optim::AdamWOptions(1e-2).weight_decay(0.01);
  test_graphs::LanguageModelTrainGraph plain(plain_model, std::make_shared<flow::optim::AdamW>(plain_model->parameters(), options));
  test_graphs::LanguageModelTrainGraph checked(checked_model, std::make_shared<flow::optim::AdamW>(checked_model->parameters(), options));
  for (int64_t i = 0; i < tiny_config().n_layer_; ++i) checked.config().set_activation_checkpointing("model.transformer.h." + std::to_string(i));
  for (uint64_t k = 0; k < 3; ++k) {
    const Tensor ids = token_ids(20 + k);
    flow::manual_seed(100 + k);
    const double plain_loss = plain(ids, ids).at(0).item<double>();
    flow::manual_seed(100 + k);
    const double checked_loss = checked(ids, ids).at(0).item<double>();
    EXPECT_NEAR(checked_loss, plain_loss, 1e-6) << "step " << k;
  }
  const auto a = plain_model->named_parameters(), b = checked_model->named_parameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(flow::allclose(b[i].second, a[i].second, 0, 1e-6)) << a[i].first;
  EXPECT_LT(checked.plan().block_bytes.at("cpu"), plain.plan().block_bytes.at("cpu"));
  std::ostringstream report;
  report << checked.explain();
  EXPECT_NE(report.str().find("activation_checkpointing:"), std::string::npos) << report.str();
  EXPECT_NE(report.str().find("recomputed for backward: model.transformer.h.0."), std::string::npos);
}
