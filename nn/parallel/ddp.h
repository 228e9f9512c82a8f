#pragma once
// DistributedDataParallel: PyTorch's data-parallel wrapper for eager training. Every rank holds
// a full replica; construction broadcasts rank 0's parameters and buffers, and backward
// averages the gradients over the ranks in buckets whose all_reduce starts, from the
// parameters' post-accumulate-grad hooks, while the rest of backward still runs. When backward
// returns, every rank holds the same averaged .grad, so identical optimizer steps keep the
// replicas identical. Only the ProcessGroup interface of core is used (no Gloo, no NCCL here).
#include <memory>
#include <string>
#include <vector>

#include "core/comm/process_group.h"
#include "core/global/buckets.h"
#include "nn/module.h"

namespace flow::nn::parallel {

struct DistributedDataParallelOptions {
  // Upper bound of one bucket's gradients in MiB. The first bucket (the last layers, whose
  // gradients are ready first) is capped at 1 MiB so communication starts early, as in PyTorch.
  DistributedDataParallelOptions& bucket_cap_mb(double v) { bucket_cap_mb_ = v; return *this; }
  // Broadcast rank 0's buffers (batch-norm statistics, ...) at every forward.
  DistributedDataParallelOptions& broadcast_buffers(bool v) { broadcast_buffers_ = v; return *this; }
  // Find, at every forward, the parameters the output does not depend on, and count them as
  // ready (with a zero gradient) so that their buckets still reduce.
  DistributedDataParallelOptions& find_unused_parameters(bool v) { find_unused_parameters_ = v; return *this; }
  // The global ranks replicating this module (sorted, including this rank); empty: all of them.
  DistributedDataParallelOptions& ranks(distributed::Ranks v) { ranks_ = std::move(v); return *this; }
  // The group to communicate over; null: the one init_process_group() installed.
  DistributedDataParallelOptions& process_group(std::shared_ptr<distributed::ProcessGroup> v) {
    process_group_ = std::move(v);
    return *this;
  }
  double bucket_cap_mb_ = 25;
  bool broadcast_buffers_ = true;
  bool find_unused_parameters_ = false;
  distributed::Ranks ranks_;
  std::shared_ptr<distributed::ProcessGroup> process_group_;
};

class DistributedDataParallel : public Module {
 public:
  // Registers module's parameters, buffers and children as its own, under the same names, so
  // parameters(), state_dict() and load_state_dict() are the module's and checkpoints move
  // freely between the wrapped and the plain model.
  explicit DistributedDataParallel(std::shared_ptr<Module> module, DistributedDataParallelOptions options = {});
  ~DistributedDataParallel() override;

  std::string name() const override { return "DistributedDataParallel"; }
  // Runs the module. With grad enabled and outside no_sync(), the next backward averages grads.
  Tensor forward(const Tensor& input) override;
  void train(bool on = true) override;
  const std::shared_ptr<Module>& module() const { return module_; }

  // While alive, forwards skip gradient averaging: backward accumulates local gradients, and
  // the first backward after the guard averages everything accumulated.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.require_backward_grad_sync_) {
      ddp_.require_backward_grad_sync_ = false;
    }
    ~NoSyncGuard() { ddp_.require_backward_grad_sync_ = previous_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  // Parameter indices (registration order of parameters()) per bucket, in launch order.
  std::vector<std::vector<size_t>> bucket_indices() const;
  int64_t world_size() const { return world_size_; }

 private:
  struct Bucket {
    std::vector<size_t> params;
    distributed::FlatLayout layout;  // where each parameter's gradient sits in flat
    Tensor flat;                     // the bucket's gradients, contiguous
    size_t pending = 0;              // parameters whose gradient this backward still waits for
    std::shared_ptr<distributed::Work> work;
  };

  void build_buckets(double cap_mb);
  void broadcast_from_root(const TensorList& tensors);
  void arm(const Tensor& output);
  void mark_ready(size_t param, const Tensor& grad);
  void launch_ready_buckets();
  void finish_reduction();
  void wait_in_flight() noexcept;
  std::string unready_parameters() const;

  std::shared_ptr<Module> module_;
  DistributedDataParallelOptions options_;
  std::shared_ptr<distributed::ProcessGroup> owned_group_;
  distributed::ProcessGroup* group_ = nullptr;
  int64_t world_size_ = 1;
  int64_t root_ = 0;

  std::vector<std::pair<std::string, Tensor>> params_;  // those requiring grad
  std::vector<size_t> bucket_of_;
  std::vector<size_t> slot_of_;  // position within its bucket
  std::vector<bool> ready_;
  std::vector<Bucket> buckets_;
  std::vector<RemovableHandle> hooks_;

  bool require_backward_grad_sync_ = true;
  bool armed_ = false;         // the coming backward reduces
  size_t next_bucket_ = 0;     // buckets launch in index order on every rank
};

// Saves state once for a job: rank 0 writes path (flow::save replaces the file atomically), then
// every rank waits at a barrier, so that a flow::load(path) after this call sees the new file
// on every rank. Without a process group it just saves.
void save_on_rank0(const StateDict& state, const std::string& path);

}  // namespace flow::nn::parallel
