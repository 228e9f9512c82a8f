#pragma once
// A world of many ranks simulated in one process, for compiling and measuring plans at any scale
// on meta tensors (flow_plan_stats): this process plays one rank, there are no peers. Ops on meta
// tensors run no kernel, so their collectives never reach the group; a collective that would
// move real data is a flow::Error.
#include <cstdint>

namespace flow::distributed {

// Installs the simulated group for its lifetime (get_rank() == rank, get_world_size() ==
// world_size) and uninstalls it after. flow::Error when a process group is already installed
// or the rank is outside the world.
class SimulatedWorld {
 public:
  SimulatedWorld(int64_t rank, int64_t world_size);
  ~SimulatedWorld();
  SimulatedWorld(const SimulatedWorld&) = delete;
  SimulatedWorld& operator=(const SimulatedWorld&) = delete;
};

}  // namespace flow::distributed
