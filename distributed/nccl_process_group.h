#pragma once
// ProcessGroup over NCCL for CUDA tensors (built when NCCL is found).
//
// One communicator per member list and device, created on first use: member 0 makes the
// ncclUniqueId and shares it through the rendezvous store. Each communicator has its own stream,
// ordered after flow's compute (the legacy default stream) by an event. Members first agree on
// the collective through the Gloo group (a small CPU round trip per collective). Work::wait()
// polls the stream's event and ncclCommGetAsyncError; past the timeout it aborts the
// communicator (ncclCommAbort) and the group becomes unusable.
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/comm/process_group.h"
#include "distributed/agreement.h"

namespace flow::distributed {

class GlooProcessGroup;
class StoreClient;

class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(std::shared_ptr<GlooProcessGroup> cpu, std::shared_ptr<StoreClient> store);
  ~NcclProcessGroup() override;

  int64_t rank() const override;
  int64_t world_size() const override;
  int64_t local_rank() const override;
  int64_t local_world_size() const override;
  std::chrono::milliseconds timeout() const override;

  std::shared_ptr<Work> all_reduce(const Tensor& tensor, ReduceOp reduce, const Ranks& ranks) override;
  std::shared_ptr<Work> all_gather(const Tensor& input, const Tensor& output, const std::vector<int64_t>& dim0_sizes,
                                   const Ranks& ranks) override;
  std::shared_ptr<Work> reduce_scatter(const Tensor& input, const Tensor& output, const std::vector<int64_t>& dim0_sizes,
                                       ReduceOp reduce, const Ranks& ranks) override;
  std::shared_ptr<Work> broadcast(const Tensor& tensor, int64_t root, const Ranks& ranks) override;
  std::shared_ptr<Work> all_to_all(const Tensor& input, const std::vector<int64_t>& send_sizes, const Tensor& output,
                                   const std::vector<int64_t>& recv_sizes, const Ranks& ranks) override;
  std::shared_ptr<Work> send(const Tensor& tensor, int64_t peer) override;
  std::shared_ptr<Work> recv(const Tensor& tensor, int64_t peer) override;
  void barrier(const Ranks& ranks) override;

  struct Communicator;
  // Marks the group unusable (a communicator was aborted).
  void mark_broken(const std::string& reason);

 private:
  Ranks members_of(const Ranks& ranks, const char* op) const;
  Communicator& communicator(const Ranks& members, int device, const char* op);
  // Agrees on header through Gloo, orders the communicator's stream after compute, runs enqueue
  // (the NCCL calls) on it, and returns a Work that waits for them.
  std::shared_ptr<Work> launch(const CollectiveHeader& header, const Ranks& ranks, const Tensor& tensor,
                               const std::function<void(Communicator&)>& enqueue);
  void throw_if_broken(const char* op) const;

  std::shared_ptr<GlooProcessGroup> cpu_;
  std::shared_ptr<StoreClient> store_;
  std::mutex mutex_;  // communicators_: collectives may be launched from several threads
  std::map<std::pair<Ranks, int>, std::unique_ptr<Communicator>> communicators_;
  mutable std::mutex broken_mutex_;
  std::string broken_reason_;
};

}  // namespace flow::distributed
