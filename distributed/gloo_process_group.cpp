#include "distributed/gloo_process_group.h"

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <signal.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <numeric>

#include <glog/logging.h>

#include "core/error.h"
#include "distributed/gloo_reduce.h"

namespace flow::distributed {

struct GlooProcessGroup::Communicator {
  Ranks members;
  int index = 0;  // this rank's position in members
  std::shared_ptr<gloo::Context> context;
  uint32_t next_tag = 0;
  // Members run the same collectives in the same order, so their tags advance alike.
  uint32_t tag() { return next_tag++; }
};

namespace {

// Gloo only reads sizeof(T) from the element type; reductions get the element count.
template <size_t N>
struct Element {
  unsigned char bytes[N];
};

void set_allreduce_buffer(gloo::AllreduceOptions& options, void* data, size_t numel, size_t itemsize) {
  switch (itemsize) {
    case 1: return options.setOutput(static_cast<Element<1>*>(data), numel);
    case 2: return options.setOutput(static_cast<Element<2>*>(data), numel);
    case 4: return options.setOutput(static_cast<Element<4>*>(data), numel);
    case 8: return options.setOutput(static_cast<Element<8>*>(data), numel);
  }
  LOG(FATAL) << "no reducible dtype has " << itemsize << "-byte elements";
}

void check_cpu_tensor(const Tensor& tensor, const char* op, const char* name) {
  FLOW_ARG_CHECK(tensor.defined(), op, name, " is an undefined tensor");
  FLOW_ARG_CHECK(tensor.device().is_cpu(), op, name, " is on ", tensor.device(), "; the Gloo backend takes CPU tensors");
  FLOW_ARG_CHECK(tensor.is_contiguous(), op, name, " must be contiguous");
}

// An input and output of one collective: CPU, contiguous, one dtype.
void check_cpu_pair(const Tensor& input, const Tensor& output, const char* op) {
  check_cpu_tensor(input, op, "the input");
  check_cpu_tensor(output, op, "the output");
  FLOW_ARG_CHECK(input.dtype() == output.dtype(), op, "the input is ", dtype_name(input.dtype()), " but the output is ",
                 dtype_name(output.dtype()));
}

int64_t row_elements(const Tensor& tensor, const char* op, const char* name) {
  FLOW_ARG_CHECK(tensor.dim() >= 1, op, name, " needs at least one dimension (rows are split along dim 0)");
  int64_t elements = 1;
  for (int64_t d = 1; d < tensor.dim(); ++d) elements *= tensor.shape()[d];
  return elements;
}

int64_t sum(const std::vector<int64_t>& sizes) { return std::accumulate(sizes.begin(), sizes.end(), int64_t{0}); }

std::vector<size_t> bytes_per_member(const std::vector<int64_t>& rows, int64_t row_bytes) {
  std::vector<size_t> bytes;
  for (int64_t count : rows) bytes.push_back(static_cast<size_t>(count * row_bytes));
  return bytes;
}

std::string seconds_text(std::chrono::milliseconds duration) {
  return detail::concat(static_cast<double>(duration.count()) / 1000.0, " s");
}

std::string ranks_key(const Ranks& members) {
  std::string key;
  for (int64_t rank : members) key += (key.empty() ? "" : ",") + std::to_string(rank);
  return key;
}

std::string address_key(int64_t rank) { return "gloo/address/" + std::to_string(rank); }

// Gloo's TCP transport writes to its peers with writev: a write to a rank that died raises SIGPIPE,
// whose default action kills this rank before Gloo reports the broken pair, so a job lost every
// rank instead of raising flow::Error on the survivors (test RankExits, about 1 run in 10). With
// the signal ignored the write fails with EPIPE and the collective throws. Python, and so PyTorch's
// Gloo, runs with SIGPIPE ignored; a handler the program installed itself is kept.
void ignore_sigpipe_unless_handled() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
}

}  // namespace

