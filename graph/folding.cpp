// Eval-mode conv + batch-norm folding: batch_norm_eval(conv2d(x, w, b), mean, var, gamma, beta)
// becomes conv2d(x, w * s, (b - mean) * s + beta) with s = gamma / sqrt(var + eps). The folded
// weights are computed by ops in the Job (not baked in at compile time), so the graph keeps
// following the modules' parameters and buffers; they cost one pass over the weights per call.
// Under AMP the conv computes in 16 bits on casts of the weights and the batch norm in float32 on
// a cast of its result: batch_norm_eval(cast32(conv2d(x, cast16(w), cast16(b)))) becomes
// cast32(conv2d(x, cast16(w * s), cast16((b - mean) * s + beta))), the folding done in float32
// on the weights behind the casts, so that an AMP export loses its batch norms too.
#include <optional>

#include "graph/passes.h"

namespace flow::graph {
namespace {

// Appends nodes whose output metas come from the ops' own inference.
class NodeWriter {
 public:
  NodeWriter(const JobIndex& index, const proto::Node& like, std::vector<proto::Node>& nodes)
      : index_(index), like_(like), nodes_(nodes) {}

  std::string add(const std::string& suffix, const std::string& op, const std::vector<std::string>& inputs, const Attrs& attrs = {}) {
    std::vector<TensorMeta> in;
    for (const auto& input : inputs) in.push_back(meta(input));
    const std::vector<TensorMeta> out = checked_infer(find_op(op), in, attrs);
    proto::Node node;
    node.set_name(like_.name() + ".fold." + suffix);
    node.set_op(op);
    node.set_scope(like_.scope());
    node.set_location(like_.location());
    for (const auto& input : inputs) node.add_inputs(input);
    set_attrs(node, attrs);
    *node.add_outputs() = describe(out.at(0));
    const std::string value = value_name(node.name(), 0);
    metas_[value] = out[0];
    nodes_.push_back(std::move(node));
    return value;
  }

  TensorMeta meta(const std::string& value) const {
    auto it = metas_.find(value);
    if (it != metas_.end()) return it->second;
    const auto [producer, output] = parse_value_name(value);
    return meta_of(index_.node(producer).outputs(output));
  }

