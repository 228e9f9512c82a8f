#pragma once
// The installed process group: CPU tensors go to Gloo, CUDA tensors to NCCL.
#include <memory>
#include <string>

#include "core/comm/process_group.h"

namespace flow::distributed {

class GlooProcessGroup;

class DeviceDispatchGroup final : public ProcessGroup {
 public:
  // cuda may be null; cuda_missing then says why CUDA tensors have no backend.
  DeviceDispatchGroup(std::shared_ptr<GlooProcessGroup> cpu, std::shared_ptr<ProcessGroup> cuda, std::string cuda_missing);
  ~DeviceDispatchGroup() override;

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
  // Through Gloo: a barrier synchronises processes, whatever device they compute on.
  void barrier(const Ranks& ranks) override;

  GlooProcessGroup& cpu() { return *cpu_; }

 private:
  ProcessGroup& backend_for(const Tensor& tensor, const char* op);

  std::shared_ptr<GlooProcessGroup> cpu_;
  std::shared_ptr<ProcessGroup> cuda_;
  std::string cuda_missing_;
};

}  // namespace flow::distributed
