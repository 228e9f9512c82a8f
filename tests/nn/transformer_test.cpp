// MultiheadAttention and the Transformer layers: PyTorch's parameter names, the attention
// formula per head with PyTorch's mask conventions, layouts, the layers' residual/norm order, the
// gradient checker, and argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <string>

#include "common/gradcheck.h"
#include "common/reference.h"
#include "common/test_util.h"
#include "nn/init.h"
#include "nn/transformer.h"

using flow::Shape;
using flow::Tensor;
using flow::TensorList;
using flow::testing::expect_close;
namespace nn = flow::nn;

namespace {

std::set<std::string> state_names(const nn::Module& module) {
  std::set<std::string> names;
  for (const auto& [name, value] : module.state_dict()) names.insert(name);
  return names;
}

// attention with the module's weights, batch first (N, L, E), one head at a time; mask bool with
// PyTorch's MultiheadAttention meaning (true may NOT attend), broadcast to (N, heads, L, S).
Tensor reference_mha(const nn::MultiheadAttention& mha, const Tensor& query, const Tensor& key, const Tensor& value,
                     const Tensor& blocked) {
  const int64_t e = mha.options().embed_dim_, heads = mha.options().num_heads_, dh = e / heads;
  const Tensor wq = mha.in_proj_weight.narrow(0, 0, e), wk = mha.in_proj_weight.narrow(0, e, e), wv = mha.in_proj_weight.narrow(0, 2 * e, e);
  const Tensor bq = mha.in_proj_bias.narrow(0, 0, e), bk = mha.in_proj_bias.narrow(0, e, e), bv = mha.in_proj_bias.narrow(0, 2 * e, e);
  const Tensor q = flow::linear(query, wq, bq), k = flow::linear(key, wk, bk), v = flow::linear(value, wv, bv);
  TensorList per_head;
  for (int64_t h = 0; h < heads; ++h) {
    const Tensor allowed = blocked.defined() ? flow::logical_not(blocked.select(1, h)) : Tensor();
    per_head.push_back(flow::testing::reference_attention(q.narrow(2, h * dh, dh), k.narrow(2, h * dh, dh), v.narrow(2, h * dh, dh),
                                                          allowed, false, 1.0 / std::sqrt(static_cast<double>(dh))));
  }
  return flow::linear(flow::cat(per_head, 2), mha.out_proj->weight, mha.out_proj->bias);
}

TEST(MultiheadAttention, HasPyTorchsParameterNamesAndInitialisation) {
  nn::MultiheadAttention mha(8, 2);
  EXPECT_EQ(state_names(mha), (std::set<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}));
  EXPECT_EQ(mha.in_proj_weight.shape(), (Shape{24, 8}));
  EXPECT_EQ(flow::testing::values(mha.in_proj_bias), std::vector<double>(24, 0.0));
  EXPECT_EQ(flow::testing::values(mha.out_proj->bias), std::vector<double>(8, 0.0));
  // xavier_uniform_: bound sqrt(6 / (fan_in + fan_out)) = sqrt(6 / 32).
  EXPECT_LE(flow::max(flow::abs(mha.in_proj_weight)).item<double>(), std::sqrt(6.0 / 32.0));
  nn::MultiheadAttention separate(nn::MultiheadAttentionOptions(8, 2).kdim(5).vdim(3).bias(false));
  EXPECT_EQ(state_names(separate), (std::set<std::string>{"q_proj_weight", "k_proj_weight", "v_proj_weight", "out_proj.weight"}));
  EXPECT_EQ(separate.k_proj_weight.shape(), (Shape{8, 5}));
}

