#include "nn/parallel/ddp.h"

#include <algorithm>
#include <set>
#include <unordered_set>

#include "autograd/node.h"
#include "core/grad_mode.h"
#include "core/ops/all.h"
#include "core/serialization.h"

namespace flow::nn::parallel {
namespace {
constexpr const char* kOp = "DistributedDataParallel";
constexpr double kFirstBucketCapMb = 1.0;

// The leaves `output` depends on, found by walking its backward graph.
std::unordered_set<TensorImpl*> leaves_reached_from(const Tensor& output) {
  std::unordered_set<TensorImpl*> leaves;
  if (!output.defined() || !output.requires_grad()) return leaves;
  const autograd::Edge root = autograd::gradient_edge(output);
  std::set<autograd::Node*> seen{root.node.get()};
  std::vector<autograd::Node*> stack{root.node.get()};
  while (!stack.empty()) {
    autograd::Node* node = stack.back();
    stack.pop_back();
    if (const auto* sink = dynamic_cast<const autograd::AccumulateGrad*>(node)) {
      const Tensor leaf = sink->leaf();
      if (leaf.defined()) leaves.insert(leaf.impl());
    }
    for (const autograd::Edge& edge : node->next_edges()) {
      if (edge.valid() && seen.insert(edge.node.get()).second) stack.push_back(edge.node.get());
    }
  }
  return leaves;
}
}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<Module> module, DistributedDataParallelOptions options)
    : module_(std::move(module)), options_(std::move(options)) {
  if (!module_) fail(kOp, "module is null");
  if (options_.bucket_cap_mb_ <= 0) fail(kOp, "bucket_cap_mb must be positive, got ", options_.bucket_cap_mb_);
  owned_group_ = options_.process_group_;
  group_ = owned_group_ ? owned_group_.get() : &distributed::process_group(kOp);
  const distributed::Ranks& ranks = options_.ranks_;
  if (!ranks.empty()) {
    if (!std::is_sorted(ranks.begin(), ranks.end()) || std::adjacent_find(ranks.begin(), ranks.end()) != ranks.end()) {
      fail(kOp, "ranks must be sorted and unique");
    }
    if (!std::binary_search(ranks.begin(), ranks.end(), group_->rank())) {
      fail(kOp, "ranks do not include this process's rank ", group_->rank());
    }
    if (ranks.front() < 0 || ranks.back() >= group_->world_size()) {
      fail(kOp, "ranks must lie in [0, ", group_->world_size() - 1, "]");
    }
  }
  world_size_ = ranks.empty() ? group_->world_size() : static_cast<int64_t>(ranks.size());
  root_ = ranks.empty() ? 0 : ranks.front();

  for (const auto& [name, param] : module_->named_parameters(false)) register_parameter(name, param, param.requires_grad());
  for (const auto& [name, buffer] : module_->named_buffers(false)) register_buffer(name, buffer);
  for (const auto& [name, child] : module_->named_children()) register_module(name, child);
  train(module_->is_training());

  TensorList everything = module_->parameters();
  for (const Tensor& buffer : module_->buffers()) everything.push_back(buffer);
  broadcast_from_root(everything);

  for (const auto& [name, param] : module_->named_parameters()) {
    if (param.requires_grad()) params_.emplace_back(name, param);
  }
  build_buckets(options_.bucket_cap_mb_);
  ready_.assign(params_.size(), false);
  for (size_t i = 0; i < params_.size(); ++i) {
    hooks_.push_back(params_[i].second.register_post_accumulate_grad_hook([this, i](Tensor& param) {
      if (armed_) mark_ready(i, param.grad());
    }));
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  for (RemovableHandle& hook : hooks_) hook.remove();
  wait_in_flight();
}

void DistributedDataParallel::build_buckets(double cap_mb) {
  constexpr double kMiB = 1024.0 * 1024.0;
  // Backward produces the last-registered parameters' gradients first.
  std::vector<size_t> order;
  std::vector<distributed::BucketEntry> entries;
  for (size_t i = params_.size(); i-- > 0;) {
    const Tensor& param = params_[i].second;
    order.push_back(i);
    entries.push_back({dtype_name(param.dtype()) + "@" + param.device().str(), param.nbytes()});
  }
  const distributed::BucketCaps caps{std::min(cap_mb, kFirstBucketCapMb) * kMiB, cap_mb * kMiB};
  bucket_of_.assign(params_.size(), 0);
  slot_of_.assign(params_.size(), 0);
  for (const std::vector<size_t>& members : distributed::plan_buckets(entries, caps)) {
    Bucket& bucket = buckets_.emplace_back();
    TensorList params;
    for (size_t entry : members) {
      const size_t i = order[entry];
      bucket_of_[i] = buckets_.size() - 1;
      slot_of_[i] = bucket.params.size();
      bucket.params.push_back(i);
      params.push_back(params_[i].second);
    }
    bucket.layout = distributed::FlatLayout(params);
    bucket.flat = zeros(Shape{bucket.layout.total()}, TensorOptions(params[0].dtype()).device(params[0].device()));
  }
}

void DistributedDataParallel::broadcast_from_root(const TensorList& tensors) {
  if (world_size_ == 1) return;
  autograd::NoGradGuard no_grad;
  std::vector<std::shared_ptr<distributed::Work>> works;
  std::vector<std::pair<Tensor, Tensor>> copies_back;  // (target, contiguous staging)
  for (const Tensor& tensor : tensors) {
    if (tensor.numel() == 0) continue;
    Tensor staged = tensor.is_contiguous() ? tensor.detach() : tensor.contiguous();
    if (!tensor.is_contiguous()) copies_back.emplace_back(tensor, staged);
    works.push_back(group_->broadcast(staged, root_, options_.ranks_));
  }
  for (auto& work : works) work->wait();
  for (auto& [target, staged] : copies_back) target.copy_(staged);
}

Tensor DistributedDataParallel::forward(const Tensor& input) {
  const bool reduction_started = std::find(ready_.begin(), ready_.end(), true) != ready_.end();
  if (armed_ && reduction_started) {
    fail(kOp, "expected to have finished reduction in the prior iteration before starting a new one: the parameters ",
         unready_parameters(), " got no gradient. Pass find_unused_parameters(true) if the forward does not use "
         "every parameter, and make sure every rank calls backward on every forward's output");
  }
  armed_ = false;
  if (options_.broadcast_buffers_) broadcast_from_root(module_->buffers());
  Tensor output = (*module_)(input);
  if (is_grad_enabled() && require_backward_grad_sync_ && !params_.empty()) arm(output);
  return output;
}

void DistributedDataParallel::arm(const Tensor& output) {
  armed_ = true;
  next_bucket_ = 0;
  std::fill(ready_.begin(), ready_.end(), false);
  for (Bucket& bucket : buckets_) bucket.pending = bucket.params.size();
  if (!options_.find_unused_parameters_) return;
  const auto used = leaves_reached_from(output);
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!used.count(params_[i].second.impl())) mark_ready(i, Tensor());
  }
}