GlooProcessGroup::GlooProcessGroup(const GlooGroupOptions& options, std::shared_ptr<StoreClient> store)
    : options_(options),
      store_(std::move(store)),
      sends_to_(options.world_size, 0),
      receives_from_(options.world_size, 0),
      collectives_(std::make_unique<CommQueue>()) {
  ignore_sigpipe_unless_handled();
  gloo::transport::tcp::attr attributes;
  attributes.hostname = options_.interface_address;
  try {
    device_ = gloo::transport::tcp::CreateDevice(attributes);
  } catch (const std::exception& e) {
    fail("init_process_group", "rank ", options_.rank, ": cannot open Gloo's TCP transport on ",
         options_.interface_address, ": ", e.what());
  }
  // The world communicator connects now, so that init fails (not the first collective) when a
  // rank is missing.
  Ranks world = members_of({}, "init_process_group");
  collectives_
      ->submit([this, world] {
        guarded("init_process_group", [&] {
          world_ = &communicator(world, "init_process_group");
          std::string addresses;
          for (int64_t peer = 0; peer < options_.world_size; ++peer) {
            if (peer != options_.rank) addresses += world_->context->getPair(static_cast<int>(peer))->address().str() + "\n";
          }
          store_->set_string(address_key(options_.rank), addresses);
          learn_peer_addresses();
        });
      })
      ->wait();
}

GlooProcessGroup::~GlooProcessGroup() {
  collectives_.reset();
  point_to_point_queues_.clear();
}

Ranks GlooProcessGroup::members_of(const Ranks& ranks, const char* op) const {
  if (ranks.empty()) {
    Ranks world(options_.world_size);
    std::iota(world.begin(), world.end(), int64_t{0});
    return world;
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    FLOW_ARG_CHECK(ranks[i] >= 0 && ranks[i] < options_.world_size, op, "rank ", ranks[i],
                   " in the ranks list is outside the world of ", options_.world_size, " ranks");
    FLOW_ARG_CHECK(i == 0 || ranks[i - 1] < ranks[i], op, "the ranks list must be sorted and without duplicates");
  }
  FLOW_ARG_CHECK(std::binary_search(ranks.begin(), ranks.end(), options_.rank), op, "rank ", options_.rank,
                 " is not in the ranks list [", ranks_key(ranks), "] it called the collective with");
  return ranks;
}

GlooProcessGroup::Communicator& GlooProcessGroup::communicator(const Ranks& members, const char* op) {
  auto found = communicators_.find(members);
  if (found != communicators_.end()) return *found->second;
  auto created = std::make_unique<Communicator>();
  created->members = members;
  created->index = static_cast<int>(std::lower_bound(members.begin(), members.end(), options_.rank) - members.begin());
  auto context = std::make_shared<gloo::rendezvous::Context>(created->index, static_cast<int>(members.size()));
  context->setTimeout(options_.timeout);
  // Members rendezvous under their own prefix, so disjoint sub-groups connect independently.
  bool world = static_cast<int64_t>(members.size()) == options_.world_size;
  gloo::rendezvous::PrefixStore prefixed("gloo/" + (world ? std::string("world") : ranks_key(members)), *store_);
  try {
    context->connectFullMesh(prefixed, device_);
  } catch (const StoreError& e) {
    fail(op, "rank ", options_.rank, ": connecting ranks [", ranks_key(members), "] failed: ", e.what());
  }
  created->context = std::move(context);
  return *communicators_.emplace(members, std::move(created)).first->second;
}

void GlooProcessGroup::agree(Communicator& communicator, const CollectiveHeader& header) {
  std::vector<CollectiveHeader> headers(communicator.members.size());
  gloo::AllgatherOptions options(communicator.context);
  options.setInput(const_cast<CollectiveHeader*>(&header), 1);
  options.setOutput(headers.data(), headers.size());
  options.setTag(communicator.tag());
  options.setTimeout(options_.timeout);
  gloo::allgather(options);
  for (size_t i = 0; i < headers.size(); ++i) {
    if (static_cast<int>(i) == communicator.index) continue;
    std::string disagreement = describe_disagreement(headers[i], communicator.members[i], header);
    if (!disagreement.empty()) fail(collective_name(header.collective), "rank ", options_.rank, ": ", disagreement);
  }
}

bool GlooProcessGroup::broken() const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  return !broken_reason_.empty();
}

void GlooProcessGroup::throw_if_broken(const char* op) const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  if (!broken_reason_.empty()) {
    fail(op, "rank ", options_.rank, ": the process group is unusable after an earlier failure (", broken_reason_,
         "); call destroy_process_group() and init_process_group() again");
  }
}

