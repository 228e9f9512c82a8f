#include "distributed/nccl_process_group.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <thread>

#include <glog/logging.h>

#include "core/error.h"
#include "distributed/gloo_process_group.h"
#include "distributed/store_client.h"

namespace flow::distributed {

struct NcclProcessGroup::Communicator {
  Ranks members;
  int index = 0;
  int device = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
};

namespace {

void check_cuda(cudaError_t status, const char* op, const char* what) {
  if (status != cudaSuccess) fail(op, what, ": ", cudaGetErrorString(status));
}

void check_nccl(ncclResult_t status, const char* op, const char* what) {
  if (status != ncclSuccess && status != ncclInProgress) fail(op, what, ": ", ncclGetErrorString(status));
}

ncclDataType_t nccl_type(DType dtype, const char* op) {
  switch (dtype) {
    case kBool:
    case kUInt8: return ncclUint8;
    case kInt8: return ncclInt8;
    case kInt32: return ncclInt32;
    case kInt64: return ncclInt64;
    case kFloat16: return ncclFloat16;
    case kBFloat16: return ncclBfloat16;
    case kFloat32: return ncclFloat32;
    case kFloat64: return ncclFloat64;
    default: fail(op, "the NCCL backend does not take ", dtype_name(dtype), " tensors");
  }
}

ncclRedOp_t nccl_reduction(ReduceOp reduce) {
  switch (reduce) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kAvg: return ncclAvg;
  }
  return ncclSum;
}

void check_cuda_tensor(const Tensor& tensor, const char* op, const char* name) {
  FLOW_ARG_CHECK(tensor.defined() && tensor.device().is_cuda(), op, name, " must be a CUDA tensor for the NCCL backend");
  FLOW_ARG_CHECK(tensor.is_contiguous(), op, name, " must be contiguous");
}

std::string ranks_key(const Ranks& members, int device) {
  std::string key = "nccl/" + std::to_string(device) + "/";
  for (int64_t rank : members) key += std::to_string(rank) + ",";
  return key;
}

// Done when the communicator's stream passes the event; fails on NCCL's asynchronous errors or
// past the timeout, aborting the communicator so that no rank stays blocked in it.
class NcclWork final : public Work {
 public:
  NcclWork(NcclProcessGroup& group, ncclComm_t comm, cudaEvent_t done, std::string op, int64_t rank,
           std::chrono::milliseconds timeout)
      : group_(group), comm_(comm), done_(done), op_(std::move(op)), rank_(rank),
        deadline_(std::chrono::steady_clock::now() + timeout), timeout_(timeout) {}
  ~NcclWork() override { cudaEventDestroy(done_); }

