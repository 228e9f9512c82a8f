#include "distributed/distributed.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <mutex>
#include <thread>

#include <glog/logging.h>

#include "core/error.h"
#include "distributed/device_dispatch.h"
#include "distributed/gloo_process_group.h"
#include "distributed/store_client.h"
#include "distributed/store_server.h"
#ifdef FLOW_WITH_NCCL
#include "distributed/nccl_process_group.h"
#endif

namespace flow::distributed {

namespace {

constexpr const char* kOp = "init_process_group";
constexpr std::chrono::milliseconds kDefaultTimeout = std::chrono::minutes(5);
constexpr std::chrono::milliseconds kFailedStoreGrace = std::chrono::seconds(2);

// What init_process_group started; destroy_process_group stops it in reverse order.
struct Session {
  std::unique_ptr<StoreServer> server;  // rank 0 only
  std::shared_ptr<StoreClient> store;
  std::shared_ptr<DeviceDispatchGroup> group;
};

std::mutex session_mutex;
std::unique_ptr<Session>& current_session() {
  static std::unique_ptr<Session> session;
  return session;
}

std::optional<std::string> environment(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

[[noreturn]] void fail_missing(const char* name) {
  fail(kOp, "environment variable ", name,
       " is not set (launch with flow_run, set MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE, or pass them in InitOptions)");
}

int64_t parse_integer(const char* name, const std::string& text) {
  int64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) fail(kOp, name, "='", text, "' is not an integer");
  return value;
}

int64_t setting(const std::optional<int64_t>& explicit_value, const char* name) {
  if (explicit_value) return *explicit_value;
  std::optional<std::string> text = environment(name);
  if (!text) fail_missing(name);
  return parse_integer(name, *text);
}

std::chrono::milliseconds resolve_timeout(const InitOptions& options) {
  std::chrono::milliseconds timeout = kDefaultTimeout;
  if (options.timeout) {
    timeout = *options.timeout;
  } else if (std::optional<std::string> text = environment("FLOW_DIST_TIMEOUT_S")) {
    char* end = nullptr;
    double seconds = std::strtod(text->c_str(), &end);
    if (end != text->c_str() + text->size()) fail(kOp, "FLOW_DIST_TIMEOUT_S='", *text, "' is not a number of seconds");
    timeout = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
  }
  if (timeout.count() <= 0) fail(kOp, "the timeout must be positive, got ", timeout.count(), " ms");
  return timeout;
}

// The local address that routes to the master: Gloo listens there, so that peers on other
// machines reach this rank over the same network as the store.
std::string address_towards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (int error = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); error != 0) {
    fail(kOp, "MASTER_ADDR='", host, "' does not resolve: ", gai_strerror(error));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> addresses(found, &freeaddrinfo);
  // Connecting a UDP socket sends nothing; it only picks the route and so the local address.
  int socket_fd = socket(found->ai_family, SOCK_DGRAM, 0);
  sockaddr_storage local{};
  socklen_t length = sizeof(local);
  bool routed = socket_fd >= 0 && connect(socket_fd, found->ai_addr, found->ai_addrlen) == 0 &&
                getsockname(socket_fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
  if (socket_fd >= 0) close(socket_fd);
  if (!routed) fail(kOp, "no network route to MASTER_ADDR='", host, "'");
  char text[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<sockaddr*>(&local), length, text, sizeof(text), nullptr, 0, NI_NUMERICHOST) != 0) {
    fail(kOp, "cannot name the local address that routes to MASTER_ADDR='", host, "'");
  }
  return text;
}

// Every rank publishes its WORLD_SIZE and compares with rank 0's; a rank that finds a problem
// aborts the rendezvous so that the others fail at once instead of waiting out the timeout.
void check_world(StoreClient& store, int64_t rank, int64_t world_size) {
  auto reject = [&](const std::string& problem) {
    std::string message = detail::concat("rank ", rank, ": ", problem);
    store.abort(message);
    fail(kOp, message);
  };
  if (store.add("init/rank/" + std::to_string(rank), 1) != 1) {
    reject(detail::concat("another process also has RANK=", rank, " (every process needs its own rank)"));
  }
  store.set_string("init/world_size/" + std::to_string(rank), std::to_string(world_size));
  std::string rank0_world_size = store.get_string("init/world_size/0", store.timeout());
  if (rank0_world_size != std::to_string(world_size)) {
    reject(detail::concat("this rank has WORLD_SIZE=", world_size, " but rank 0 has WORLD_SIZE=", rank0_world_size,
                          " (every rank must be launched with the same WORLD_SIZE)"));
  }
}

// A rank that re-initialises may reach rank 0's previous store before rank 0 has replaced it.
// That store holds this rank's "exit" key (set when it left the previous group), or is shutting
// down, so the rank reconnects until it finds a store without one.
std::shared_ptr<StoreClient> connect_to_current_store(const std::string& host, int port, int64_t rank,
                                                      std::chrono::milliseconds timeout, const std::string& rdzv_id) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string exit_key = "exit/" + std::to_string(rank);
  while (true) {
    auto remaining = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    try {
      auto store = std::make_shared<StoreClient>(host, port, timeout, std::max(remaining, std::chrono::milliseconds(1)),
                                                 rdzv_id);
      if (!store->check({exit_key})) return store;
    } catch (const RdzvIdMismatch&) {
      throw;  // another job's store: it will not go away for this job's
    } catch (const StoreError&) {
      if (std::chrono::steady_clock::now() >= deadline) throw;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      throw StoreError("rank 0 still serves the previous process group's store (did rank 0 call destroy_process_group()?)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::shared_ptr<ProcessGroup> make_cuda_group(const std::string& backend, const std::shared_ptr<GlooProcessGroup>& cpu,
                                              const std::shared_ptr<StoreClient>& store, std::string& missing) {
#ifdef FLOW_WITH_NCCL
  if (backend != "gloo") return std::make_shared<NcclProcessGroup>(cpu, store);
  missing = "the process group was initialised with backend \"gloo\" (use \"nccl\" for CUDA tensors)";
#else
  (void)cpu;
  (void)store;
  if (backend == "nccl") fail(kOp, "backend \"nccl\" was asked for but flow was built without NCCL");
  missing = "flow was built without NCCL";
#endif
  return nullptr;
}

}  // namespace

void init_process_group(const InitOptions& options) {
  std::lock_guard<std::mutex> lock(session_mutex);
  if (current_session() || is_initialized()) {
    fail(kOp, "a process group is already installed (call destroy_process_group() first)");
  }
  if (options.backend != "" && options.backend != "gloo" && options.backend != "nccl") {
    fail(kOp, "unknown backend \"", options.backend, "\" (\"gloo\", \"nccl\" or \"\" for automatic)");
  }
  GlooGroupOptions group_options;
  group_options.world_size = setting(options.world_size, "WORLD_SIZE");
  group_options.rank = setting(options.rank, "RANK");
  if (group_options.world_size < 1) fail(kOp, "WORLD_SIZE=", group_options.world_size, " must be at least 1");
  if (group_options.rank < 0 || group_options.rank >= group_options.world_size) {
    fail(kOp, "RANK=", group_options.rank, " is outside 0..WORLD_SIZE-1 (WORLD_SIZE=", group_options.world_size, ")");
  }
  group_options.local_rank = options.local_rank ? *options.local_rank
                             : environment("LOCAL_RANK") ? setting(std::nullopt, "LOCAL_RANK")
                                                         : group_options.rank;
  group_options.local_world_size = options.local_world_size ? *options.local_world_size
                                   : environment("LOCAL_WORLD_SIZE") ? setting(std::nullopt, "LOCAL_WORLD_SIZE")
                                                                     : group_options.world_size;
  std::string master_addr = options.master_addr ? *options.master_addr : environment("MASTER_ADDR").value_or("");
  if (master_addr.empty()) fail_missing("MASTER_ADDR");
  int64_t master_port = options.master_port ? *options.master_port : setting(std::nullopt, "MASTER_PORT");
  if (master_port < 1 || master_port > 65535) fail(kOp, "MASTER_PORT=", master_port, " is not a TCP port (1..65535)");
  group_options.timeout = resolve_timeout(options);
  group_options.interface_address = address_towards(master_addr, static_cast<int>(master_port));
  const std::string rdzv_id = options.rdzv_id ? *options.rdzv_id : environment("FLOW_RDZV_ID").value_or("");

  auto session = std::make_unique<Session>();
  if (group_options.rank == 0) session->server = std::make_unique<StoreServer>(static_cast<int>(master_port), rdzv_id);
  std::shared_ptr<GlooProcessGroup> cpu;
  try {
    try {
      session->store = connect_to_current_store(master_addr, static_cast<int>(master_port), group_options.rank,
                                                group_options.timeout, rdzv_id);
      check_world(*session->store, group_options.rank, group_options.world_size);
    } catch (const StoreError& e) {
      fail(kOp, "rank ", group_options.rank, ": ", e.what());
    }
    cpu = std::make_shared<GlooProcessGroup>(group_options, session->store);
  } catch (const Error&) {
    // Ranks that connect late still read why the rendezvous failed, instead of finding no store.
    if (session->server) std::this_thread::sleep_for(std::min(group_options.timeout, kFailedStoreGrace));
    throw;
  }
  std::string cuda_missing;
  std::shared_ptr<ProcessGroup> cuda = make_cuda_group(options.backend, cpu, session->store, cuda_missing);
  session->group = std::make_shared<DeviceDispatchGroup>(cpu, std::move(cuda), cuda_missing);
  set_process_group(session->group);
  current_session() = std::move(session);
}

void destroy_process_group() {
  std::lock_guard<std::mutex> lock(session_mutex);
  std::unique_ptr<Session> session = std::move(current_session());
  if (!session) return;
  set_process_group(nullptr);
  int64_t rank = session->group->rank();
  int64_t world_size = session->group->world_size();
  bool healthy = !session->group->cpu().broken();
  session->group.reset();
  // Rank 0 serves the store: it waits for every rank to be done with it before it stops.
  try {
    // A broken group may have lost rank 0 too: then leave without waiting out the timeout.
    std::optional<std::chrono::milliseconds> exit_timeout;
    if (!healthy) exit_timeout = std::chrono::milliseconds(100);
    session->store->set_string("exit/" + std::to_string(rank), "1", exit_timeout);
    if (session->server && healthy) {
      std::vector<std::string> exits;
      for (int64_t other = 0; other < world_size; ++other) exits.push_back("exit/" + std::to_string(other));
      session->store->wait(exits);
    }
  } catch (const StoreError& e) {
    LOG(WARNING) << "destroy_process_group: rank " << rank << " did not see every rank leave: " << e.what();
  }
}

void barrier() { process_group("barrier").barrier({}); }

}  // namespace flow::distributed
