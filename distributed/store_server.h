#pragma once
// The rendezvous store's server: rank 0 runs it in its own process for the life of the group.
#include <cstdint>
#include <memory>
#include <string>

namespace grpc {
class Server;
}

namespace flow::distributed {

class StoreService;

class StoreServer {
 public:
  // Listens on every interface at port and answers only calls that carry rdzv_id (the job's
  // rendezvous id, see StoreClient); flow::Error [init_process_group] when the port is in use.
  StoreServer(int port, const std::string& rdzv_id);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

 private:
  std::unique_ptr<StoreService> service_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace flow::distributed