void GlooProcessGroup::raise_transport_failure(const char* op, const std::string& what) {
  std::string message = detail::concat("[", op, "] rank ", options_.rank, ": ", what);
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (broken_reason_.empty()) broken_reason_ = message;
  }
  throw Error(message);
}

// Gloo names a failed connection by the peer's address. Every rank publishes its own at init and
// reads the others' there and then: the rank that dies later may be rank 0, and its store with it.
void GlooProcessGroup::learn_peer_addresses() {
  std::map<std::string, int64_t> rank_of_address;
  for (int64_t other = 0; other < options_.world_size; ++other) {
    if (other == options_.rank) continue;
    std::string addresses = store_->get_string(address_key(other), options_.timeout);
    for (size_t start = 0, end; start < addresses.size(); start = end + 1) {
      end = std::min(addresses.find('\n', start), addresses.size());
      rank_of_address[addresses.substr(start, end - start)] = other;
    }
  }
  std::lock_guard<std::mutex> lock(state_mutex_);
  rank_of_address_ = std::move(rank_of_address);
}

std::string GlooProcessGroup::peer_from_message(const std::string& message) const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  for (const auto& [address, peer] : rank_of_address_) {
    for (size_t at = message.find(address); at != std::string::npos; at = message.find(address, at + 1)) {
      // "[10.0.0.1]:3009" must not name the peer listening on port 30092.
      const size_t end = at + address.size();
      if (end == message.size() || !std::isdigit(static_cast<unsigned char>(message[end]))) {
        return detail::concat("peer rank ", peer);
      }
    }
  }
  // A connection the peer reset can be named by an address that is no published one (Gloo reads
  // it off the dead socket); of two ranks the other is the only peer there is.
  if (options_.world_size == 2) return detail::concat("peer rank ", 1 - options_.rank);
  return "a peer";
}

void GlooProcessGroup::guarded(const char* op, const std::function<void()>& task) {
  try {
    task();
  } catch (const Error&) {
    throw;  // already names the op and rank: a disagreement, a bad argument or a broken group
  } catch (const gloo::IoException& e) {
    std::string message = e.what();
    if (message.find("Timed out") != std::string::npos) {
      raise_transport_failure(op, detail::concat("timed out after ", seconds_text(options_.timeout), " waiting for ",
                                                 peer_from_message(message), " (gloo: ", message, ")"));
    }
    raise_transport_failure(op, detail::concat(peer_from_message(message), " closed the connection or failed (gloo: ",
                                               message, ")"));
  } catch (const StoreError& e) {
    raise_transport_failure(op, e.what());
  } catch (const gloo::EnforceNotMet& e) {
    raise_transport_failure(op, detail::concat("Gloo failed: ", e.what()));
  } catch (const gloo::Exception& e) {
    raise_transport_failure(op, detail::concat("Gloo failed: ", e.what()));
  }
}

std::shared_ptr<Work> GlooProcessGroup::submit_collective(const CollectiveHeader& header, const Ranks& ranks, Task body) {
  const char* op = collective_name(header.collective);
  Ranks members = members_of(ranks, op);
  throw_if_broken(op);
  return collectives_->submit([this, header, members = std::move(members), body = std::move(body), op] {
    guarded(op, [&] {
      throw_if_broken(op);
      Communicator& members_communicator = communicator(members, op);
      agree(members_communicator, header);
      if (body) body(members_communicator);
    });
  });
}

std::shared_ptr<Work> GlooProcessGroup::all_reduce(const Tensor& tensor, ReduceOp reduce, const Ranks& ranks) {
  check_cpu_tensor(tensor, "all_reduce", "the tensor");
  ReduceFunction reduce_elements = reduce_function(tensor.dtype(), reduce, "all_reduce");
  CollectiveHeader header{.collective = Collective::kAllReduce, .dtype = tensor.dtype(), .reduce = reduce,
                          .has_reduce = 1, .numel = tensor.numel()};
  return submit_collective(header, ranks, [this, tensor, reduce, reduce_elements](Communicator& members) {
    if (tensor.numel() == 0) return;
    gloo::AllreduceOptions options(members.context);
    set_allreduce_buffer(options, tensor.data_ptr(), tensor.numel(), itemsize(tensor.dtype()));
    options.setReduceFunction(reduce_elements);
    options.setTag(members.tag());
    options.setTimeout(options_.timeout);
    gloo::allreduce(options);
    if (reduce == ReduceOp::kAvg) {
      divide_in_place(tensor.data_ptr(), tensor.dtype(), tensor.numel(), static_cast<int64_t>(members.members.size()));
    }
  });
}

