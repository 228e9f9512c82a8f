#pragma once
// The plan: the optimised Job lowered to tasks (one actor each) whose outputs are register
// descriptors with a register_num, and a memory plan giving every intermediate buffer an offset
// in one block per device from a liveness analysis, so that the planned peak is the real peak.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "job/job.h"

namespace flow::graph {

struct RegisterDesc {
  int register_num = 1;
  std::vector<std::string> values;  // the Job values the register holds, in order
};

struct TaskDesc {
  std::string name;
  std::vector<int> nodes;   // Job positions the task runs, in order
  std::string thread;       // "<device>:io" for the input task, "<device>:compute" otherwise
  std::vector<int> inputs;  // producing tasks, and the previous compute task (Job order)
  bool gated = true;        // compute tasks share the memory plan: one piece at a time
  // A send or recv on a thread per peer and direction ("<device>:send:<peer>",
  // "<device>:recv:<peer>"), in Job order there: it blocks until the peer takes part, so the
  // runtime never runs it on the caller's thread. A received value gets fresh memory; a sent
  // buffer is reused only after its send finished (at most 2 sent buffers per peer alive).
  bool waits_for_peers = false;
  RegisterDesc out;
};

struct PlannedBuffer {
  std::string device;
  int64_t offset = 0;
  int64_t nbytes = 0;
  int first = 0, last = 0;  // Job positions of the definition and the last use (aliases included)
};

struct Plan {
  std::vector<TaskDesc> tasks;
  std::map<std::string, int> task_of_value;      // producing task of each value computed by a task
  std::map<std::string, PlannedBuffer> buffers;  // by value; views and in-place outputs share their root's
  std::map<std::string, std::string> root_of;    // value -> the value owning its memory
  std::map<std::string, int64_t> block_bytes;    // per device: the planned peak
  int64_t total_buffer_bytes = 0;                // what the same buffers take without reuse
  std::string summary() const;
};

// Values alias their root's memory: a view's output aliases its input 0, an in-place op's
// output i aliases its input i. Buffers reaching a graph output are not planned (they are handed
// to the caller), nor are inputs, variables, constants and feeds, nor the values named in
// `unplanned` (a runner that keeps them in memory of its own, like oneflow_lite's blocked layouts).
Plan make_plan(const proto::Job& job, const std::set<std::string>& unplanned = {});

// The contiguous tensor of `meta` that a planned buffer occupies in its device's memory block.
Tensor planned_tensor(const Tensor& block, const PlannedBuffer& buffer, const TensorMeta& meta);

}  // namespace flow::graph