TEST(MultiheadAttention, EachHeadAttendsWithPyTorchsMaskConventions) {
  flow::manual_seed(10);
  nn::MultiheadAttention mha(nn::MultiheadAttentionOptions(8, 2).batch_first(true));
  flow::autograd::NoGradGuard no_grad;
  flow::nn::init::normal_(mha.in_proj_bias);
  const Tensor query = flow::randn({3, 4, 8}), key = flow::randn({3, 6, 8}), value = flow::randn({3, 6, 8});
  // attn_mask (L, S) and key_padding_mask (N, S), true blocks; query 0 of batch 1 sees no key.
  const Tensor attn_mask = flow::gt(flow::rand({4, 6}), 0.7);
  Tensor padding = flow::zeros({3, 6}, flow::TensorOptions(flow::kBool));
  padding = flow::logical_or(padding, flow::ge(flow::arange(6).unsqueeze(0), flow::tensor(std::vector<int64_t>{6, 4, 2}).unsqueeze(1)));
  const Tensor blocked = flow::logical_or(attn_mask.reshape({1, 1, 4, 6}), padding.reshape({3, 1, 1, 6})).expand({3, 2, 4, 6});

  const auto [fused, no_weights] = mha.forward(query, key, value, padding, /*need_weights=*/false, attn_mask);
  EXPECT_FALSE(no_weights.defined());
  expect_close(fused, reference_mha(mha, query, key, value, blocked), 1e-5, 1e-5);
  const auto [out, weights] = mha.forward(query, key, value, padding, /*need_weights=*/true, attn_mask);
  expect_close(out, fused, 1e-5, 1e-6);
  ASSERT_EQ(weights.shape(), (Shape{3, 4, 6}));
  // Averaged over heads, each row sums to 1 over the keys it may see.
  for (double row : flow::testing::values(flow::sum(weights, {2}))) EXPECT_NEAR(row, 1.0, 1e-5);
  const auto per_head = mha.forward(query, key, value, padding, true, attn_mask, /*average_attn_weights=*/false).second;
  EXPECT_EQ(per_head.shape(), (Shape{3, 2, 4, 6}));
  expect_close(flow::mean(per_head, {1}), weights, 1e-6, 1e-7);

  // The same masks as float, added to the scores.
  const Tensor float_mask = flow::masked_fill(flow::zeros({4, 6}), attn_mask, -INFINITY);
  expect_close(mha.forward(query, key, value, padding, false, float_mask).first, fused, 1e-6, 1e-6);
}

TEST(MultiheadAttention, SequenceFirstUnbatchedAndCausalHintAgree) {
  flow::manual_seed(11);
  nn::MultiheadAttention first(nn::MultiheadAttentionOptions(8, 4).batch_first(true));
  nn::MultiheadAttention second(8, 4);
  second.load_state_dict(first.state_dict());
  const Tensor x = flow::randn({2, 5, 8});
  const Tensor batch_first = first.forward(x, x, x, Tensor(), false).first;
  const Tensor seq = x.transpose(0, 1);
  expect_close(second.forward(seq, seq, seq, Tensor(), false).first.transpose(0, 1), batch_first, 1e-6, 1e-6);
  expect_close(first.forward(x[1], x[1], x[1], Tensor(), false).first, batch_first[1], 1e-6, 1e-6);
  // is_causal with the causal mask: the fused causal path, equal to reading the mask.
  const Tensor causal = nn::Transformer::generate_square_subsequent_mask(5);
  expect_close(first.forward(x, x, x, Tensor(), false, causal, true, true).first, first.forward(x, x, x, Tensor(), true, causal).first,
               1e-5, 1e-6);
}

TEST(MultiheadAttention, PassesTheGradientChecker) {
  flow::manual_seed(12);
  nn::MultiheadAttention mha(nn::MultiheadAttentionOptions(6, 2).batch_first(true).kdim(4).vdim(3));
  mha.to(flow::kFloat64);
  const Tensor mask = flow::gt(flow::rand({3, 5}), 0.8);
  for (bool need_weights : {false, true}) {
    TensorList inputs{flow::randn({2, 3, 6}, flow::kFloat64).requires_grad_(true), flow::randn({2, 5, 4}, flow::kFloat64).requires_grad_(true),
                      flow::randn({2, 5, 3}, flow::kFloat64).requires_grad_(true)};
    EXPECT_TRUE(flow::testing::gradcheck(
        [&](const TensorList& in) { return mha.forward(in[0], in[1], in[2], Tensor(), need_weights, mask).first; }, inputs));
  }
}

