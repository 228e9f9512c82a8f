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

JobLayouts plan_job_layouts(const proto::Job& job, const std::map<std::string, Tensor>& fixed) {
  JobLayouts result;
  std::map<std::string, int> value_ids;
  std::vector<std::pair<int, Tensor>> constants;
  std::vector<int> model_outputs;
  std::vector<Attrs> attrs;  // by step; the plan reads them only while planning
  std::vector<LayoutStep> steps;
  std::vector<std::string> value_names;
  result.step_of.assign(job.nodes_size(), -1);
  for (int position = 0; position < job.nodes_size(); ++position) {
    const proto::Node& node = job.nodes(position);
    std::vector<int> in;
    for (const auto& input : node.inputs()) in.push_back(value_ids.at(input));
    if (node.op() == kOutputOp) {
      model_outputs.push_back(in.at(0));
      continue;
    }
    std::vector<int> out;
    for (int j = 0; j < node.outputs_size(); ++j) {
      const std::string value = value_name(node.name(), j);
      value_ids[value] = static_cast<int>(result.metas.size());
      out.push_back(static_cast<int>(result.metas.size()));
      result.metas.push_back(meta_of(node.outputs(j)));
      value_names.push_back(value);
    }
    if (node.op() == kVariableOp || node.op() == kConstantOp) constants.emplace_back(out.at(0), fixed.at(node.name()));
    if (is_source_kind(node.op())) continue;
    result.step_of[position] = static_cast<int>(result.inputs.size());
    result.inputs.push_back(std::move(in));
    result.outputs.push_back(std::move(out));
    attrs.push_back(attrs_of(node));
  }
  for (int position = 0, s = 0; position < job.nodes_size(); ++position) {
    if (result.step_of[position] < 0) continue;
    steps.push_back({&find_op(job.nodes(position).op()), &attrs[s], &result.inputs[s], &result.outputs[s]});
    ++s;
  }
  result.layouts = BlockedLayouts::plan(steps, result.metas, constants, model_outputs, kCheckedInputBound);
  for (int id : result.layouts->blocked_only_values()) result.blocked_only.insert(value_names[id]);
  return result;
}

std::vector<uint64_t> storage_versions(const std::map<std::string, Tensor>& fixed) {
  std::vector<uint64_t> versions;
  versions.reserve(fixed.size());
  for (const auto& [name, t] : fixed) versions.push_back(t.storage()->version());
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
      const Device device = meta_of(desc).device;
      if (device.type != DeviceType::kCPU) return node.name() + " is on " + device.str();
    }
  }
  return has_variables ? "" : "it has no parameters or buffers";
}

FrozenInference::FrozenInference(const proto::Job& job, std::map<std::string, Tensor> fixed, std::vector<uint64_t> versions)
    : versions_(std::move(versions)), threads_(current_num_threads()), job_(job) {
  freeze_variables(job_);
  // What the frozen weights alone determine is computed here, once (into `fixed`).
  PassContext context{fixed};
  PassManager().add("constant_folding", constant_folding).add("dead_code_elimination", dead_code_elimination).run(job_, context);
  layouts_ = plan_job_layouts(job_, fixed);
  plan_ = make_plan(job_, layouts_.blocked_only);
  executor_ = std::make_unique<Executor>(job_, plan_, std::move(fixed), &layouts_);
}

bool FrozenInference::fresh(const std::vector<uint64_t>& versions) const { return threads_ == current_num_threads() && versions == versions_; }

}  // namespace flow::graph
