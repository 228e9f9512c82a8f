#include "oneflow_lite/bfloat16_products.h"

#include <dnnl.hpp>
#include <optional>
#include <set>
#include <string_view>
#include <vector>

#include "core/ops/fused.h"
#include "job/job.h"

namespace flow::lite {
namespace {

namespace proto = graph::proto;
using graph::kConstantOp;
using graph::kOutputOp;
using graph::value_name;

// The bfloat16 products lite may run in float32 instead.
bool is_widenable(const std::string& op) { return op == "conv2d" || op == "linear" || op == "fused_linear" || op == "matmul"; }

// Every product autocast runs in 16 bits (core/autocast.cpp): a kept one is never widened because
// a neighbour was.
bool is_product(const std::string& op) { return is_widenable(op) || op == "conv2d_grad_input" || op == "flash_attention"; }

bool has_isa(dnnl::cpu_isa wanted) {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa()), bits = static_cast<unsigned>(wanted);
  return (isa & bits) == bits;
}

// The Job rewrite of widen_bfloat16_products: choose() decides which nodes compute in float32,
// rewrite() changes their inputs and outputs and adds the casts and constants, remove_unread()
// drops what nothing reads any more.
class Widening {
 public:
  Widening(proto::Job& job, std::map<std::string, Tensor>& weights) : job_(job), weights_(weights) {
    for (const auto& node : job_.nodes()) names_.insert(node.name());
  }

  std::map<std::string, int64_t> run(const WidenFn& widen) {
    std::map<std::string, int64_t> products = choose(widen);
    if (widened_nodes_.empty()) return products;
    rewrite();
    remove_unread();
    return products;
  }

 private:
  std::map<std::string, int64_t> choose(const WidenFn& widen) {
    std::map<std::string, int64_t> products;
    for (const auto& node : job_.nodes()) {
      std::vector<TensorMeta> recorded;
      for (const auto& desc : node.outputs()) recorded.push_back(graph::meta_of(desc));
      std::optional<std::vector<TensorMeta>> widened;
      if (!graph::is_source_kind(node.op()) && node.op() != kOutputOp) widened = widened_metas(node, recorded, widen);
      const std::vector<TensorMeta>& metas = widened ? *widened : recorded;
      for (int j = 0; j < node.outputs_size(); ++j) {
        const std::string value = value_name(node.name(), j);
        metas_[value] = metas[j];
        if (metas[j].dtype != recorded[j].dtype) {
          widened_values_.insert(value);
          bfloat16_desc_[value] = node.outputs(j);
        }
      }
      if (!widened) continue;
      widened_nodes_.insert(node.name());
      if (is_widenable(node.op())) ++products[node.op()];
    }
    return products;
  }

  // The node's output metas when it computes in float32, or nullopt where it keeps its dtypes: it
  // must be a product to widen on the CPU, or another op reading a widened value, and accept
  // float32 for its bfloat16 inputs with outputs that differ only in bfloat16 becoming float32.
  std::optional<std::vector<TensorMeta>> widened_metas(const proto::Node& node, const std::vector<TensorMeta>& recorded,
                                                       const WidenFn& widen) const {
    bool reads_bfloat16 = false, reads_widened = false;
    std::vector<TensorMeta> inputs;
    for (const auto& input : node.inputs()) {
      TensorMeta meta = metas_.at(input);
      reads_bfloat16 = reads_bfloat16 || meta.dtype == kBFloat16;
      reads_widened = reads_widened || widened_values_.count(input);
      if (meta.dtype == kBFloat16) meta.dtype = kFloat32;
      inputs.push_back(meta);
    }
    const bool on_cpu = !recorded.empty() && recorded[0].device.is_cpu();
    const bool widened_product =
        is_widenable(node.op()) && reads_bfloat16 && on_cpu && inputs.size() >= 2 && widen({node.op(), inputs, graph::attrs_of(node)});
    const bool passes_on = !is_product(node.op()) && reads_widened;
    if (!(widened_product || passes_on) || graph::has_side_effects(node)) return std::nullopt;
    std::vector<TensorMeta> outputs;
    try {
      outputs = checked_infer(find_op(node.op()), inputs, graph::attrs_of(node));
    } catch (const Error&) {
      return std::nullopt;  // an op that takes no float32 there: it reads a cast back instead
    }
    if (outputs.size() != recorded.size()) return std::nullopt;
    for (size_t j = 0; j < outputs.size(); ++j) {
      const bool same_dtype = outputs[j].dtype == recorded[j].dtype || (recorded[j].dtype == kBFloat16 && outputs[j].dtype == kFloat32);
      if (!same_dtype || !(outputs[j].shape == recorded[j].shape) || !(outputs[j].device == recorded[j].device)) return std::nullopt;
    }
    return outputs;
  }

