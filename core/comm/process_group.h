#pragma once
// The process-group seam. core defines what a communicator does; distributed/ (flow_distributed)
// implements it with Gloo (CPU tensors) and NCCL (CUDA tensors) and installs it from
// init_process_group(). The collective ops (core/ops/comm.cpp), boxing of global tensors and DDP
// call the installed group, so nothing in core depends on Gloo, NCCL or gRPC.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace flow::distributed {

enum class ReduceOp : uint8_t { kSum, kMax, kMin, kAvg };
const char* reduce_op_name(ReduceOp reduce);  // "sum", "max", "min", "avg"
// Parses a name of reduce_op_name; flow::Error prefixed with [op] otherwise.
ReduceOp reduce_op_from_name(const std::string& name, const char* op);

// Global ranks taking part in one collective: sorted, unique, including the caller. Empty means
// every rank of the group. A member's position in this list is its index in the collective.
using Ranks = std::vector<int64_t>;

// A collective in flight. wait() returns when it is done and rethrows its failure as a
// flow::Error; it never waits longer than the group's timeout.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  virtual bool completed() const = 0;
};

// Collectives over contiguous tensors of one device; every member calls the same collective, in
// the same order, with tensors of the same dtype. Each collective checks that the members agree
// (op, dtype, element counts) and fails with a flow::Error naming the op, this rank and the
// peer that disagrees, died or timed out. Collectives run in submission order on one
// communication thread per group, so an asynchronous one overlaps the caller's compute.
class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int64_t rank() const = 0;
  virtual int64_t world_size() const = 0;
  virtual int64_t local_rank() const = 0;
  virtual int64_t local_world_size() const = 0;
  virtual std::chrono::milliseconds timeout() const = 0;

  // In place: every member's tensor becomes the reduction of all members' tensors.
  virtual std::shared_ptr<Work> all_reduce(const Tensor& tensor, ReduceOp reduce, const Ranks& ranks) = 0;
  // output = concatenation along dim 0 of every member's input, in member order. Member i's
  // input has dim0_sizes[i] rows; the other dims are equal (uneven splits are allowed).
  virtual std::shared_ptr<Work> all_gather(const Tensor& input, const Tensor& output, const std::vector<int64_t>& dim0_sizes,
                                           const Ranks& ranks) = 0;
  // input (same shape on every member) is reduced over the members; output receives this
  // member's rows: dim0_sizes[i] rows for member i, in member order.
  virtual std::shared_ptr<Work> reduce_scatter(const Tensor& input, const Tensor& output, const std::vector<int64_t>& dim0_sizes,
                                               ReduceOp reduce, const Ranks& ranks) = 0;
  // In place: every member's tensor becomes the root's (root is a global rank in ranks).
  virtual std::shared_ptr<Work> broadcast(const Tensor& tensor, int64_t root, const Ranks& ranks) = 0;
  // input's dim 0 is cut into blocks of send_sizes[i] rows, block i going to member i; output
  // receives recv_sizes[i] rows from member i, in member order. Other dims are equal.
  virtual std::shared_ptr<Work> all_to_all(const Tensor& input, const std::vector<int64_t>& send_sizes, const Tensor& output,
                                           const std::vector<int64_t>& recv_sizes, const Ranks& ranks) = 0;
  // Point to point with a global rank; both sides agree on dtype and element count.
  virtual std::shared_ptr<Work> send(const Tensor& tensor, int64_t peer) = 0;
  virtual std::shared_ptr<Work> recv(const Tensor& tensor, int64_t peer) = 0;
  virtual void barrier(const Ranks& ranks) = 0;
};

// Installs the group used by collectives (init_process_group does this); null uninstalls it.
void set_process_group(std::shared_ptr<ProcessGroup> group);
bool is_initialized();
// The installed group, or flow::Error "[op] no process group: call
// flow::distributed::init_process_group() first".
ProcessGroup& process_group(const char* op);
// This process's rank and the number of processes: 0 and 1 without a process group.
int64_t get_rank();
int64_t get_world_size();

}  // namespace flow::distributed
