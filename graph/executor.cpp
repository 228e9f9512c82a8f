#include "graph/executor.h"

#include <glog/logging.h>

#include <algorithm>

#include "core/interpreter.h"
#include "core/profiler.h"
#include "core/random.h"
#include "graph/frozen_inference.h"

namespace flow::graph {

Executor::Executor(const proto::Job& job, const Plan& plan, std::map<std::string, Tensor> fixed, const JobLayouts* layouts)
    : job_(job), plan_(plan), fixed_(std::move(fixed)), layouts_(layouts) {
  if (layouts_) {
    layout_arena_ = layouts_->layouts->make_arena();
    layout_values_.resize(layouts_->metas.size());
  }
  for (const auto& [device, bytes] : plan.block_bytes) blocks_[device] = make_tensor({bytes}, kUInt8, Device(device));
  const int num_tasks = static_cast<int>(plan.tasks.size());
  compiled_.resize(num_tasks);
  slots_.resize(num_tasks);
  std::vector<ActorSpec> actors;
  for (int t = 0; t < num_tasks; ++t) {
    const TaskDesc& task = plan.tasks[t];
    slots_[t].resize(task.out.register_num);
    for (int position : task.nodes) {
      const proto::Node& node = job.nodes(position);
      if (node.op() == kInputOp || node.op() == kFeedOp) inputs_task_ = t;
      CompiledNode compiled;
      compiled.node = &node;
      for (const auto& input : node.inputs()) {
        InputRef ref;
        auto producer = plan.task_of_value.find(input);
        if (producer != plan.task_of_value.end()) {
          ref.task = producer->second;
          const auto& values = plan.tasks[ref.task].out.values;
          ref.index = static_cast<int>(std::find(values.begin(), values.end(), input) - values.begin());
        } else {
          const std::string source = parse_value_name(input).first;
          auto found = fixed_.find(source);
          CHECK(found != fixed_.end()) << "no tensor for source node " << source;
          ref.fixed = found->second;
        }
        compiled.inputs.push_back(std::move(ref));
      }
      for (const auto& desc : node.outputs()) compiled.out_metas.push_back(meta_of(desc));
      if (!is_source_kind(node.op()) && node.op() != kOutputOp) {
        compiled.op = &find_op(node.op());
        compiled.attrs = attrs_of(node);
        // A global random tensor's piece (core/ops/creation.cpp) draws its share of the whole's; an
        // op drawing other than one counter per output element says how many ("counters": the
        // fused attention's dropout).
        if (compiled.op->random) {
          compiled.random_numel = compiled.attrs.has("whole_numel") ? compiled.attrs.get<int64_t>("whole_numel")
                                  : compiled.attrs.has("counters")  ? compiled.attrs.get<int64_t>("counters")
                                                                    : compiled.out_metas.at(0).shape.numel();
          if (compiled.attrs.has("piece_start")) compiled.random_start = compiled.attrs.get<int64_t>("piece_start");
        }
        if (layouts_ && layouts_->layouts->runs(layouts_->step_of.at(position))) compiled.layout_step = layouts_->step_of[position];
        if (!compiled.op->view && !compiled.op->inplace) {
          for (size_t j = 0; j < compiled.out_metas.size(); ++j) {
            auto planned = plan.buffers.find(value_name(node.name(), static_cast<int>(j)));
            compiled.planned_outputs.push_back(
                planned == plan.buffers.end() ? Tensor() : planned_tensor(blocks_.at(planned->second.device), planned->second, compiled.out_metas[j]));
          }
        }
      }
      compiled_[t].push_back(std::move(compiled));
    }
    ActorSpec spec;
    spec.name = task.name;
    spec.thread = task.thread;
    spec.inputs = task.inputs;
    spec.register_num = task.out.register_num;
    spec.gated = task.gated;
    spec.waits_for_peers = task.waits_for_peers;
    spec.act = [this, t](int64_t piece, int slot, const std::vector<int>& input_slots) { act(t, piece, slot, input_slots); };
    actors.push_back(std::move(spec));
  }
  runtime_ = std::make_unique<ActorRuntime>(std::move(actors));
}

Tensor Executor::resolve(const InputRef& ref, int task, const std::vector<int>& input_slots) const {
  if (ref.fixed.defined()) return ref.fixed;
  const auto& producers = plan_.tasks[task].inputs;
  const size_t position = std::find(producers.begin(), producers.end(), ref.task) - producers.begin();
  return slots_[ref.task][input_slots[position]][ref.index];
}

void Executor::act(int task, int64_t piece, int slot, const std::vector<int>& input_slots) {
  // One event per task run (on the actor's thread), and one per node inside it.
  const profiler::RecordScope task_scope(plan_.tasks[task].name, "graph_task");
  TensorList& out = slots_[task][slot];
  out.clear();
  if (task == inputs_task_) {
    TensorList inputs;
    std::map<std::string, Tensor> feeds;
    (*source_)(piece, inputs, feeds);
    if (layouts_) plain_pieces_.at(static_cast<size_t>(piece)) = !layouts_->layouts->accepts(inputs);
    for (const CompiledNode& compiled : compiled_[task]) {
      const proto::Node& node = *compiled.node;
      Tensor value;
      if (node.op() == kInputOp) {
        value = inputs.at(node.attrs().at("index").i());
      } else {
        auto fed = feeds.find(node.attrs().at("key").s());
        CHECK(fed != feeds.end()) << "no value fed for " << node.attrs().at("key").s();
        value = fed->second;
      }
      out.push_back(value);
    }
    return;
  }
  for (const CompiledNode& compiled : compiled_[task]) {
    TensorList inputs;
    inputs.reserve(compiled.inputs.size());
    for (const auto& ref : compiled.inputs) inputs.push_back(resolve(ref, task, input_slots));
    if (compiled.node->op() == kOutputOp) {
      results_.at(piece).at(compiled.node->attrs().at("index").i()) = inputs.at(0);
      continue;
    }
    if (compiled.layout_step >= 0 && !plain_pieces_[static_cast<size_t>(piece)]) {
      out.push_back(run_blocked(compiled, inputs));
      continue;
    }
    const Attrs* attrs = &compiled.attrs;
    Attrs drawn;
    if (compiled.op->random) {
      auto [seed, offset] = default_generator().reserve(static_cast<uint64_t>(compiled.random_numel));
      drawn = compiled.attrs;
      drawn.set("seed", static_cast<int64_t>(seed)).set("offset", static_cast<int64_t>(offset) + compiled.random_start);
      attrs = &drawn;
    }
    TensorList outputs;
    if (!compiled.planned_outputs.empty()) {
      outputs.reserve(compiled.out_metas.size());
      for (size_t j = 0; j < compiled.out_metas.size(); ++j) {
        const Tensor& planned = compiled.planned_outputs[j];
        const TensorMeta& meta = compiled.out_metas[j];
        outputs.push_back(planned.defined() ? planned : make_tensor(meta.shape, meta.dtype, meta.device));
      }
    }
    const bool profiling = profiler::is_recording();
    const profiler::Clock::time_point start = profiling ? profiler::Clock::now() : profiler::Clock::time_point();
    TensorList values = execute_op(*compiled.op, inputs, *attrs, compiled.out_metas, std::move(outputs));
    if (profiling) profiler::record_op(*compiled.op, inputs, values, *attrs, "graph_node", start);
    for (auto& value : values) out.push_back(std::move(value));
  }
}

Tensor Executor::run_blocked(const CompiledNode& compiled, const TensorList& inputs) {
  const size_t step = static_cast<size_t>(compiled.layout_step);
  const std::vector<int>& ids = layouts_->inputs[step];
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].defined()) layout_values_[ids[i]] = inputs[i];
  }
  const bool profiling = profiler::is_recording();
  const profiler::Clock::time_point start = profiling ? profiler::Clock::now() : profiler::Clock::time_point();
  const int output = layouts_->outputs[step].at(0);
  layout_values_[output] = Tensor();
  layouts_->layouts->run(step, *layout_arena_, layout_values_, compiled.planned_outputs.empty() ? Tensor() : compiled.planned_outputs[0]);
  if (profiling) {
    // The values of blocked steps are not tensors: their metas stand in.
    std::vector<TensorMeta> in_metas;
    for (int id : ids) in_metas.push_back(layouts_->metas[id]);
    profiler::record_op(*compiled.op, in_metas, compiled.out_metas, compiled.attrs, "graph_node", start);
  }
  return layout_values_[output];
}

std::vector<TensorList> Executor::run(int64_t pieces, const PieceSource& source) {
  size_t num_outputs = 0;
  // Outputs by index; a global output with no piece on this rank has no node here.
  for (const auto& node : job_.nodes()) {
    if (node.op() == kOutputOp) num_outputs = std::max<size_t>(num_outputs, static_cast<size_t>(node.attrs().at("index").i()) + 1);
  }
  results_.assign(pieces, TensorList(num_outputs));
  plain_pieces_.assign(static_cast<size_t>(pieces), 0);
  source_ = &source;
  auto release = [&] {
    source_ = nullptr;
    for (auto& slots : slots_) {
      for (auto& values : slots) values.clear();  // drop references to the caller's tensors
    }
    for (auto& value : layout_values_) value = Tensor();
  };
  try {
    runtime_->run(pieces);
  } catch (...) {
    release();
    throw;
  }
  release();
  return std::move(results_);
}

}  // namespace flow::graph
