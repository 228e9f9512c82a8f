#include "job/plan.h"

#include <glog/logging.h>

#include <algorithm>
#include <climits>
#include <set>
#include <sstream>

#include "core/ops/comm.h"

namespace flow::graph {
namespace {

constexpr int64_t kAlignment = 64;

int64_t buffer_bytes(const proto::TensorDesc& desc) {
  const TensorMeta meta = meta_of(desc);
  const int64_t bytes = meta.shape.nbytes(itemsize(meta.dtype), "plan");
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

// First-fit offsets, largest buffers first, avoiding buffers whose lifetimes overlap.
void assign_offsets(std::vector<PlannedBuffer*>& buffers, int64_t& peak) {
  std::stable_sort(buffers.begin(), buffers.end(), [](const PlannedBuffer* a, const PlannedBuffer* b) { return a->nbytes > b->nbytes; });
  std::vector<PlannedBuffer*> placed;
  peak = 0;
  for (PlannedBuffer* buffer : buffers) {
    std::vector<std::pair<int64_t, int64_t>> taken;
    for (const PlannedBuffer* other : placed) {
      if (other->first <= buffer->last && buffer->first <= other->last) taken.emplace_back(other->offset, other->offset + other->nbytes);
    }
    std::sort(taken.begin(), taken.end());
    int64_t offset = 0;
    for (const auto& [begin, end] : taken) {
      if (offset + buffer->nbytes <= begin) break;
      offset = std::max(offset, end);
    }
    buffer->offset = offset;
    peak = std::max(peak, offset + buffer->nbytes);
    placed.push_back(buffer);
  }
}

bool is_point_to_point(const proto::Node& node) {
  return !is_source_kind(node.op()) && node.op() != kOutputOp && distributed::is_point_to_point(find_op(node.op()));
}

// Liveness of every root buffer computed by an op: plan.root_of and plan.buffers.
void plan_buffers(const proto::Job& job, Plan& plan) {
  std::set<std::string> escaping;  // roots reaching a graph output
  for (int position = 0; position < job.nodes_size(); ++position) {
    const proto::Node& node = job.nodes(position);
    if (is_source_kind(node.op())) {
      plan.root_of[value_name(node.name(), 0)] = "";  // external memory
      continue;
    }
    if (node.op() == kOutputOp) {
      const std::string& root = plan.root_of.at(node.inputs(0));
      if (!root.empty()) escaping.insert(root);
      continue;
    }
    const OpDef& op = find_op(node.op());
    for (int j = 0; j < node.outputs_size(); ++j) {
      const std::string value = value_name(node.name(), j);
      if (op.view) {
        plan.root_of[value] = plan.root_of.at(node.inputs(0));
      } else if (op.inplace) {
        plan.root_of[value] = plan.root_of.at(node.inputs(j));
      } else {
        plan.root_of[value] = value;
        PlannedBuffer buffer;
        buffer.device = node.outputs(j).device();
        buffer.nbytes = buffer_bytes(node.outputs(j));
        buffer.first = buffer.last = position;
        plan.buffers[value] = buffer;
      }
    }
    for (const auto& input : node.inputs()) {
      const std::string& root = plan.root_of.at(input);
      if (!root.empty()) plan.buffers.at(root).last = position;
    }
  }
  for (const auto& root : escaping) plan.buffers.erase(root);
}

// A sent value's memory may be reused once its send finished. Each send's buffer stays alive
// until the next send on its thread (kSendsInFlight - 1 sends later), and the first compute task
// after that waits for the send: at most kSendsInFlight sent buffers per peer, and compute waits
// for a send only when it is that far behind.
constexpr int kSendsInFlight = 2;

// The last Job position at which an in-place op writes each planned root.
std::map<std::string, int> last_in_place_writes(const proto::Job& job, const Plan& plan) {
  std::map<std::string, int> last;
  for (int position = 0; position < job.nodes_size(); ++position) {
    const proto::Node& node = job.nodes(position);
    for (int i = 0; i < written_inputs(node); ++i) last[plan.root_of.at(node.inputs(i))] = position;
  }
  return last;
}

// Whether the send at `position` may run on its own thread while compute goes on: what it reads
// must stay as it is until it is sent. Memory outside the plan (variables, inputs) and buffers an
// in-place op writes later are sent in Job order instead.
bool sends_asynchronously(const proto::Job& job, const Plan& plan, const std::map<std::string, int>& in_place_writes, int position) {
  const std::string& root = plan.root_of.at(job.nodes(position).inputs(0));
  if (root.empty() || !plan.buffers.count(root)) return false;
  const auto written = in_place_writes.find(root);
  return written == in_place_writes.end() || written->second < position;
}

// Keeps each asynchronous send's buffer alive (see kSendsInFlight) and returns, per compute task,
// the send tasks it waits for.
std::map<int, std::set<int>> hold_sent_buffers(const proto::Job& job, Plan& plan) {
  std::map<std::string, std::vector<int>> sends_by_thread;  // in Job order
  std::vector<std::pair<int, int>> compute_positions;       // (Job position, task), in Job order
  for (int t = 0; t < static_cast<int>(plan.tasks.size()); ++t) {
    const TaskDesc& task = plan.tasks[t];
    const int position = task.nodes.front();
    if (task.waits_for_peers && job.nodes(position).op() == "comm_send") sends_by_thread[task.thread].push_back(t);
    if (task.gated && !task.waits_for_peers) compute_positions.emplace_back(position, t);
  }
  auto sent_buffer = [&](int t) -> PlannedBuffer& { return plan.buffers.at(plan.root_of.at(job.nodes(plan.tasks[t].nodes.front()).inputs(0))); };
  for (const auto& [thread, sends] : sends_by_thread) {
    for (size_t k = 0; k < sends.size(); ++k) {
      const size_t until = k + kSendsInFlight - 1;
      PlannedBuffer& buffer = sent_buffer(sends[k]);
      buffer.last = std::max(buffer.last, until < sends.size() ? plan.tasks[sends[until]].nodes.front() : job.nodes_size());
    }
  }
  std::map<int, std::set<int>> waits;
  for (const auto& [thread, sends] : sends_by_thread) {
    for (int send : sends) {
      const int last = sent_buffer(send).last;
      auto reuser = std::upper_bound(compute_positions.begin(), compute_positions.end(), std::make_pair(last, INT_MAX));
      if (reuser != compute_positions.end()) waits[reuser->second].insert(send);
    }
  }
  return waits;
}

}  // namespace

Plan make_plan(const proto::Job& job, const std::set<std::string>& unplanned) {
  Plan plan;
  const JobIndex index(job);
  plan_buffers(job, plan);
  for (const auto& value : unplanned) plan.buffers.erase(value);
  const std::map<std::string, int> in_place_writes = last_in_place_writes(job, plan);
  TaskDesc inputs_task;
  inputs_task.name = job.name() + "_inputs";
  inputs_task.gated = false;
  inputs_task.out.register_num = 2;  // the input path runs one piece ahead of compute
  std::string io_device;

  for (int position = 0; position < job.nodes_size(); ++position) {
    const proto::Node& node = job.nodes(position);
    if (node.op() == kVariableOp || node.op() == kConstantOp) continue;
    if (node.op() == kInputOp || node.op() == kFeedOp) {
      inputs_task.nodes.push_back(position);
      inputs_task.out.values.push_back(value_name(node.name(), 0));
      if (io_device.empty() || node.op() == kInputOp) io_device = node.outputs(0).device();
      continue;
    }
    TaskDesc task;
    task.name = node.name();
    task.nodes = {position};
    const bool sends = node.op() == "comm_send";
    std::string device = node.outputs_size() > 0 ? node.outputs(0).device() : "cpu";
    if (sends) {
      const auto [producer, output] = parse_value_name(node.inputs(0));
      device = index.node(producer).outputs(output).device();
    }
    task.thread = device + ":compute";
    if (is_point_to_point(node) && (!sends || sends_asynchronously(job, plan, in_place_writes, position))) {
      // One thread per peer and direction, so a transfer waits only for its own peer.
      task.thread = device + (sends ? ":send:" : ":recv:") + std::to_string(node.attrs().at("peer").i());
      task.waits_for_peers = true;
      if (!sends) plan.buffers.erase(value_name(node.name(), 0));  // a received value gets fresh memory each time
    }
    for (int j = 0; j < node.outputs_size(); ++j) task.out.values.push_back(value_name(node.name(), j));
    plan.tasks.push_back(std::move(task));
  }
  if (!inputs_task.nodes.empty()) {
    inputs_task.thread = io_device + ":io";
    plan.tasks.insert(plan.tasks.begin(), std::move(inputs_task));
  }
  for (int t = 0; t < static_cast<int>(plan.tasks.size()); ++t) {
    for (const auto& value : plan.tasks[t].out.values) plan.task_of_value[value] = t;
  }
  std::map<int, std::set<int>> waits_for_sends = hold_sent_buffers(job, plan);
  // Compute tasks run in Job order: the memory plan reuses buffers by Job position, and an
  // in-place write of a variable must follow every read of its old value. Sends and receives
  // each run in Job order on their own thread, so that the n-th send to a peer meets the peer's
  // n-th receive while compute goes on.
  std::map<std::string, int> previous_in_order;  // per chain: compute, or a send/recv thread
  for (int t = 0; t < static_cast<int>(plan.tasks.size()); ++t) {
    TaskDesc& task = plan.tasks[t];
    std::set<int> producers = std::move(waits_for_sends[t]);
    if (task.gated) {
      const std::string chain = task.waits_for_peers ? task.thread : "compute";
      auto previous = previous_in_order.find(chain);
      if (previous != previous_in_order.end()) producers.insert(previous->second);
      previous_in_order[chain] = t;
    }
    for (int position : task.nodes) {
      for (const auto& input : job.nodes(position).inputs()) {
        auto producer = plan.task_of_value.find(input);
        if (producer != plan.task_of_value.end()) producers.insert(producer->second);
      }
    }
    task.inputs.assign(producers.begin(), producers.end());
  }

  std::map<std::string, std::vector<PlannedBuffer*>> by_device;
  for (auto& [value, buffer] : plan.buffers) {
    by_device[buffer.device].push_back(&buffer);
    plan.total_buffer_bytes += buffer.nbytes;
  }
  for (auto& [device, buffers] : by_device) assign_offsets(buffers, plan.block_bytes[device]);
  return plan;
}

Tensor planned_tensor(const Tensor& block, const PlannedBuffer& buffer, const TensorMeta& meta) {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = meta.shape;
  impl->strides = contiguous_strides(meta.shape);
  impl->offset = buffer.offset / static_cast<int64_t>(itemsize(meta.dtype));
  impl->dtype = meta.dtype;
  impl->device = meta.device;
  impl->storage = block.storage();
  return Tensor(std::move(impl));
}

std::string Plan::summary() const {
  std::ostringstream out;
  int64_t peak = 0;
  for (const auto& [device, bytes] : block_bytes) peak += bytes;
  out << tasks.size() << " tasks, " << buffers.size() << " planned buffers; planned peak " << peak << " bytes (";
  bool first = true;
  for (const auto& [device, bytes] : block_bytes) {
    out << (first ? "" : ", ") << device << ": " << bytes;
    first = false;
  }
  out << ") instead of " << total_buffer_bytes << " without reuse";
  return out.str();
}

}  // namespace flow::graph
