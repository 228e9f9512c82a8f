#pragma once
// The backward graph: one Node per recorded op call, edges to the nodes that produced its
// inputs, and AccumulateGrad nodes for leaves.
#include <memory>
#include <string>
#include <vector>

#include "core/autograd_meta.h"
#include "core/op.h"
#include "core/ops/creation.h"

namespace flow::autograd {

class Node;

struct Edge {
  std::shared_ptr<Node> node;
  uint32_t input_nr = 0;  // which of node's outputs (its grad inputs) this edge feeds
  bool valid() const { return node != nullptr; }
};

// A value saved for backward. Outputs are stored without their autograd meta (the meta points
// back at the node, which would make a cycle) and get it back on unpack; the storage version
// is remembered so that a later in-place change is reported instead of giving wrong gradients.
class SavedTensor {
 public:
  SavedTensor() = default;
  // An input, saved as is (written_in_place: saved like an output, to avoid a cycle).
  SavedTensor(const Tensor& tensor, bool written_in_place);
  // Output `output_nr` of the node that saves it; it will require grad iff it is floating.
  SavedTensor(const Tensor& tensor, uint32_t output_nr);
  // A value the op's vjp does not read (OpDef::profile_cost says which it reads).
  static SavedTensor not_saved();
  Tensor unpack(const std::shared_ptr<Node>& owner, const std::string& op, const char* role, size_t index) const;
  void release() { data_ = Tensor(); }
  bool released() const { return !data_.defined() && was_defined_; }

 private:
  Tensor data_;
  uint64_t version_ = 0;
  bool was_defined_ = false;
  bool is_output_ = false;
  bool requires_grad_ = false;
  bool not_saved_ = false;
  uint32_t output_nr_ = 0;
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  virtual ~Node() = default;
  virtual std::string name() const = 0;
  // Gradients w.r.t. this node's inputs (one per next edge) from gradients w.r.t. its outputs.
  virtual TensorList apply(const TensorList& grad_outputs, bool retain_graph) = 0;
  virtual size_t num_outputs() const = 0;

  const std::vector<Edge>& next_edges() const { return next_edges_; }
  uint64_t sequence_nr() const { return sequence_nr_; }
  // Non-leaf tensors that asked for retain_grad(), by output index.
  std::vector<std::weak_ptr<TensorImpl>>& retained_outputs() { return retained_outputs_; }

 protected:
  Node();
  std::vector<Edge> next_edges_;

 private:
  uint64_t sequence_nr_;
  std::vector<std::weak_ptr<TensorImpl>> retained_outputs_;
};

// Backward of one recorded op: calls the op's vjp with the saved values.
class OpNode final : public Node {
 public:
  OpNode(const OpDef& op, const TensorList& inputs, const TensorList& outputs, const Attrs& attrs);
  std::string name() const override { return op_.name + "_backward"; }
  TensorList apply(const TensorList& grad_outputs, bool retain_graph) override;
  size_t num_outputs() const override { return output_metas_.size(); }

 private:
  const OpDef& op_;
  Attrs attrs_;
  std::vector<SavedTensor> saved_inputs_;
  std::vector<SavedTensor> saved_outputs_;
  std::vector<TensorMeta> input_metas_;
  std::vector<TensorMeta> output_metas_;
  // Where a zero gradient for each output is made when none arrives: the output's dtype and
  // device, and for a global output its placement (a local zero beside global values would not
  // combine with them).
  std::vector<TensorOptions> zero_grad_options_;
  bool released_ = false;
};

// Sink for a leaf that requires grad: adds the incoming gradient into leaf.grad().
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(const Tensor& leaf);
  std::string name() const override { return "AccumulateGrad"; }
  TensorList apply(const TensorList& grad_outputs, bool retain_graph) override;
  size_t num_outputs() const override { return 1; }
  // The leaf, or an undefined tensor if it no longer exists.
  Tensor leaf() const;

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

// The edge along which a gradient for `tensor` flows: its grad_fn, or its leaf's
// AccumulateGrad (made once per leaf and cached), or none if it does not require grad.
Edge gradient_edge(const Tensor& tensor);

}  // namespace flow::autograd
