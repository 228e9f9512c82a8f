#pragma once
// A ProcessGroup whose ranks are threads of one process: enough of the collectives (all_reduce,
// broadcast, barrier) for testing DDP without Gloo. Each collective completes inside the call
// once every rank has made it, so the returned Work is already done.
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "core/comm/process_group.h"
#include "core/ops/all.h"

namespace flow::testing {

class ThreadProcessGroup final : public distributed::ProcessGroup {
 public:
  // One group per rank, all meeting in the same rendezvous.
  static std::vector<std::shared_ptr<ThreadProcessGroup>> create(int64_t world_size) {
    auto rendezvous = std::make_shared<Rendezvous>(world_size);
    std::vector<std::shared_ptr<ThreadProcessGroup>> groups;
    for (int64_t rank = 0; rank < world_size; ++rank) groups.push_back(std::make_shared<ThreadProcessGroup>(rendezvous, rank));
    return groups;
  }

  struct Rendezvous {
    explicit Rendezvous(int64_t size) : world_size(size), tensors(static_cast<size_t>(size)) {}
    std::mutex mutex;
    std::condition_variable changed;
    int64_t world_size;
    int64_t arrived = 0;
    uint64_t generation = 0;
    std::vector<Tensor> tensors;
  };

  ThreadProcessGroup(std::shared_ptr<Rendezvous> rendezvous, int64_t rank) : rendezvous_(std::move(rendezvous)), rank_(rank) {}

  int64_t rank() const override { return rank_; }
  int64_t world_size() const override { return rendezvous_->world_size; }
  int64_t local_rank() const override { return rank_; }
  int64_t local_world_size() const override { return rendezvous_->world_size; }
  std::chrono::milliseconds timeout() const override { return std::chrono::milliseconds(10000); }
  int64_t collectives() const { return collectives_; }

  std::shared_ptr<distributed::Work> all_reduce(const Tensor& tensor, distributed::ReduceOp reduce,
                                                const distributed::Ranks&) override {
    if (reduce != distributed::ReduceOp::kSum) fail("ThreadProcessGroup", "only sum");
    meet(tensor, [](std::vector<Tensor>& all) {
      Tensor sum = all[0].clone();
      for (size_t i = 1; i < all.size(); ++i) sum = sum + all[i];
      for (Tensor& t : all) t.copy_(sum);
    });
    return std::make_shared<Done>();
  }
  std::shared_ptr<distributed::Work> broadcast(const Tensor& tensor, int64_t root, const distributed::Ranks&) override {
    meet(tensor, [root](std::vector<Tensor>& all) {
      for (Tensor& t : all) t.copy_(all[static_cast<size_t>(root)]);
    });
    return std::make_shared<Done>();
  }
  void barrier(const distributed::Ranks&) override {
    meet(Tensor(), [](std::vector<Tensor>&) {});
  }
  std::shared_ptr<distributed::Work> all_gather(const Tensor&, const Tensor&, const std::vector<int64_t>&,
                                                const distributed::Ranks&) override {
    fail("ThreadProcessGroup", "all_gather is not implemented");
  }
  std::shared_ptr<distributed::Work> reduce_scatter(const Tensor&, const Tensor&, const std::vector<int64_t>&,
                                                    distributed::ReduceOp, const distributed::Ranks&) override {
    fail("ThreadProcessGroup", "reduce_scatter is not implemented");
  }
  std::shared_ptr<distributed::Work> all_to_all(const Tensor&, const std::vector<int64_t>&, const Tensor&,
                                                const std::vector<int64_t>&, const distributed::Ranks&) override {
    fail("ThreadProcessGroup", "all_to_all is not implemented");
  }
  std::shared_ptr<distributed::Work> send(const Tensor&, int64_t) override { fail("ThreadProcessGroup", "no send"); }
  std::shared_ptr<distributed::Work> recv(const Tensor&, int64_t) override { fail("ThreadProcessGroup", "no recv"); }

 private:
  struct Done final : distributed::Work {
    void wait() override {}
    bool completed() const override { return true; }
  };

  // Waits for every rank; the last one to arrive runs combine over all ranks' tensors.
  template <typename Combine>
  void meet(const Tensor& tensor, Combine combine) {
    ++collectives_;
    Rendezvous& r = *rendezvous_;
    std::unique_lock<std::mutex> lock(r.mutex);
    const uint64_t generation = r.generation;
    r.tensors[static_cast<size_t>(rank_)] = tensor;
    if (++r.arrived == r.world_size) {
      combine(r.tensors);
      r.arrived = 0;
      ++r.generation;
      r.changed.notify_all();
      return;
    }
    r.changed.wait(lock, [&] { return r.generation != generation; });
  }

  std::shared_ptr<Rendezvous> rendezvous_;
  int64_t rank_;
  int64_t collectives_ = 0;
};

}  // namespace flow::testing