  void rewrite() {
    proto::Job rewritten;
    for (auto& node : *job_.mutable_nodes()) {
      const bool widened = widened_nodes_.count(node.name()) != 0;
      // A cast to float32 of a widened value now casts float32 to float32: its readers read the value.
      const std::string result = node.outputs_size() == 1 ? value_name(node.name(), 0) : std::string();
      if (widened && node.op() == "copy" && metas_.at(node.inputs(0)).dtype == metas_.at(result).dtype &&
          metas_.at(node.inputs(0)).device == metas_.at(result).device) {
        renamed_[result] = renamed_.count(node.inputs(0)) ? renamed_.at(node.inputs(0)) : node.inputs(0);
        continue;
      }
      if (widened && node.op() == "fused_elementwise") {
        std::vector<DType> operand_dtypes;
        for (const auto& input : node.inputs()) operand_dtypes.push_back(metas_.at(input).dtype == kBFloat16 ? kFloat32 : metas_.at(input).dtype);
        auto& program = (*node.mutable_attrs())["program"];
        // The program's conversions of operands that are float32 now convert nothing.
        const auto is_float32 = [&](int operand) { return operand_dtypes.at(operand) == kFloat32; };
        program.set_s(fused::encode(fused::without_conversions(fused::decode(program.s()), is_float32)));
      }
      for (auto& input : *node.mutable_inputs()) {
        const bool bfloat16 = metas_.at(input).dtype == kBFloat16;
        if (widened && bfloat16) {
          input = float32_of(input, rewritten);
        } else if (!widened && widened_values_.count(input)) {
          input = bfloat16_of(input, rewritten);
        } else if (auto bypass = renamed_.find(input); bypass != renamed_.end()) {
          input = bypass->second;
        }
      }
      for (int j = 0; j < node.outputs_size(); ++j) {
        if (widened_values_.count(value_name(node.name(), j))) node.mutable_outputs(j)->set_dtype(dtype_name(kFloat32));
      }
      rewritten.add_nodes()->Swap(&node);
    }
    job_.mutable_nodes()->Swap(rewritten.mutable_nodes());
  }

  // The float32 value a widened node reads for the bfloat16 `value`: a float32 copy of a
  // constant, the float32 source of a cast to bfloat16, or else a cast of it to float32.
  std::string float32_of(const std::string& value, proto::Job& rewritten) {
    auto made = float32_of_.find(value);
    if (made != float32_of_.end()) return made->second;
    const auto [producer_name, output] = graph::parse_value_name(value);
    const proto::Node& producer = node_of(producer_name, rewritten);
    std::string float32;
    if (producer.op() == kConstantOp) {
      proto::Node& constant = *rewritten.add_nodes();
      constant = producer;
      constant.set_name(unique_name(producer.name() + ".float32"));
      if (constant.attrs().count("key")) (*constant.mutable_attrs())["key"].set_s(constant.name());
      constant.mutable_outputs(0)->set_dtype(dtype_name(kFloat32));
      weights_[constant.name()] = weights_.at(producer.name()).to(kFloat32);
      float32 = value_name(constant.name(), 0);
    } else if (producer.op() == "copy" && metas_.at(producer.inputs(0)).dtype == kFloat32 &&
               metas_.at(producer.inputs(0)).device == metas_.at(value).device) {
      float32 = producer.inputs(0);
    } else {
      float32 = add_cast(value, kFloat32, producer, rewritten);
    }
    float32_of_[value] = float32;
    return float32;
  }

  // A cast to bfloat16 of the widened `value`, for a reader that keeps bfloat16.
  std::string bfloat16_of(const std::string& value, proto::Job& rewritten) {
    auto made = bfloat16_of_.find(value);
    if (made != bfloat16_of_.end()) return made->second;
    const std::string bfloat16 = add_cast(value, kBFloat16, node_of(graph::parse_value_name(value).first, rewritten), rewritten);
    bfloat16_of_[value] = bfloat16;
    return bfloat16;
  }

  std::string add_cast(const std::string& value, DType dtype, const proto::Node& producer, proto::Job& rewritten) {
    proto::Node& cast = *rewritten.add_nodes();
    cast.set_name(unique_name(producer.name() + "." + dtype_name(dtype)));
    cast.set_op("copy");
    cast.set_scope(producer.scope());
    cast.add_inputs(value);
    const auto desc = bfloat16_desc_.find(value);
    *cast.add_outputs() = desc != bfloat16_desc_.end() ? desc->second : producer.outputs(graph::parse_value_name(value).second);
    cast.mutable_outputs(0)->set_dtype(dtype_name(dtype));
    graph::set_attrs(cast, Attrs().set("dtype", dtype).set("device", metas_.at(value).device));
    return value_name(cast.name(), 0);
  }

