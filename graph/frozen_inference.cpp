#include "graph/frozen_inference.h"

#include "core/ops/comm.h"
#include "core/thread_pool.h"
#include "graph/passes.h"

namespace flow::graph {

void freeze_variables(proto::Job& job) {
  for (auto& node : *job.mutable_nodes()) {
    if (node.op() != kVariableOp) continue;
    node.set_op(kConstantOp);
    node.clear_attrs();
    (*node.mutable_attrs())["key"].set_s(node.name());
  }
}

std::vector<uint64_t> storage_versions(const std::vector<Tensor>& tensors) {
  std::vector<uint64_t> versions;
  versions.reserve(tensors.size());
  for (const Tensor& t : tensors) versions.push_back(t.storage()->version());
  return versions;
}

std::string FrozenInference::refusal(const proto::Job& job, const std::map<std::string, Tensor>& fixed) {
  const std::set<std::string> written = written_in_place(job);
  bool has_variables = false;
  for (const auto& node : job.nodes()) {
    if (node.op() == kFeedOp) return "it reads the per-run value " + node.name();
    has_variables = has_variables || node.op() == kVariableOp;
    if (node.op() == kVariableOp || node.op() == kConstantOp) {
      const Tensor& t = fixed.at(node.name());
      if (t.is_global()) return node.name() + " is a global tensor";
      if (written.count(value_name(node.name(), 0))) return "it writes " + node.name() + " in place";
    }
    if (!is_source_kind(node.op()) && node.op() != kOutputOp && distributed::is_collective(find_op(node.op()))) {
      return "it communicates (" + node.name() + ")";
    }
    for (const auto& desc : node.outputs()) {
      if (meta_of(desc).device.type != DeviceType::kCPU) return node.name() + " is on " + meta_of(desc).device.str();
    }
  }
  return has_variables ? "" : "it has no parameters or buffers";
}

FrozenInference::FrozenInference(const proto::Job& job, const std::map<std::string, Tensor>& fixed) : threads_(current_num_threads()), job_(job) {
  for (const auto& [name, t] : fixed) frozen_tensors_.push_back(t);
  versions_ = storage_versions(frozen_tensors_);
  fixed_ = fixed;
  freeze_variables(job_);
  // What the frozen weights alone determine is computed here, once.
  PassContext context{fixed_};
  PassManager().add("constant_folding", constant_folding).add("dead_code_elimination", dead_code_elimination).run(job_, context);
  layouts_ = plan_job_layouts(job_, fixed_);
  plan_ = make_plan(job_, layouts_.blocked_only);
  executor_ = std::make_unique<Executor>(job_, plan_, fixed_, &layouts_);
}

bool FrozenInference::fresh() const { return threads_ == current_num_threads() && storage_versions(frozen_tensors_) == versions_; }

}  // namespace flow::graph