std::shared_ptr<Work> GlooProcessGroup::all_gather(const Tensor& input, const Tensor& output,
                                                   const std::vector<int64_t>& dim0_sizes, const Ranks& ranks) {
  const char* op = "all_gather";
  check_cpu_pair(input, output, op);
  Ranks members = members_of(ranks, op);
  FLOW_ARG_CHECK(dim0_sizes.size() == members.size(), op, "dim0_sizes has ", dim0_sizes.size(), " entries for ",
                 members.size(), " members");
  int64_t index = std::lower_bound(members.begin(), members.end(), options_.rank) - members.begin();
  int64_t row = row_elements(input, op, "the input");
  FLOW_ARG_CHECK(input.shape()[0] == dim0_sizes[index], op, "this rank's input has ", input.shape()[0],
                 " rows but dim0_sizes says ", dim0_sizes[index]);
  FLOW_ARG_CHECK(output.numel() == sum(dim0_sizes) * row, op, "the output has ", output.numel(), " elements, expected ",
                 sum(dim0_sizes), " rows of ", row);
  CollectiveHeader header{.collective = Collective::kAllGather, .dtype = input.dtype(), .numel = output.numel(),
                          .row_elements = row, .sizes_digest = sizes_digest(dim0_sizes)};
  int64_t row_bytes = row * static_cast<int64_t>(itemsize(input.dtype()));
  return submit_collective(header, members, [this, input, output, dim0_sizes, row_bytes](Communicator& members) {
    if (output.numel() == 0) return;
    gloo::AllgathervOptions options(members.context);
    options.setInput(static_cast<uint8_t*>(input.data_ptr()), static_cast<size_t>(input.nbytes()));
    options.setOutput(static_cast<uint8_t*>(output.data_ptr()), bytes_per_member(dim0_sizes, row_bytes));
    options.setTag(members.tag());
    options.setTimeout(options_.timeout);
    gloo::allgatherv(options);
  });
}

// Gloo has no reduce-scatter over unbound buffers with uneven blocks: all-reduce a copy of the
// whole input and keep this member's rows (twice the bytes of a ring reduce-scatter).
std::shared_ptr<Work> GlooProcessGroup::reduce_scatter(const Tensor& input, const Tensor& output,
                                                       const std::vector<int64_t>& dim0_sizes, ReduceOp reduce,
                                                       const Ranks& ranks) {
  const char* op = "reduce_scatter";
  check_cpu_pair(input, output, op);
  ReduceFunction reduce_elements = reduce_function(input.dtype(), reduce, op);
  Ranks members = members_of(ranks, op);
  FLOW_ARG_CHECK(dim0_sizes.size() == members.size(), op, "dim0_sizes has ", dim0_sizes.size(), " entries for ",
                 members.size(), " members");
  int64_t index = std::lower_bound(members.begin(), members.end(), options_.rank) - members.begin();
  int64_t row = row_elements(input, op, "the input");
  FLOW_ARG_CHECK(input.shape()[0] == sum(dim0_sizes), op, "the input has ", input.shape()[0],
                 " rows but dim0_sizes adds up to ", sum(dim0_sizes));
  FLOW_ARG_CHECK(output.numel() == dim0_sizes[index] * row, op, "the output has ", output.numel(), " elements, expected ",
                 dim0_sizes[index], " rows of ", row);
  CollectiveHeader header{.collective = Collective::kReduceScatter, .dtype = input.dtype(), .reduce = reduce,
                          .has_reduce = 1, .numel = input.numel(), .row_elements = row,
                          .sizes_digest = sizes_digest(dim0_sizes)};
  return submit_collective(header, members, [this, input, output, dim0_sizes, index, row, reduce, reduce_elements](Communicator& members) {
    if (input.numel() == 0) return;
    size_t element_bytes = itemsize(input.dtype());
    std::vector<unsigned char> reduced(static_cast<size_t>(input.nbytes()));
    std::memcpy(reduced.data(), input.data_ptr(), reduced.size());
    gloo::AllreduceOptions options(members.context);
    set_allreduce_buffer(options, reduced.data(), static_cast<size_t>(input.numel()), element_bytes);
    options.setReduceFunction(reduce_elements);
    options.setTag(members.tag());
    options.setTimeout(options_.timeout);
    gloo::allreduce(options);
    int64_t first_row = std::accumulate(dim0_sizes.begin(), dim0_sizes.begin() + index, int64_t{0});
    std::memcpy(output.data_ptr(), reduced.data() + first_row * row * element_bytes, static_cast<size_t>(output.nbytes()));
    if (reduce == ReduceOp::kAvg) {
      divide_in_place(output.data_ptr(), output.dtype(), output.numel(), static_cast<int64_t>(members.members.size()));
    }
  });
}