  void wait() override {
    while (!completed()) {
      ncclResult_t async_error = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async_error);
      if (async_error != ncclSuccess && async_error != ncclInProgress) {
        abort_with(detail::concat("NCCL failed: ", ncclGetErrorString(async_error), " (a peer may have died)"));
      }
      if (std::chrono::steady_clock::now() > deadline_) {
        abort_with(detail::concat("timed out after ", timeout_.count() / 1000.0, " s waiting for a peer"));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  bool completed() const override { return cudaEventQuery(done_) == cudaSuccess; }

 private:
  [[noreturn]] void abort_with(const std::string& what) {
    ncclCommAbort(comm_);
    std::string message = detail::concat("[", op_, "] rank ", rank_, ": ", what);
    group_.mark_broken(message);
    throw Error(message);
  }

  NcclProcessGroup& group_;
  ncclComm_t comm_;
  cudaEvent_t done_;
  std::string op_;
  int64_t rank_;
  std::chrono::steady_clock::time_point deadline_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

NcclProcessGroup::NcclProcessGroup(std::shared_ptr<GlooProcessGroup> cpu, std::shared_ptr<StoreClient> store)
    : cpu_(std::move(cpu)), store_(std::move(store)) {}

NcclProcessGroup::~NcclProcessGroup() {
  for (auto& [key, communicator] : communicators_) {
    if (broken_reason_.empty()) {
      ncclCommDestroy(communicator->comm);
    } else {
      ncclCommAbort(communicator->comm);
    }
    cudaStreamDestroy(communicator->stream);
  }
}

int64_t NcclProcessGroup::rank() const { return cpu_->rank(); }
int64_t NcclProcessGroup::world_size() const { return cpu_->world_size(); }
int64_t NcclProcessGroup::local_rank() const { return cpu_->local_rank(); }
int64_t NcclProcessGroup::local_world_size() const { return cpu_->local_world_size(); }
std::chrono::milliseconds NcclProcessGroup::timeout() const { return cpu_->timeout(); }

void NcclProcessGroup::mark_broken(const std::string& reason) {
  std::lock_guard<std::mutex> lock(broken_mutex_);
  if (broken_reason_.empty()) broken_reason_ = reason;
}

void NcclProcessGroup::throw_if_broken(const char* op) const {
  std::lock_guard<std::mutex> lock(broken_mutex_);
  if (!broken_reason_.empty()) {
    fail(op, "rank ", rank(), ": the NCCL process group is unusable after an earlier failure (", broken_reason_, ")");
  }
}

Ranks NcclProcessGroup::members_of(const Ranks& ranks, const char* op) const {
  if (!ranks.empty()) {
    FLOW_ARG_CHECK(std::is_sorted(ranks.begin(), ranks.end()) && std::binary_search(ranks.begin(), ranks.end(), rank()), op,
                   "the ranks list must be sorted and include rank ", rank());
    return ranks;
  }
  Ranks world(world_size());
  std::iota(world.begin(), world.end(), int64_t{0});
  return world;
}

NcclProcessGroup::Communicator& NcclProcessGroup::communicator(const Ranks& members, int device, const char* op) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto key = std::make_pair(members, device);
  if (auto found = communicators_.find(key); found != communicators_.end()) return *found->second;
  auto created = std::make_unique<Communicator>();
  created->members = members;
  created->device = device;
  created->index = static_cast<int>(std::lower_bound(members.begin(), members.end(), rank()) - members.begin());
  std::string id_key = ranks_key(members, device) + "/unique_id";
  ncclUniqueId id;
  try {
    if (created->index == 0) {
      check_nccl(ncclGetUniqueId(&id), op, "ncclGetUniqueId");
      store_->set(id_key, std::vector<char>(id.internal, id.internal + sizeof(id.internal)));
    } else {
      std::vector<char> bytes = store_->get(id_key);
      CHECK_EQ(bytes.size(), sizeof(id.internal));
      std::memcpy(id.internal, bytes.data(), bytes.size());
    }
  } catch (const StoreError& e) {
    fail(op, "rank ", rank(), ": sharing the NCCL id failed: ", e.what());
  }
  check_cuda(cudaSetDevice(device), op, "cudaSetDevice");
  // Non-blocking init, so that a missing peer ends in a timeout and an abort, not a hang.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  check_nccl(ncclCommInitRankConfig(&created->comm, static_cast<int>(members.size()), id, created->index, &config), op,
             "ncclCommInitRankConfig");
  auto deadline = std::chrono::steady_clock::now() + timeout();
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress) {
    ncclCommGetAsyncError(created->comm, &state);
    if (state == ncclInProgress && std::chrono::steady_clock::now() > deadline) {
      ncclCommAbort(created->comm);
      fail(op, "rank ", rank(), ": NCCL communicator setup timed out after ", timeout().count() / 1000.0, " s");
    }
    std::this_thread::yield();
  }
  check_nccl(state, op, "ncclCommInitRankConfig");
  check_cuda(cudaStreamCreateWithFlags(&created->stream, cudaStreamNonBlocking), op, "cudaStreamCreate");
  return *communicators_.emplace(key, std::move(created)).first->second;
}

std::shared_ptr<Work> NcclProcessGroup::launch(const CollectiveHeader& header, const Ranks& ranks, const Tensor& tensor,
                                               const std::function<void(Communicator&)>& enqueue) {
  const char* op = collective_name(header.collective);
  throw_if_broken(op);
  Ranks members = members_of(ranks, op);
  cpu_->check_agreement(header, members);
  Communicator& members_communicator = communicator(members, tensor.device().index, op);
  check_cuda(cudaSetDevice(members_communicator.device), op, "cudaSetDevice");
  // flow computes on the legacy default stream: the collective starts after what was queued there.
  cudaEvent_t inputs_ready = nullptr;
  check_cuda(cudaEventCreateWithFlags(&inputs_ready, cudaEventDisableTiming), op, "cudaEventCreate");
  check_cuda(cudaEventRecord(inputs_ready, cudaStreamLegacy), op, "cudaEventRecord");
  check_cuda(cudaStreamWaitEvent(members_communicator.stream, inputs_ready, 0), op, "cudaStreamWaitEvent");
  cudaEventDestroy(inputs_ready);
  enqueue(members_communicator);
  cudaEvent_t done = nullptr;
  check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), op, "cudaEventCreate");
  check_cuda(cudaEventRecord(done, members_communicator.stream), op, "cudaEventRecord");
  return std::make_shared<NcclWork>(*this, members_communicator.comm, done, op, rank(), timeout());
}

