#pragma once
// Starting and stopping the process group (torchrun's contract). See docs/distributed.md.
//
//   flow::distributed::init_process_group();   // reads MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
//   flow::distributed::process_group("train").all_reduce(grad, ReduceOp::kSum, {})->wait();
//   flow::distributed::destroy_process_group();
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "core/comm/process_group.h"

namespace flow::distributed {

// Unset fields come from the environment (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, FLOW_DIST_TIMEOUT_S, FLOW_RDZV_ID) or defaults.
struct InitOptions {
  // "gloo" (CPU tensors only), "nccl" (NCCL for CUDA tensors, Gloo for CPU ones) or "" (auto:
  // Gloo for CPU tensors, plus NCCL for CUDA tensors when flow was built with NCCL).
  std::string backend;
  // Bounds rendezvous and every collective; default FLOW_DIST_TIMEOUT_S or 5 minutes.
  std::optional<std::chrono::milliseconds> timeout;
  std::optional<int64_t> rank;
  std::optional<int64_t> world_size;
  std::optional<int64_t> local_rank;        // default LOCAL_RANK, else rank
  std::optional<int64_t> local_world_size;  // default LOCAL_WORLD_SIZE, else world_size
  std::optional<std::string> master_addr;
  std::optional<int> master_port;
  // The job's rendezvous id (flow_run's --rdzv-id); default FLOW_RDZV_ID, else none. Rank 0's
  // store serves only ranks with its id, so a rank of another job that reaches it cannot join
  // or abort this job.
  std::optional<std::string> rdzv_id;

  InitOptions& set_backend(std::string name) { backend = std::move(name); return *this; }
  InitOptions& set_timeout(std::chrono::milliseconds duration) { timeout = duration; return *this; }
  InitOptions& set_rank(int64_t value) { rank = value; return *this; }
  InitOptions& set_world_size(int64_t value) { world_size = value; return *this; }
  InitOptions& set_local_rank(int64_t value) { local_rank = value; return *this; }
  InitOptions& set_local_world_size(int64_t value) { local_world_size = value; return *this; }
  InitOptions& set_master_addr(std::string address) { master_addr = std::move(address); return *this; }
  InitOptions& set_master_port(int port) { master_port = port; return *this; }
  InitOptions& set_rdzv_id(std::string id) { rdzv_id = std::move(id); return *this; }
};

// Rendezvous with the other ranks (rank 0 serves the store at MASTER_ADDR:MASTER_PORT), connect
// Gloo, and install the group (set_process_group). flow::Error [init_process_group] for a
// missing or invalid setting, RANK >= WORLD_SIZE, ranks that disagree on WORLD_SIZE, two
// processes with one RANK, rank 0 unreachable or peers missing within the timeout, a
// MASTER_PORT in use on rank 0, or a store there that serves another rendezvous id.
void init_process_group(const InitOptions& options = {});
// Finishes queued collectives, uninstalls the group and closes its connections. Rank 0 keeps the
// store up until every rank has left it (bounded by the timeout). No-op without a group.
void destroy_process_group();
// Blocks until every rank of the world arrives (flow::Error [barrier] on failure or timeout).
void barrier();

}  // namespace flow::distributed