void DistributedDataParallel::mark_ready(size_t param, const Tensor& grad) {
  if (ready_[param]) {
    armed_ = false;
    fail(kOp, "parameter ", params_[param].first, " got a second gradient in one backward; a backward that "
         "reaches a parameter twice (reentrant backward, or two backwards of one forward) is not supported");
  }
  ready_[param] = true;
  Bucket& bucket = buckets_[bucket_of_[param]];
  Tensor slot = bucket.layout.slot(bucket.flat, slot_of_[param]);
  autograd::NoGradGuard no_grad;
  if (grad.defined()) {
    slot.copy_(grad);
  } else {
    slot.zero_();
  }
  if (--bucket.pending == 0) launch_ready_buckets();
}

void DistributedDataParallel::launch_ready_buckets() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    Bucket& bucket = buckets_[next_bucket_++];
    bucket.work = world_size_ == 1 ? nullptr : group_->all_reduce(bucket.flat, distributed::ReduceOp::kSum, options_.ranks_);
  }
  // The last bucket went out: nothing is left for this backward to overlap with.
  if (next_bucket_ == buckets_.size()) finish_reduction();
}

void DistributedDataParallel::finish_reduction() {
  armed_ = false;
  autograd::NoGradGuard no_grad;
  for (Bucket& bucket : buckets_) {
    if (bucket.work) {
      const auto work = std::move(bucket.work);
      bucket.work = nullptr;
      work->wait();
    }
    if (world_size_ > 1) bucket.flat.copy_(bucket.flat / static_cast<double>(world_size_));
    for (size_t slot = 0; slot < bucket.params.size(); ++slot) {
      Tensor& param = params_[bucket.params[slot]].second;
      Tensor averaged = bucket.layout.slot(bucket.flat, slot);
      Tensor grad = param.grad();
      if (grad.defined()) {
        grad.copy_(averaged);
      } else {
        param.set_grad(averaged.clone());
      }
    }
  }
}

void DistributedDataParallel::wait_in_flight() noexcept {
  for (Bucket& bucket : buckets_) {
    if (!bucket.work) continue;
    try {
      bucket.work->wait();
    } catch (const Error&) {  // the destructor only makes sure nothing writes into freed buckets
    }
    bucket.work = nullptr;
  }
}

std::string DistributedDataParallel::unready_parameters() const {
  std::string names;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!ready_[i]) names += (names.empty() ? "" : ", ") + params_[i].first;
  }
  return names;
}

void DistributedDataParallel::train(bool on) {
  Module::train(on);
  module_->train(on);
}

std::vector<std::vector<size_t>> DistributedDataParallel::bucket_indices() const {
  std::vector<std::vector<size_t>> result;
  for (const Bucket& bucket : buckets_) result.push_back(bucket.params);
  return result;
}

void save_on_rank0(const StateDict& state, const std::string& path) {
  if (distributed::get_rank() == 0) save(state, path);
  if (distributed::is_initialized()) distributed::process_group("save_on_rank0").barrier({});
}

}  // namespace flow::nn::parallel