std::shared_ptr<Work> NcclProcessGroup::all_reduce(const Tensor& tensor, ReduceOp reduce, const Ranks& ranks) {
  check_cuda_tensor(tensor, "all_reduce", "the tensor");
  ncclDataType_t type = nccl_type(tensor.dtype(), "all_reduce");
  CollectiveHeader header{.collective = Collective::kAllReduce, .dtype = tensor.dtype(), .reduce = reduce,
                          .has_reduce = 1, .numel = tensor.numel()};
  return launch(header, ranks, tensor, [&](Communicator& c) {
    check_nccl(ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), type, nccl_reduction(reduce), c.comm, c.stream),
               "all_reduce", "ncclAllReduce");
  });
}

// Uneven blocks: one broadcast per member, rooted at the member, into its rows of the output.
std::shared_ptr<Work> NcclProcessGroup::all_gather(const Tensor& input, const Tensor& output,
                                                   const std::vector<int64_t>& dim0_sizes, const Ranks& ranks) {
  check_cuda_tensor(input, "all_gather", "the input");
  check_cuda_tensor(output, "all_gather", "the output");
  FLOW_ARG_CHECK(input.dtype() == output.dtype() && input.dim() >= 1, "all_gather", "input and output need one dtype and a dim 0");
  int64_t row_bytes = input.shape()[0] > 0 ? input.nbytes() / input.shape()[0] : 0;
  if (row_bytes == 0 && output.shape()[0] > 0) row_bytes = output.nbytes() / output.shape()[0];
  CollectiveHeader header{.collective = Collective::kAllGather, .dtype = input.dtype(), .numel = output.numel(),
                          .sizes_digest = sizes_digest(dim0_sizes)};
  return launch(header, ranks, input, [&](Communicator& c) {
    FLOW_ARG_CHECK(dim0_sizes.size() == c.members.size(), "all_gather", "dim0_sizes needs one entry per member");
    auto* out = static_cast<char*>(output.data_ptr());
    check_nccl(ncclGroupStart(), "all_gather", "ncclGroupStart");
    int64_t offset = 0;
    for (size_t member = 0; member < c.members.size(); ++member) {
      size_t bytes = static_cast<size_t>(dim0_sizes[member] * row_bytes);
      const void* send = static_cast<int>(member) == c.index ? input.data_ptr() : nullptr;
      check_nccl(ncclBroadcast(send, out + offset, bytes, ncclUint8, static_cast<int>(member), c.comm, c.stream),
                 "all_gather", "ncclBroadcast");
      offset += static_cast<int64_t>(bytes);
    }
    check_nccl(ncclGroupEnd(), "all_gather", "ncclGroupEnd");
  });
}

// Uneven blocks: one reduce per member, rooted at the member, of its rows of the input.
std::shared_ptr<Work> NcclProcessGroup::reduce_scatter(const Tensor& input, const Tensor& output,
                                                       const std::vector<int64_t>& dim0_sizes, ReduceOp reduce,
                                                       const Ranks& ranks) {
  check_cuda_tensor(input, "reduce_scatter", "the input");
  check_cuda_tensor(output, "reduce_scatter", "the output");
  FLOW_ARG_CHECK(input.dtype() == output.dtype() && input.dim() >= 1 && input.shape()[0] > 0, "reduce_scatter",
                 "input and output need one dtype and the input rows");
  ncclDataType_t type = nccl_type(input.dtype(), "reduce_scatter");
  int64_t row_elements = input.numel() / input.shape()[0];
  CollectiveHeader header{.collective = Collective::kReduceScatter, .dtype = input.dtype(), .reduce = reduce,
                          .has_reduce = 1, .numel = input.numel(), .sizes_digest = sizes_digest(dim0_sizes)};
  return launch(header, ranks, input, [&](Communicator& c) {
    FLOW_ARG_CHECK(dim0_sizes.size() == c.members.size(), "reduce_scatter", "dim0_sizes needs one entry per member");
    auto* in = static_cast<char*>(input.data_ptr());
    size_t element_bytes = itemsize(input.dtype());
    check_nccl(ncclGroupStart(), "reduce_scatter", "ncclGroupStart");
    int64_t first_row = 0;
    for (size_t member = 0; member < c.members.size(); ++member) {
      size_t count = static_cast<size_t>(dim0_sizes[member] * row_elements);
      check_nccl(ncclReduce(in + first_row * row_elements * element_bytes, output.data_ptr(), count, type,
                            nccl_reduction(reduce), static_cast<int>(member), c.comm, c.stream),
                 "reduce_scatter", "ncclReduce");
      first_row += dim0_sizes[member];
    }
    check_nccl(ncclGroupEnd(), "reduce_scatter", "ncclGroupEnd");
  });
}