std::shared_ptr<Work> GlooProcessGroup::broadcast(const Tensor& tensor, int64_t root, const Ranks& ranks) {
  const char* op = "broadcast";
  check_cpu_tensor(tensor, op, "the tensor");
  Ranks members = members_of(ranks, op);
  auto root_position = std::lower_bound(members.begin(), members.end(), root);
  FLOW_ARG_CHECK(root_position != members.end() && *root_position == root, op, "the root rank ", root,
                 " is not one of the members [", ranks_key(members), "]");
  int root_index = static_cast<int>(root_position - members.begin());
  CollectiveHeader header{.collective = Collective::kBroadcast, .dtype = tensor.dtype(), .root = root, .numel = tensor.numel()};
  return submit_collective(header, members, [this, tensor, root_index](Communicator& members) {
    if (tensor.numel() == 0) return;
    gloo::BroadcastOptions options(members.context);
    options.setOutput(static_cast<uint8_t*>(tensor.data_ptr()), static_cast<size_t>(tensor.nbytes()));
    options.setRoot(root_index);
    options.setTag(members.tag());
    options.setTimeout(options_.timeout);
    gloo::broadcast(options);
  });
}

std::shared_ptr<Work> GlooProcessGroup::all_to_all(const Tensor& input, const std::vector<int64_t>& send_sizes,
                                                   const Tensor& output, const std::vector<int64_t>& recv_sizes,
                                                   const Ranks& ranks) {
  const char* op = "all_to_all";
  check_cpu_pair(input, output, op);
  Ranks members = members_of(ranks, op);
  FLOW_ARG_CHECK(send_sizes.size() == members.size() && recv_sizes.size() == members.size(), op,
                 "send_sizes and recv_sizes need one entry per member (", members.size(), "), got ", send_sizes.size(),
                 " and ", recv_sizes.size());
  int64_t row = row_elements(input, op, "the input");
  FLOW_ARG_CHECK(row_elements(output, op, "the output") == row, op, "the input's rows have ", row,
                 " elements but the output's have ", row_elements(output, op, "the output"));
  FLOW_ARG_CHECK(input.shape()[0] == sum(send_sizes), op, "the input has ", input.shape()[0],
                 " rows but send_sizes adds up to ", sum(send_sizes));
  FLOW_ARG_CHECK(output.shape()[0] == sum(recv_sizes), op, "the output has ", output.shape()[0],
                 " rows but recv_sizes adds up to ", sum(recv_sizes));
  CollectiveHeader header{.collective = Collective::kAllToAll, .dtype = input.dtype(), .row_elements = row};
  int64_t row_bytes = row * static_cast<int64_t>(itemsize(input.dtype()));
  return submit_collective(header, members, [this, input, output, send_sizes, recv_sizes, row_bytes](Communicator& members) {
    // Each member's send sizes, so that every receiver checks what it is about to get.
    size_t count = members.members.size();
    std::vector<int64_t> sizes_sent_by(count * count);
    gloo::AllgatherOptions exchange(members.context);
    exchange.setInput(const_cast<int64_t*>(send_sizes.data()), count);
    exchange.setOutput(sizes_sent_by.data(), sizes_sent_by.size());
    exchange.setTag(members.tag());
    exchange.setTimeout(options_.timeout);
    gloo::allgather(exchange);
    for (size_t peer = 0; peer < count; ++peer) {
      int64_t incoming = sizes_sent_by[peer * count + members.index];
      if (incoming != recv_sizes[peer]) {
        fail("all_to_all", "rank ", options_.rank, ": peer rank ", members.members[peer], " sends ", incoming,
             " rows to this rank, this rank expects ", recv_sizes[peer]);
      }
    }
    if (input.numel() == 0 && output.numel() == 0) return;
    std::vector<int64_t> send_bytes;
    std::vector<int64_t> recv_bytes;
    for (size_t peer = 0; peer < count; ++peer) {
      send_bytes.push_back(send_sizes[peer] * row_bytes);
      recv_bytes.push_back(recv_sizes[peer] * row_bytes);
    }
    gloo::AlltoallvOptions options(members.context);
    options.setInput(static_cast<uint8_t*>(input.data_ptr()), send_bytes);
    options.setOutput(static_cast<uint8_t*>(output.data_ptr()), recv_bytes);
    options.setTag(members.tag());
    options.setTimeout(options_.timeout);
    gloo::alltoallv(options);
  });
}

