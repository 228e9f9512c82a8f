#pragma once
// ProcessGroup over Gloo's TCP transport for CPU tensors.
//
// Collectives run in submission order on one communication thread. Point-to-point transfers run
// on one thread per (peer, direction) instead: a blocking send on the collective thread would
// deadlock two ranks that both send before they receive. A communicator (Gloo context) per member
// list is created on first use, by a rendezvous among the members only. Every Gloo call is bounded
// by the group's timeout; a transport failure or timeout breaks the group (later calls fail at
// once), while a disagreement (detected before any data moves) leaves it usable.
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/comm/process_group.h"
#include "distributed/agreement.h"
#include "distributed/comm_queue.h"
#include "distributed/store_client.h"

namespace gloo {
class Context;
namespace transport {
class Device;
}
}  // namespace gloo

namespace flow::distributed {

struct GlooGroupOptions {
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;
  int64_t local_world_size = 1;
  std::chrono::milliseconds timeout{0};
  std::string interface_address;  // where peers reach this rank
};

class GlooProcessGroup final : public ProcessGroup {
 public:
  // Connects the world communicator (rendezvous through store); flow::Error [init_process_group].
  GlooProcessGroup(const GlooGroupOptions& options, std::shared_ptr<StoreClient> store);
  ~GlooProcessGroup() override;

  int64_t rank() const override { return options_.rank; }
  int64_t world_size() const override { return options_.world_size; }
  int64_t local_rank() const override { return options_.local_rank; }
  int64_t local_world_size() const override { return options_.local_world_size; }
  std::chrono::milliseconds timeout() const override { return options_.timeout; }

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

  // Runs only the agreement exchange among ranks (another backend's collectives use it); blocks.
  void check_agreement(const CollectiveHeader& header, const Ranks& ranks);
  // Whether a failure has made the group unusable.
  bool broken() const;

 private:
  struct Communicator;
  using Task = std::function<void(Communicator&)>;

  // The sorted member list for ranks (world when empty); flow::Error [op] when it is malformed.
  Ranks members_of(const Ranks& ranks, const char* op) const;
  // Queues a collective: agreement on header, then body, translating Gloo's failures.
  std::shared_ptr<Work> submit_collective(const CollectiveHeader& header, const Ranks& ranks, Task body);
  Communicator& communicator(const Ranks& members, const char* op);  // collective thread only
  void agree(Communicator& communicator, const CollectiveHeader& header);
  std::shared_ptr<Work> submit_point_to_point(Collective direction, const Tensor& tensor, int64_t peer);
  void transfer(Collective direction, const Tensor& tensor, int64_t peer, uint64_t sequence);
  // Runs task, turning Gloo's and the store's exceptions into flow::Error [op] and breaking the
  // group on transport failures.
  void guarded(const char* op, const std::function<void()>& task);
  [[noreturn]] void raise_transport_failure(const char* op, const std::string& what);
  void throw_if_broken(const char* op) const;
  void learn_peer_addresses();  // collective thread, at init
  // "peer rank R" when message holds one of R's addresses, else "a peer".
  std::string peer_from_message(const std::string& message) const;

  GlooGroupOptions options_;
  std::shared_ptr<StoreClient> store_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::map<Ranks, std::unique_ptr<Communicator>> communicators_;
  Communicator* world_ = nullptr;  // set once by the constructor; point-to-point uses it

  mutable std::mutex state_mutex_;
  std::string broken_reason_;
  std::vector<uint64_t> sends_to_;      // next sequence number per peer
  std::vector<uint64_t> receives_from_;
  std::map<std::pair<Collective, int64_t>, std::unique_ptr<CommQueue>> point_to_point_queues_;
  std::map<std::string, int64_t> rank_of_address_;  // every peer's published addresses

  // Last: its thread stops (finishing queued collectives) before the members above go away.
  std::unique_ptr<CommQueue> collectives_;
};

}  // namespace flow::distributed
