#include "core/comm/process_group.h"

#include <mutex>

namespace flow::distributed {

namespace {
std::mutex group_mutex;
std::shared_ptr<ProcessGroup>& installed_group() {
  static std::shared_ptr<ProcessGroup> group;
  return group;
}
}  // namespace

const char* reduce_op_name(ReduceOp reduce) {
  switch (reduce) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kAvg: return "avg";
  }
  return "?";
}

ReduceOp reduce_op_from_name(const std::string& name, const char* op) {
  for (ReduceOp reduce : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg}) {
    if (name == reduce_op_name(reduce)) return reduce;
  }
  fail(op, "unknown reduction '", name, "' (sum, max, min or avg)");
}

void set_process_group(std::shared_ptr<ProcessGroup> group) {
  std::lock_guard<std::mutex> lock(group_mutex);
  installed_group() = std::move(group);
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(group_mutex);
  return installed_group() != nullptr;
}

ProcessGroup& process_group(const char* op) {
  std::lock_guard<std::mutex> lock(group_mutex);
  if (!installed_group()) fail(op, "no process group: call flow::distributed::init_process_group() first");
  return *installed_group();
}

int64_t get_rank() {
  std::lock_guard<std::mutex> lock(group_mutex);
  return installed_group() ? installed_group()->rank() : 0;
}

int64_t get_world_size() {
  std::lock_guard<std::mutex> lock(group_mutex);
  return installed_group() ? installed_group()->world_size() : 1;
}

}  // namespace flow::distributed
