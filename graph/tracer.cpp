#include "graph/tracer.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <glog/logging.h>

#include <cstdlib>
#include <sstream>

#include "autograd/engine.h"
#include "core/comm/process_group.h"

namespace flow::graph {
namespace {

Tensor lazy_tensor(const TensorMeta& meta, const std::string& value) {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = meta.shape;
  impl->strides = contiguous_strides(meta.shape);
  impl->dtype = meta.dtype;
  impl->device = meta.device;
  impl->lazy = std::make_shared<LazyInfo>(LazyInfo{value});
  return Tensor(std::move(impl));
}

TensorMeta meta_of_tensor(const Tensor& t) { return {t.shape(), t.dtype(), t.device()}; }

// Marks a Job value as this rank's piece of a global tensor on `placement` laid out by nd_sbp.
void describe_piece(proto::TensorDesc& desc, const Placement& placement, const NdSbp& nd_sbp) {
  desc.set_placement(placement.str());
  desc.set_sbp(nd_sbp_str(nd_sbp));
}

// The module path owning a variable: "model.0.weight" -> "model.0".
std::string owner_scope(const std::string& variable) {
  const size_t dot = variable.rfind('.');
  return dot == std::string::npos ? "" : variable.substr(0, dot);
}

}  // namespace

bool is_traced(const Tensor& t) {
  if (!t.defined()) return false;
  if (t.is_global()) return t.impl()->global->local.defined() && t.impl()->global->local.is_lazy();
  return t.is_lazy();
}

Tracer::Tracer(const std::string& job_name, std::map<TensorImpl*, std::string> variable_names, int debug_level, std::ostream& log)
    : variable_names_(std::move(variable_names)), debug_level_(debug_level), log_(log) {
  job_.set_version(kJobVersion);
  job_.set_name(job_name);
}

Tracer::~Tracer() { release(); }

void Tracer::release() {
  for (auto& t : marked_eager_) t.impl()->lazy.reset();
  marked_eager_.clear();
}

std::string Tracer::unique_name(const std::string& base) {
  const std::string scope = current_scope();
  const std::string stem = scope.empty() ? base : scope + "." + base;
  const int n = name_counts_[stem]++;
  return n == 0 ? stem : stem + "_" + std::to_string(n);
}

std::string Tracer::current_scope() const { return scopes_.empty() ? "" : scopes_.back(); }

void Tracer::push_scope(const std::string& scope) { scopes_.push_back(scope); }
void Tracer::pop_scope() {
  CHECK(!scopes_.empty());
  scopes_.pop_back();
}

void Tracer::mark(const Tensor& t, const std::string& value) {
  if (t.impl()->lazy == nullptr && t.storage() != nullptr) marked_eager_.push_back(t);
  t.impl()->lazy = std::make_shared<LazyInfo>(LazyInfo{value});
}

std::string Tracer::value_of(const Tensor& t) {
  if (t.impl()->lazy) return t.impl()->lazy->value;
  return capture(t, t.impl());
}

std::string Tracer::capture(const Tensor& t, const TensorImpl* owner) {
  proto::Node node;
  auto named = variable_names_.find(const_cast<TensorImpl*>(owner));
  if (named != variable_names_.end()) {
    node.set_name(named->second);
    node.set_op(kVariableOp);
    (*node.mutable_attrs())["key"].set_s(named->second);
  } else {
    node.set_name(unique_name("_constant"));
    node.set_op(kConstantOp);
    (*node.mutable_attrs())["key"].set_s(node.name());
  }
  *node.add_outputs() = describe(meta_of_tensor(t));
  if (owner->global) describe_piece(*node.mutable_outputs(0), owner->global->placement, owner->global->nd_sbp);
  captured_[node.name()] = t;
  const std::string value = value_name(node.name(), 0);
  mark(t, value);
  if (global_depth_ == 0) log_node(node);
  if (autograd::is_running_backward()) gradient_nodes_.insert(node.name());
  job_.add_nodes()->Swap(&node);
  return value;
}

Tensor Tracer::add_input(int index, const Tensor& example) { return input_node(index, meta_of_tensor(example), nullptr, {}); }

Tensor Tracer::input_node(int index, const TensorMeta& meta, const Placement* placement, const NdSbp& nd_sbp) {
  proto::Node& node = *job_.add_nodes();
  node.set_name(job_.name() + "_input." + std::to_string(index));
  node.set_op(kInputOp);
  (*node.mutable_attrs())["index"].set_i(index);
  *node.add_outputs() = describe(meta);
  if (placement) describe_piece(*node.mutable_outputs(0), *placement, nd_sbp);
  log_node(node);
  return lazy_tensor(meta, value_name(node.name(), 0));
}

Tensor Tracer::add_global_input(int index, const TensorMeta& meta, const Placement& placement, const NdSbp& nd_sbp) {
  const int64_t position = placement.index_of(distributed::get_rank());
  if (position < 0) return distributed::make_global(meta, placement, nd_sbp, Tensor());  // no piece here, no input node
  const TensorMeta piece{local_shape(meta.shape, placement, nd_sbp, position), meta.dtype, meta.device};
  const Tensor lazy_piece = input_node(index, piece, &placement, nd_sbp);
  return distributed::make_global(meta, placement, nd_sbp, lazy_piece);
}

Tensor Tracer::add_feed(const std::string& key, DType dtype, Device device) {
  proto::Node& node = *job_.add_nodes();
  node.set_name(key);
  node.set_op(kFeedOp);
  (*node.mutable_attrs())["key"].set_s(key);
  const TensorMeta meta{Shape{}, dtype, device};
  *node.add_outputs() = describe(meta);
  log_node(node);
  return lazy_tensor(meta, value_name(node.name(), 0));
}

void Tracer::add_output(int index, const Tensor& result) {
  if (!result.defined()) fail("graph", "build() returned an undefined tensor as output ", index);
  const Tensor value = result.is_global() ? result.impl()->global->local : result;
  if (!value.defined()) return;  // a global output on other ranks: the caller gets it without a piece
  const std::string input = value_of(value);
  proto::Node& node = *job_.add_nodes();
  node.set_name(job_.name() + "_output." + std::to_string(index));
  node.set_op(kOutputOp);
  node.add_inputs(input);
  (*node.mutable_attrs())["index"].set_i(index);
  *node.add_outputs() = describe(meta_of_tensor(value));
  if (result.is_global()) describe_piece(*node.mutable_outputs(0), result.placement(), result.sbp());
  log_node(node);
}

TensorList Tracer::apply_global(const OpDef& op, const TensorList& inputs, const Attrs& attrs) {
  for (const Tensor& input : inputs) {
    if (!input.defined() || !input.is_global()) continue;
    const Tensor& piece = input.impl()->global->local;
    if (piece.defined() && !piece.is_lazy()) capture(piece, input.impl());
  }
  const int first = job_.nodes_size();
  struct Depth {
    int& depth;
    explicit Depth(int& d) : depth(++d) {}
    ~Depth() { --depth; }
  };
  TensorList outputs;
  {
    const Depth depth(global_depth_);
    outputs = Interpreter::apply_global(op, inputs, attrs);
  }
  annotate_pieces(outputs, first);
  if (global_depth_ == 0) {
    for (int i = first; i < job_.nodes_size(); ++i) log_node(job_.nodes(i));
  }
  return outputs;
}

void Tracer::annotate_pieces(const TensorList& outputs, int first) {
  for (const Tensor& output : outputs) {
    if (!output.defined() || !output.is_global()) continue;
    const Tensor& piece = output.impl()->global->local;
    if (!piece.defined() || !piece.is_lazy()) continue;
    const auto [name, index] = parse_value_name(piece.impl()->lazy->value);
    for (int i = job_.nodes_size() - 1; i >= first; --i) {
      proto::Node& node = *job_.mutable_nodes(i);
      if (node.name() != name) continue;
      describe_piece(*node.mutable_outputs(index), output.placement(), output.sbp());
      break;
    }
  }
}

TensorList Tracer::apply(const OpDef& op, const TensorList& inputs, const Attrs& attrs) {
  const std::vector<TensorMeta> out_metas = check_and_infer(op, inputs, attrs);
  proto::Node node;
  std::string scope = current_scope();
  for (const auto& input : inputs) {
    node.add_inputs(value_of(input));
    // Ops reading a module's parameter belong to that module even when it was called through
    // forward() rather than operator().
    auto named = variable_names_.find(input.impl());
    if (named != variable_names_.end()) {
      const std::string owner = owner_scope(named->second);
      if (owner.size() > scope.size() && owner.rfind(scope, 0) == 0) scope = owner;
    }
  }
  scopes_.push_back(scope);
  node.set_name(unique_name(op.name));
  scopes_.pop_back();
  node.set_op(op.name);
  node.set_scope(scope);
  set_attrs(node, attrs);
  if (debug_level_ >= 3) node.set_location(caller_location());
  for (const auto& meta : out_metas) *node.add_outputs() = describe(meta);
  if (op.sbp && global_depth_ == 0) {
    // One process: every value is broadcast; the op's signature with all-B inputs must exist.
    for (size_t i = 0; i < inputs.size(); ++i) node.add_input_sbp(Sbp::broadcast().str());
  }
  TensorList outputs;
  outputs.reserve(out_metas.size());
  for (size_t i = 0; i < out_metas.size(); ++i) {
    const std::string value = value_name(node.name(), static_cast<int>(i));
    if (op.inplace) {
      outputs.push_back(inputs[i]);
      mark(inputs[i], value);
    } else if (op.view) {
      // The view's strides and offset follow from its input's, exactly as when it runs.
      Tensor view = op.view(inputs, attrs);
      auto impl = std::make_shared<TensorImpl>(*view.impl());
      impl->storage.reset();
      impl->autograd.reset();
      impl->lazy = std::make_shared<LazyInfo>(LazyInfo{value});
      outputs.emplace_back(std::move(impl));
    } else {
      outputs.push_back(lazy_tensor(out_metas[i], value));
    }
  }
  if (global_depth_ == 0) log_node(node);
  if (autograd::is_running_backward()) gradient_nodes_.insert(node.name());
  job_.add_nodes()->Swap(&node);
  record_for_autograd(op, inputs, outputs, attrs);
  return outputs;
}

void Tracer::log_node(const proto::Node& node) const {
  if (debug_level_ < 2) return;
  log_ << "(GRAPH:" << job_.name() << ") op " << node.name() << " = " << node.op() << "(";
  for (int i = 0; i < node.inputs_size(); ++i) log_ << (i ? ", " : "") << node.inputs(i);
  log_ << ")";
  for (const auto& out : node.outputs()) log_ << " -> (" << describe_str(out) << ")";
  if (!node.location().empty()) log_ << " at " << node.location();
  log_ << "\n";
}

std::string caller_location() {
  void* frames[48];
  const int count = backtrace(frames, 48);
  for (int i = 1; i < count; ++i) {
    Dl_info info;
    if (dladdr(frames[i], &info) == 0 || info.dli_fname == nullptr) continue;
    const std::string object = info.dli_fname;
    if (object.find("libflow_") != std::string::npos || object.find("libstdc++") != std::string::npos) continue;
    std::ostringstream out;
    if (info.dli_sname != nullptr) {
      int status = 0;
      char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
      out << (status == 0 && demangled ? demangled : info.dli_sname);
      std::free(demangled);
    } else {
      out << "?";
    }
    out << " (" << object.substr(object.rfind('/') + 1) << "+0x" << std::hex
        << (static_cast<const char*>(frames[i]) - static_cast<const char*>(info.dli_fbase)) << ")";
    return out.str();
  }
  return "";
}

}  // namespace flow::graph