 private:
  const JobIndex& index_;
  const proto::Node& like_;
  std::vector<proto::Node>& nodes_;
  std::map<std::string, TensorMeta> metas_;
};

bool is_state(const JobIndex& index, const std::string& value) {
  const std::string& op = index.node(parse_value_name(value).first).op();
  return op == kVariableOp || op == kConstantOp;
}

TensorMeta meta_of_value(const JobIndex& index, const std::string& value) {
  const auto [producer, output] = parse_value_name(value);
  return meta_of(index.node(producer).outputs(output));
}

// The node producing `value` when it is a dtype cast (a copy that keeps the device), else null.
const proto::Node* cast_producing(const JobIndex& index, const std::string& value) {
  const proto::Node& node = index.node(parse_value_name(value).first);
  if (node.op() != "copy" || !(meta_of(node.outputs(0)).device == meta_of_value(index, node.inputs(0)).device)) return nullptr;
  return &node;
}

// The variable or constant `value` is, or is a cast of (AMP's cast of a weight), or nullopt.
std::optional<std::string> state_behind_cast(const JobIndex& index, const std::string& value) {
  if (is_state(index, value)) return value;
  const proto::Node* cast = cast_producing(index, value);
  if (cast && is_state(index, cast->inputs(0))) return cast->inputs(0);
  return std::nullopt;
}

}  // namespace

void conv_batch_norm_folding(proto::Job& job, PassContext& context) {
  const JobIndex index(job);
  const std::set<std::string> written = written_in_place(job);
  std::map<int, std::vector<proto::Node>> inserted;  // new nodes replacing the batch norm at a position
  std::set<int> removed;
  std::map<std::string, std::string> renamed;
  for (int p = 0; p < job.nodes_size(); ++p) {
    const proto::Node& bn = job.nodes(p);
    if (bn.op() != "batch_norm_eval") continue;
    // The batch norm reads the conv's result, or (AMP) a cast of it that nothing else reads.
    std::string conv_value = bn.inputs(0);
    const proto::Node* result_cast = cast_producing(index, conv_value);
    if (result_cast) {
      if (index.consumers(conv_value).size() != 1 || written.count(conv_value)) continue;
      conv_value = result_cast->inputs(0);
    }
    const int conv_position = index.position(parse_value_name(conv_value).first);
    const proto::Node& conv = job.nodes(conv_position);
    if (conv.op() != "conv2d" || index.consumers(conv_value).size() != 1 || written.count(conv_value)) continue;
    const std::optional<std::string> conv_weight = state_behind_cast(index, conv.inputs(1));
    const std::optional<std::string> conv_bias = conv.inputs_size() < 3 ? std::nullopt : state_behind_cast(index, conv.inputs(2));
    // The folding computes in the batch norm's dtype (float32 under AMP) on the weights behind the casts.
    const DType bn_dtype = meta_of(bn.outputs(0)).dtype;
    bool foldable = conv_weight && meta_of_value(index, *conv_weight).dtype == bn_dtype &&
                    (conv.inputs_size() < 3 || (conv_bias && meta_of_value(index, *conv_bias).dtype == bn_dtype));
    for (int i = 1; i < bn.inputs_size(); ++i) foldable = foldable && is_state(index, bn.inputs(i)) && !written.count(bn.inputs(i));
    if (!foldable) continue;

    const bool affine = bn.inputs_size() == 5;
    const std::string &mean = bn.inputs(1), &var = bn.inputs(2);
    std::vector<proto::Node>& nodes = inserted[p];
    NodeWriter writer(index, bn, nodes);
    const double eps = attrs_of(bn).get<double>("eps");
    std::string scale = writer.add("inv_std", "rsqrt", {writer.add("var_eps", "add_scalar", {var}, Attrs().set("scalar", Scalar(eps)))});
    if (affine) scale = writer.add("scale", "mul", {bn.inputs(3), scale});
    const int64_t channels = meta_of(conv.outputs(0)).shape[1];
    const std::string scale_4d = writer.add("scale_4d", "view", {scale}, Attrs().set("shape", std::vector<int64_t>{channels, 1, 1, 1}));
    std::string weight = writer.add("weight", "mul", {*conv_weight, scale_4d});
    const std::string centred = conv_bias ? writer.add("centred", "sub", {*conv_bias, mean}) : writer.add("centred", "neg", {mean});
    std::string bias = writer.add("shift", "mul", {centred, scale});
    if (affine) bias = writer.add("bias", "add", {bias, bn.inputs(4)});
    // Under AMP: the weights folded in float32 and rounded once to the conv's dtype.
    if (conv.inputs(1) != *conv_weight) weight = writer.add("weight_cast", "copy", {weight}, attrs_of(*cast_producing(index, conv.inputs(1))));
    const TensorMeta conv_meta = meta_of(conv.outputs(0));
    if (writer.meta(bias).dtype != conv_meta.dtype) {
      bias = writer.add("bias_cast", "copy", {bias}, Attrs().set("dtype", conv_meta.dtype).set("device", conv_meta.device));
    }
    const std::string folded = writer.add("conv", "conv2d", {conv.inputs(0), weight, bias}, attrs_of(conv));
    FusedGroup group{{parse_value_name(folded).first, "conv2d"}, {{conv.name(), conv.op()}}};
    renamed[value_name(bn.name(), 0)] = folded;
    if (result_cast) {
      renamed[value_name(bn.name(), 0)] = writer.add("result_cast", "copy", {folded}, attrs_of(*result_cast));
      removed.insert(index.position(result_cast->name()));
      group.members.push_back({result_cast->name(), result_cast->op()});
    }
    removed.insert(conv_position);
    group.members.push_back({bn.name(), bn.op()});
    context.record.fused.push_back(std::move(group));
  }
  if (inserted.empty()) return;
  proto::Job rewritten;
  for (int p = 0; p < job.nodes_size(); ++p) {
    if (removed.count(p)) continue;
    auto replacement = inserted.find(p);
    if (replacement == inserted.end()) {
      rewritten.add_nodes()->Swap(job.mutable_nodes(p));
      continue;
    }
    for (auto& node : replacement->second) rewritten.add_nodes()->Swap(&node);
  }
  for (auto& node : *rewritten.mutable_nodes()) {
    for (auto& input : *node.mutable_inputs()) {
      auto it = renamed.find(input);
      if (it != renamed.end()) input = it->second;
    }
  }
  job.mutable_nodes()->Swap(rewritten.mutable_nodes());
}

}  // namespace flow::graph