std::shared_ptr<Work> NcclProcessGroup::broadcast(const Tensor& tensor, int64_t root, const Ranks& ranks) {
  check_cuda_tensor(tensor, "broadcast", "the tensor");
  CollectiveHeader header{.collective = Collective::kBroadcast, .dtype = tensor.dtype(), .root = root, .numel = tensor.numel()};
  return launch(header, ranks, tensor, [&](Communicator& c) {
    auto root_position = std::lower_bound(c.members.begin(), c.members.end(), root);
    FLOW_ARG_CHECK(root_position != c.members.end() && *root_position == root, "broadcast", "the root rank ", root,
                   " is not a member");
    check_nccl(ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), static_cast<size_t>(tensor.nbytes()), ncclUint8,
                             static_cast<int>(root_position - c.members.begin()), c.comm, c.stream),
               "broadcast", "ncclBroadcast");
  });
}

std::shared_ptr<Work> NcclProcessGroup::all_to_all(const Tensor& input, const std::vector<int64_t>& send_sizes,
                                                   const Tensor& output, const std::vector<int64_t>& recv_sizes,
                                                   const Ranks& ranks) {
  check_cuda_tensor(input, "all_to_all", "the input");
  check_cuda_tensor(output, "all_to_all", "the output");
  FLOW_ARG_CHECK(input.dtype() == output.dtype() && input.dim() >= 1 && output.dim() >= 1, "all_to_all",
                 "input and output need one dtype and a dim 0");
  int64_t rows = std::max<int64_t>(input.shape()[0], 1);
  int64_t row_bytes = input.nbytes() / rows;
  CollectiveHeader header{.collective = Collective::kAllToAll, .dtype = input.dtype(), .row_elements = row_bytes};
  return launch(header, ranks, input, [&](Communicator& c) {
    FLOW_ARG_CHECK(send_sizes.size() == c.members.size() && recv_sizes.size() == c.members.size(), "all_to_all",
                   "send_sizes and recv_sizes need one entry per member");
    auto* in = static_cast<char*>(input.data_ptr());
    auto* out = static_cast<char*>(output.data_ptr());
    check_nccl(ncclGroupStart(), "all_to_all", "ncclGroupStart");
    int64_t sent = 0;
    int64_t received = 0;
    for (size_t member = 0; member < c.members.size(); ++member) {
      check_nccl(ncclSend(in + sent, send_sizes[member] * row_bytes, ncclUint8, static_cast<int>(member), c.comm, c.stream),
                 "all_to_all", "ncclSend");
      check_nccl(ncclRecv(out + received, recv_sizes[member] * row_bytes, ncclUint8, static_cast<int>(member), c.comm,
                          c.stream),
                 "all_to_all", "ncclRecv");
      sent += send_sizes[member] * row_bytes;
      received += recv_sizes[member] * row_bytes;
    }
    check_nccl(ncclGroupEnd(), "all_to_all", "ncclGroupEnd");
  });
}

// Point to point uses the world communicator without an agreement exchange: the Gloo
// collectives that carry it would deadlock two ranks that both send first.
std::shared_ptr<Work> NcclProcessGroup::send(const Tensor& tensor, int64_t peer) {
  check_cuda_tensor(tensor, "send", "the tensor");
  throw_if_broken("send");
  Communicator& world = communicator(members_of({}, "send"), tensor.device().index, "send");
  check_nccl(ncclSend(tensor.data_ptr(), static_cast<size_t>(tensor.nbytes()), ncclUint8, static_cast<int>(peer), world.comm,
                      world.stream),
             "send", "ncclSend");
  cudaEvent_t done = nullptr;
  check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "send", "cudaEventCreate");
  check_cuda(cudaEventRecord(done, world.stream), "send", "cudaEventRecord");
  return std::make_shared<NcclWork>(*this, world.comm, done, "send", rank(), timeout());
}

std::shared_ptr<Work> NcclProcessGroup::recv(const Tensor& tensor, int64_t peer) {
  check_cuda_tensor(tensor, "recv", "the tensor");
  throw_if_broken("recv");
  Communicator& world = communicator(members_of({}, "recv"), tensor.device().index, "recv");
  check_nccl(ncclRecv(tensor.data_ptr(), static_cast<size_t>(tensor.nbytes()), ncclUint8, static_cast<int>(peer), world.comm,
                      world.stream),
             "recv", "ncclRecv");
  cudaEvent_t done = nullptr;
  check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "recv", "cudaEventCreate");
  check_cuda(cudaEventRecord(done, world.stream), "recv", "cudaEventRecord");
  return std::make_shared<NcclWork>(*this, world.comm, done, "recv", rank(), timeout());
}

void NcclProcessGroup::barrier(const Ranks& ranks) { cpu_->barrier(ranks); }

}  // namespace flow::distributed