  // A node already moved to `rewritten` (every producer precedes its readers).
  static const proto::Node& node_of(const std::string& name, const proto::Job& rewritten) {
    for (int p = rewritten.nodes_size() - 1; p >= 0; --p) {
      if (rewritten.nodes(p).name() == name) return rewritten.nodes(p);
    }
    fail("oneflow_lite", "bfloat16 widening: node '", name, "' is read before it is defined");
  }

  std::string unique_name(const std::string& base) {
    std::string name = base;
    for (int n = 1; !names_.insert(name).second; ++n) name = base + "_" + std::to_string(n);
    return name;
  }

  // Drops the casts and constants nothing reads any more (a bypassed cast to bfloat16, a
  // bfloat16 weight whose readers all read its float32 copy), last first so that chains go too.
  void remove_unread() {
    std::map<std::string, int> readers;
    for (const auto& node : job_.nodes()) {
      for (const auto& input : node.inputs()) ++readers[input];
    }
    std::vector<bool> removed(job_.nodes_size(), false);
    for (int p = job_.nodes_size() - 1; p >= 0; --p) {
      const proto::Node& node = job_.nodes(p);
      if ((node.op() != "copy" && node.op() != kConstantOp) || node.outputs_size() != 1 || readers[value_name(node.name(), 0)] > 0) continue;
      removed[p] = true;
      for (const auto& input : node.inputs()) --readers[input];
      if (node.op() == kConstantOp) weights_.erase(node.name());
    }
    proto::Job kept;
    for (int p = 0; p < job_.nodes_size(); ++p) {
      if (!removed[p]) kept.add_nodes()->Swap(job_.mutable_nodes(p));
    }
    job_.mutable_nodes()->Swap(kept.mutable_nodes());
  }

  proto::Job& job_;
  std::map<std::string, Tensor>& weights_;
  std::set<std::string> names_;
  std::map<std::string, TensorMeta> metas_;  // every value's meta after widening
  std::set<std::string> widened_nodes_;
  std::set<std::string> widened_values_;                    // bfloat16 values that become float32
  std::map<std::string, proto::TensorDesc> bfloat16_desc_;  // their recorded descriptions
  std::map<std::string, std::string> float32_of_, bfloat16_of_, renamed_;
};

}  // namespace

Bfloat16Hardware cpu_bfloat16_hardware() {
  static const Bfloat16Hardware hardware{has_isa(dnnl::cpu_isa::avx512_core_bf16), has_isa(dnnl::cpu_isa::avx512_core_amx)};
  return hardware;
}

bool bfloat16_pays_off(const Bfloat16Product& product, Bfloat16Hardware hardware, bool on_blocked_layouts) {
  const std::string& op = product.op;
  if (op == "linear" || op == "fused_linear" || op == "matmul") {
    return hardware.dot_products && product.inputs.at(1).shape.numel() >= kMinBfloat16ProductWeights;
  }
  if (op != "conv2d" || hardware.matrix_tiles) return true;
  if (!hardware.dot_products) return false;
  if (on_blocked_layouts) return true;
  const Shape& x = product.inputs.at(0).shape;
  const Shape& weight = product.inputs.at(1).shape;  // (out, in / groups, kh, kw)
  const auto stride = product.attrs.get<std::vector<int64_t>>("stride");
  const int64_t window = weight[2] * weight[3], pixels = (x[2] / stride.at(0)) * (x[3] / stride.at(1));
  if (product.attrs.get<int64_t>("groups") != 1 || weight[1] * window < kMinBfloat16ConvReduction || pixels < kMinBfloat16ConvPixels) return false;
  return window > 1 || weight[0] >= kMinBfloat16PointwiseChannels;
}

Bfloat16Products bfloat16_choice(Bfloat16Products option, const char* env) {
  if (option != Bfloat16Products::kAuto || env == nullptr) return option;
  const std::string_view value(env);
  if (value == "auto") return Bfloat16Products::kAuto;
  if (value == "keep") return Bfloat16Products::kKeep;
  if (value == "float32") return Bfloat16Products::kFloat32;
  fail("oneflow_lite", "FLOW_LITE_BFLOAT16 must be auto, keep or float32, got '", value, "'");
}

std::map<std::string, int64_t> widen_bfloat16_products(proto::Job& job, std::map<std::string, Tensor>& weights,
                                                       const WidenFn& widen) {
  return Widening(job, weights).run(widen);
}

}  // namespace flow::lite