void GlooProcessGroup::barrier(const Ranks& ranks) {
  // The agreement exchange is itself an all-gather, which no member leaves before all arrive.
  submit_collective(CollectiveHeader{.collective = Collective::kBarrier}, ranks, nullptr)->wait();
}

void GlooProcessGroup::check_agreement(const CollectiveHeader& header, const Ranks& ranks) {
  submit_collective(header, ranks, nullptr)->wait();
}

std::shared_ptr<Work> GlooProcessGroup::send(const Tensor& tensor, int64_t peer) {
  return submit_point_to_point(Collective::kSend, tensor, peer);
}

std::shared_ptr<Work> GlooProcessGroup::recv(const Tensor& tensor, int64_t peer) {
  return submit_point_to_point(Collective::kRecv, tensor, peer);
}

std::shared_ptr<Work> GlooProcessGroup::submit_point_to_point(Collective direction, const Tensor& tensor, int64_t peer) {
  const char* op = collective_name(direction);
  check_cpu_tensor(tensor, op, "the tensor");
  FLOW_ARG_CHECK(peer >= 0 && peer < options_.world_size && peer != options_.rank, op, "peer rank ", peer,
                 " must be another rank of the world (0..", options_.world_size - 1, ", not this rank ", options_.rank, ")");
  throw_if_broken(op);
  uint64_t sequence = 0;
  CommQueue* queue = nullptr;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    sequence = direction == Collective::kSend ? sends_to_[peer]++ : receives_from_[peer]++;
    std::unique_ptr<CommQueue>& slot = point_to_point_queues_[{direction, peer}];
    if (!slot) slot = std::make_unique<CommQueue>();
    queue = slot.get();
  }
  return queue->submit([this, op, direction, tensor, peer, sequence] {
    guarded(op, [&] {
      throw_if_broken(op);
      transfer(direction, tensor, peer, sequence);
    });
  });
}

// The n-th send from a to b meets the n-th receive at b from a. Each transfer uses three slots
// (below Gloo's collective slots, which carry a non-zero prefix byte): the two headers, then the
// data, which moves only once both sides have seen that they agree.
void GlooProcessGroup::transfer(Collective direction, const Tensor& tensor, int64_t peer, uint64_t sequence) {
  const char* op = collective_name(direction);
  const std::shared_ptr<gloo::Context>& context = world_->context;
  bool sending = direction == Collective::kSend;
  uint64_t first_slot = sequence * 3;
  CollectiveHeader mine{.collective = direction, .dtype = tensor.dtype(), .numel = tensor.numel()};
  CollectiveHeader theirs;
  auto outgoing = context->createUnboundBuffer(&mine, sizeof(mine));
  auto incoming = context->createUnboundBuffer(&theirs, sizeof(theirs));
  incoming->recv(static_cast<int>(peer), first_slot + (sending ? 1 : 0));
  outgoing->send(static_cast<int>(peer), first_slot + (sending ? 0 : 1));
  incoming->waitRecv(options_.timeout);
  outgoing->waitSend(options_.timeout);
  std::string disagreement = describe_disagreement(theirs, peer, mine);
  if (!disagreement.empty()) fail(op, "rank ", options_.rank, ": ", disagreement);
  if (tensor.numel() == 0) return;
  auto data = context->createUnboundBuffer(tensor.data_ptr(), static_cast<size_t>(tensor.nbytes()));
  if (sending) {
    data->send(static_cast<int>(peer), first_slot + 2);
    data->waitSend(options_.timeout);
  } else {
    data->recv(static_cast<int>(peer), first_slot + 2);
    data->waitRecv(options_.timeout);
  }
}

}  // namespace flow::distributed