TEST(TransformerEncoderLayer, ResidualsAndNormsInPostAndPreNormOrder) {
  flow::manual_seed(13);
  for (bool norm_first : {false, true}) {
    nn::TransformerEncoderLayer layer(nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(16).batch_first(true).norm_first(norm_first).activation("gelu"));
    layer.eval();
    EXPECT_EQ(state_names(layer).count("self_attn.in_proj_weight"), 1u);
    EXPECT_EQ(state_names(layer).count("linear2.bias"), 1u);
    const Tensor x = flow::randn({2, 5, 8});
    const Tensor mask = nn::Transformer::generate_square_subsequent_mask(5);
    auto attend = [&](const Tensor& in) { return layer.self_attn->forward(in, in, in, Tensor(), false, mask).first; };
    auto feed = [&](const Tensor& in) { return (*layer.linear2)(flow::gelu((*layer.linear1)(in))); };
    Tensor expected;
    if (norm_first) {
      const Tensor h = x + attend((*layer.norm1)(x));
      expected = h + feed((*layer.norm2)(h));
    } else {
      const Tensor h = (*layer.norm1)(x + attend(x));
      expected = (*layer.norm2)(h + feed(h));
    }
    expect_close(layer.forward(x, mask), expected, 1e-5, 1e-6);
    expect_close(layer.forward(x, Tensor(), Tensor(), /*is_causal=*/false), layer(x), 0, 0);
  }
}

TEST(Transformer, StacksCopyTheLayerAndTheModelRunsEncoderThenDecoder) {
  flow::manual_seed(14);
  auto layer = std::make_shared<nn::TransformerEncoderLayer>(nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(16));
  nn::TransformerEncoder encoder(layer, 3, std::make_shared<nn::LayerNorm>(std::vector<int64_t>{8}));
  const auto names = state_names(encoder);
  EXPECT_EQ(names.count("layers.2.self_attn.in_proj_weight"), 1u);
  EXPECT_EQ(names.count("norm.weight"), 1u);
  // Deep copies: every layer starts with the given layer's weights.
  const auto first = encoder.state_dict();
  expect_close(first.at("layers.2.linear1.weight"), layer->linear1->weight, 0, 0);

  nn::Transformer model(nn::TransformerOptions().d_model(8).nhead(2).num_encoder_layers(2).num_decoder_layers(2).dim_feedforward(16).dropout(0.0));
  model.eval();
  const auto model_names = state_names(model);
  for (const char* name : {"encoder.layers.1.norm2.bias", "decoder.layers.0.multihead_attn.in_proj_weight", "decoder.layers.1.norm3.weight",
                           "decoder.norm.weight", "encoder.norm.bias"}) {
    EXPECT_EQ(model_names.count(name), 1u) << name;
  }
  const Tensor src = flow::randn({7, 2, 8}), tgt = flow::randn({5, 2, 8});
  const Tensor tgt_mask = nn::Transformer::generate_square_subsequent_mask(5);
  const Tensor out = model.forward(src, tgt, Tensor(), tgt_mask);
  EXPECT_EQ(out.shape(), (Shape{5, 2, 8}));
  const Tensor memory = model.encoder->forward(src, Tensor());
  expect_close(out, model.decoder->forward(tgt, memory, tgt_mask), 0, 0);
  // The causal target mask: changing a later target position leaves earlier outputs alone.
  Tensor changed = tgt.clone();
  changed.select(0, 4).fill_(3.0);
  expect_close(model.forward(src, changed, Tensor(), tgt_mask).narrow(0, 0, 4), out.narrow(0, 0, 4), 1e-5, 1e-6);
}

TEST(MultiheadAttention, BadArgumentsFailAtTheCall) {
  EXPECT_THROW_MSG(nn::MultiheadAttention(10, 3), "[MultiheadAttention] embed_dim must be divisible by num_heads");
  nn::MultiheadAttention mha(8, 2);
  const Tensor x = flow::randn({4, 2, 8});
  EXPECT_THROW_MSG(mha.forward(flow::randn({4, 2, 6}), x, x), "was expecting embedding dimension of 8, but got 6");
  EXPECT_THROW_MSG(mha.forward(x, x, x, Tensor(), false, flow::zeros({3, 3})), "attn_mask should be (4, 4) or (4, 4, 4)");
  EXPECT_THROW_MSG(mha.forward(x, x, x, flow::zeros({2, 3}, flow::TensorOptions(flow::kBool))), "key_padding_mask should be (2, 4)");
  EXPECT_THROW_MSG(mha.forward(x, x, x, Tensor(), false, Tensor(), true, true), "Need attn_mask if specifying the is_causal hint");
  EXPECT_THROW_MSG(nn::TransformerEncoderLayer(nn::TransformerEncoderLayerOptions(8, 2).activation("tanh")),
                   "activation should be relu/gelu, not tanh");
}

}  // namespace
