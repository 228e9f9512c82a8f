#include "graph/runtime.h"

#include <glog/logging.h>

#include <algorithm>

#include "core/grad_mode.h"

namespace flow::graph {

ActorRuntime::ActorRuntime(std::vector<ActorSpec> actors) : actors_(std::move(actors)) {
  const int n = static_cast<int>(actors_.size());
  states_.resize(n);
  consumers_.resize(n);
  actor_worker_.resize(n);
  for (int a = 0; a < n; ++a) {
    const ActorSpec& spec = actors_[a];
    CHECK_GE(spec.register_num, 1) << spec.name;
    CHECK(spec.act) << spec.name;
    for (int input : spec.inputs) {
      CHECK(input >= 0 && input < n && input != a) << spec.name << " reads actor " << input;
      CHECK(std::count(spec.inputs.begin(), spec.inputs.end(), input) == 1) << spec.name << " reads actor " << input << " twice";
      consumers_[input].push_back(a);
    }
    auto named = std::find(thread_names_.begin(), thread_names_.end(), spec.thread);
    actor_worker_[a] = static_cast<size_t>(named - thread_names_.begin());
    if (named == thread_names_.end()) thread_names_.push_back(spec.thread);
  }
  for (int a = 0; a < n; ++a) {
    if (consumers_[a].empty()) sinks_.push_back(a);
    if (actors_[a].gated) gated_.push_back(a);
    any_waits_for_peers_ = any_waits_for_peers_ || actors_[a].waits_for_peers;
    all_actors_.push_back(a);
  }
  // Every worker exists before any thread starts: a running thread reads threads_, which must not
  // grow (and move its entries) under it.
  for (size_t t = 0; t < thread_names_.size(); ++t) threads_.push_back(std::make_unique<Worker>());
  for (size_t t = 0; t < threads_.size(); ++t) threads_[t]->thread = std::thread([this, t] { worker_loop(t); });
}

ActorRuntime::~ActorRuntime() {
  for (auto& worker : threads_) {
    std::lock_guard<std::mutex> lock(worker->mutex);
    worker->shutting_down = true;
    worker->wake.notify_all();
  }
  for (auto& worker : threads_) worker->thread.join();
}

namespace {
// The worker whose thread this is (nullptr off the runtime's threads).
thread_local const void* current_worker = nullptr;
// The runtime whose run this thread drives on its own (see ActorRuntime::run).
thread_local const void* driven_runtime = nullptr;
}  // namespace

void ActorRuntime::post(int actor, MessageKind kind, int from, int64_t piece, uint64_t epoch) {
  if (driven_runtime == this) {
    caller_queue_.push_back({kind, actor, from, piece, epoch});
    return;
  }
  Worker& worker = *threads_[actor_worker_[actor]];
  ++pending_messages_;
  if (current_worker == &worker) {
    worker.local.push_back({kind, actor, from, piece, epoch});
    return;
  }
  std::lock_guard<std::mutex> lock(worker.mutex);
  worker.queue.push_back({kind, actor, from, piece, epoch});
  worker.wake.notify_one();
}

void ActorRuntime::post_all(const std::vector<int>& actors, MessageKind kind, uint64_t epoch) {
  if (driven_runtime == this) {
    for (int actor : actors) caller_queue_.push_back({kind, actor, -1, 0, epoch});
    return;
  }
  std::vector<std::vector<int>> by_worker(threads_.size());
  for (int actor : actors) by_worker[actor_worker_[actor]].push_back(actor);
  pending_messages_ += static_cast<int64_t>(actors.size());
  for (size_t w = 0; w < threads_.size(); ++w) {
    if (by_worker[w].empty()) continue;
    Worker& worker = *threads_[w];
    if (current_worker == &worker) {
      for (int actor : by_worker[w]) worker.local.push_back({kind, actor, -1, 0, epoch});
      continue;
    }
    std::lock_guard<std::mutex> lock(worker.mutex);
    for (int actor : by_worker[w]) worker.queue.push_back({kind, actor, -1, 0, epoch});
    worker.wake.notify_one();
  }
}

void ActorRuntime::worker_loop(size_t index) {
  // Kernels run by actors never record autograd.
  set_grad_enabled(false);
  Worker& worker = *threads_[index];
  current_worker = &worker;
  std::unique_lock<std::mutex> lock(worker.mutex);
  while (true) {
    worker.wake.wait(lock, [&] { return worker.shutting_down || !worker.queue.empty(); });
    if (worker.queue.empty()) return;  // shutting down
    worker.local.swap(worker.queue);
    lock.unlock();
    while (!worker.local.empty()) {
      const Message message = worker.local.front();
      worker.local.pop_front();
      handle(message);
      // Counted down only after handling: the messages an act posts were counted first.
      if (pending_messages_.fetch_sub(1) == 1) {
        std::lock_guard<std::mutex> idle_lock(idle_mutex_);
        idle_.notify_all();
      }
    }
    lock.lock();
  }
}

void ActorRuntime::handle(const Message& message) {
  if (message.epoch != epoch_.load()) return;
  ActorState& state = states_[message.actor];
  const ActorSpec& spec = actors_[message.actor];
  switch (message.kind) {
    case MessageKind::kStart:
    case MessageKind::kGateOpened:
      break;
    case MessageKind::kReady: {
      const auto it = std::find(spec.inputs.begin(), spec.inputs.end(), message.from);
      CHECK(it != spec.inputs.end());
      ++state.ready[it - spec.inputs.begin()];
      break;
    }
    case MessageKind::kConsumed: {
      const int64_t oldest = state.next_piece - state.in_flight;
      const int64_t slot = message.piece - oldest;
      CHECK(slot >= 0 && slot < static_cast<int64_t>(state.consumed_counts.size()));
      ++state.consumed_counts[slot];
      const int consumers = static_cast<int>(consumers_[message.actor].size());
      while (!state.consumed_counts.empty() && state.consumed_counts.front() == consumers) {
        state.consumed_counts.pop_front();
        --state.in_flight;
      }
      break;
    }
  }
  try_act(message.actor, message.epoch);
}

bool ActorRuntime::can_act(int actor) const {
  const ActorState& state = states_[actor];
  const ActorSpec& spec = actors_[actor];
  if (state.next_piece >= pieces_) return false;
  for (int64_t ready : state.ready) {
    if (ready == 0) return false;
  }
  if (state.in_flight >= spec.register_num) return false;
  return !spec.gated || completed_pieces_.load() >= state.next_piece;
}

void ActorRuntime::try_act(int actor, uint64_t epoch) {
  ActorState& state = states_[actor];
  const ActorSpec& spec = actors_[actor];
  while (epoch == epoch_.load() && can_act(actor)) {
    const int64_t piece = state.next_piece;
    std::vector<int> input_slots(spec.inputs.size());
    for (size_t i = 0; i < spec.inputs.size(); ++i) input_slots[i] = static_cast<int>(piece % actors_[spec.inputs[i]].register_num);
    try {
      spec.act(piece, static_cast<int>(piece % spec.register_num), input_slots);
    } catch (...) {
      stop_run(std::current_exception());
      return;
    }
    ++state.next_piece;
    for (size_t i = 0; i < spec.inputs.size(); ++i) {
      --state.ready[i];
      post(spec.inputs[i], MessageKind::kConsumed, actor, piece, epoch);
    }
    if (consumers_[actor].empty()) {
      finish_piece_at_sink(piece);
    } else {
      ++state.in_flight;
      state.consumed_counts.push_back(0);
      for (int consumer : consumers_[actor]) post(consumer, MessageKind::kReady, actor, piece, epoch);
    }
  }
}

void ActorRuntime::finish_piece_at_sink(int64_t piece) {
  std::vector<int> gated;
  uint64_t epoch = 0;
  {
    std::lock_guard<std::mutex> lock(run_mutex_);
    const int64_t offset = piece - completed_pieces_.load();
    CHECK_GE(offset, 0);
    if (sink_counts_.size() <= static_cast<size_t>(offset)) sink_counts_.resize(offset + 1, 0);
    ++sink_counts_[offset];
    bool advanced = false;
    while (!sink_counts_.empty() && sink_counts_.front() == static_cast<int>(sinks_.size())) {
      sink_counts_.pop_front();
      ++completed_pieces_;
      advanced = true;
    }
    if (!advanced) return;
    if (completed_pieces_.load() == pieces_) {
      run_done_.notify_all();
      return;  // no gate left to open
    }
    epoch = epoch_.load();
  }
  post_all(gated_, MessageKind::kGateOpened, epoch);
}

void ActorRuntime::stop_run(std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(run_mutex_);
  if (!error_) error_ = error;
  ++epoch_;  // drops every message still queued for this run
  run_done_.notify_all();
}

void ActorRuntime::wait_idle() {
  std::unique_lock<std::mutex> lock(idle_mutex_);
  idle_.wait(lock, [&] { return pending_messages_.load() == 0; });
}

void ActorRuntime::start_run(int64_t pieces, uint64_t& epoch) {
  std::lock_guard<std::mutex> lock(run_mutex_);
  pieces_ = pieces;
  completed_pieces_ = 0;
  sink_counts_.clear();
  error_ = nullptr;
  for (size_t a = 0; a < actors_.size(); ++a) {
    states_[a] = ActorState();
    states_[a].ready.assign(actors_[a].inputs.size(), 0);
  }
  epoch = ++epoch_;
}

void ActorRuntime::run_on_caller(uint64_t epoch) {
  const bool grad_was_enabled = is_grad_enabled();
  set_grad_enabled(false);  // kernels run by actors never record autograd
  driven_runtime = this;
  struct Restore {
    bool grad;
    std::deque<Message>& queue;
    ~Restore() {
      driven_runtime = nullptr;
      queue.clear();
      set_grad_enabled(grad);
    }
  } restore{grad_was_enabled, caller_queue_};
  post_all(all_actors_, MessageKind::kStart, epoch);
  while (!caller_queue_.empty()) {
    const Message message = caller_queue_.front();
    caller_queue_.pop_front();
    handle(message);
  }
}

void ActorRuntime::run(int64_t pieces) {
  if (pieces <= 0) return;
  uint64_t epoch = 0;
  start_run(pieces, epoch);
  if (pieces == 1 && !any_waits_for_peers_) {
    run_on_caller(epoch);
    std::lock_guard<std::mutex> lock(run_mutex_);
    if (error_) std::rethrow_exception(error_);
    CHECK_EQ(completed_pieces_.load(), pieces_) << "actor messages ran out before the run finished";
    return;
  }
  post_all(all_actors_, MessageKind::kStart, epoch);
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(run_mutex_);
    run_done_.wait(lock, [&] { return error_ != nullptr || completed_pieces_.load() == pieces_; });
    error = error_;
  }
  // Late "consumed" messages and acts still running elsewhere finish before the next run.
  wait_idle();
  if (error) std::rethrow_exception(error);
}

}  // namespace flow::graph
