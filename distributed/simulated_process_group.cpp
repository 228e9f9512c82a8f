#include "distributed/simulated_process_group.h"

#include <memory>
#include <string>

#include "core/comm/process_group.h"
#include "core/error.h"

namespace flow::distributed {
namespace {

class SimulatedProcessGroup final : public ProcessGroup {
 public:
  SimulatedProcessGroup(int64_t rank, int64_t world_size) : rank_(rank), world_size_(world_size) {}
  int64_t rank() const override { return rank_; }
  int64_t world_size() const override { return world_size_; }
  int64_t local_rank() const override { return rank_; }
  int64_t local_world_size() const override { return world_size_; }
  std::chrono::milliseconds timeout() const override { return std::chrono::milliseconds(0); }

  std::shared_ptr<Work> all_reduce(const Tensor&, ReduceOp, const Ranks&) override { refuse("all_reduce"); }
  std::shared_ptr<Work> all_gather(const Tensor&, const Tensor&, const std::vector<int64_t>&, const Ranks&) override {
    refuse("all_gather");
  }
  std::shared_ptr<Work> reduce_scatter(const Tensor&, const Tensor&, const std::vector<int64_t>&, ReduceOp, const Ranks&) override {
    refuse("reduce_scatter");
  }
  std::shared_ptr<Work> broadcast(const Tensor&, int64_t, const Ranks&) override { refuse("broadcast"); }
  std::shared_ptr<Work> all_to_all(const Tensor&, const std::vector<int64_t>&, const Tensor&, const std::vector<int64_t>&,
                                   const Ranks&) override {
    refuse("all_to_all");
  }
  std::shared_ptr<Work> send(const Tensor&, int64_t) override { refuse("send"); }
  std::shared_ptr<Work> recv(const Tensor&, int64_t) override { refuse("recv"); }
  // Nothing to wait for: there are no peers.
  void barrier(const Ranks&) override {}

 private:
  [[noreturn]] void refuse(const char* op) const {
    fail(op, "rank ", rank_, " of a simulated world of ", world_size_, " ranks has no peers to exchange data with: "
         "simulated worlds compile and measure plans on meta tensors");
  }
  int64_t rank_, world_size_;
};

}  // namespace

SimulatedWorld::SimulatedWorld(int64_t rank, int64_t world_size) {
  if (is_initialized()) fail("SimulatedWorld", "a process group is already installed");
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    fail("SimulatedWorld", "rank ", rank, " is not in a world of ", world_size, " ranks");
  }
  set_process_group(std::make_shared<SimulatedProcessGroup>(rank, world_size));
}

SimulatedWorld::~SimulatedWorld() { set_process_group(nullptr); }

}  // namespace flow::distributed
