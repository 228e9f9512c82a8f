#pragma once
// The actor runtime. One actor per task; each actor lives on one thread (a thread per
// (device, stream), e.g. "cpu:io" and "cpu:compute"). An actor produces one register with
// register_num slots: piece k goes to slot k % register_num. Actors exchange "register ready"
// (producer -> consumer) and "register consumed" (consumer -> producer) messages, and an actor
// acts on its next piece when every input register holds that piece and its own register has
// a free slot. With register_num >= 2 a producer runs ahead: loading piece k+1 overlaps
// computing piece k.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace flow::graph {

struct ActorSpec {
  std::string name;
  std::string thread;       // actors naming the same thread share it
  std::vector<int> inputs;  // producing actors, by index
  int register_num = 1;
  // A gated actor acts on piece k only after every sink finished piece k-1: the compute section
  // of a graph shares one memory plan, so only its inputs may run ahead.
  bool gated = false;
  // Acts on `piece`, writing slot `slot` of its register and reading slot input_slots[i] of
  // input i's register.
  std::function<void(int64_t piece, int slot, const std::vector<int>& input_slots)> act;
  // Blocks until another process takes part (a send or recv): such an actor needs its own
  // thread, even in a one-piece run.
  bool waits_for_peers = false;
};

class ActorRuntime {
 public:
  explicit ActorRuntime(std::vector<ActorSpec> actors);
  ~ActorRuntime();
  ActorRuntime(const ActorRuntime&) = delete;
  ActorRuntime& operator=(const ActorRuntime&) = delete;

  // Every actor acts once on each of pieces [0, pieces); returns when all sinks (actors nobody
  // reads) have finished them. The first exception an act throws stops the run and is rethrown
  // here, on the caller's thread; the runtime stays usable. A one-piece run has nothing to
  // overlap unless an actor waits for peers, so the caller's thread then stands in for every
  // actor thread and delivers the messages itself: the same protocol without a hand-off between
  // threads per task.
  void run(int64_t pieces);
  size_t num_threads() const { return threads_.size(); }
  const std::vector<std::string>& thread_names() const { return thread_names_; }

 private:
  enum class MessageKind { kStart, kReady, kConsumed, kGateOpened };
  struct Message {
    MessageKind kind;
    int actor;
    int from;
    int64_t piece;
    uint64_t epoch;
  };
  struct ActorState {
    int64_t next_piece = 0;
    std::vector<int64_t> ready;              // per input: pieces ready and not yet consumed
    int64_t in_flight = 0;                   // own pieces not yet consumed by every consumer
    std::deque<int> consumed_counts;         // per in-flight piece, consumers done with it
  };
  // Messages from other threads arrive in `queue` (locked); messages an actor sends to an actor
  // on its own thread go to `local`, touched only by that thread, so a chain of compute actors
  // runs without locks or wake-ups.
  struct Worker {
    std::mutex mutex;
    std::condition_variable wake;
    std::deque<Message> queue;
    std::deque<Message> local;
    bool shutting_down = false;
    std::thread thread;
  };

  void post(int actor, MessageKind kind, int from, int64_t piece, uint64_t epoch);
  // Sends the same message to many actors, locking each target thread's queue once.
  void post_all(const std::vector<int>& actors, MessageKind kind, uint64_t epoch);
  void worker_loop(size_t index);
  void handle(const Message& message);
  void try_act(int actor, uint64_t epoch);
  bool can_act(int actor) const;
  void finish_piece_at_sink(int64_t piece);
  void stop_run(std::exception_ptr error);
  // Returns once no message is queued or being handled on any worker thread. A worker seen idle
  // can receive a message from a busy one later, so idleness is counted, not polled per worker:
  // a stale message handled while the next run resets the actors' states could act on the new
  // run's piece under the old epoch, and that run would then wait forever.
  void wait_idle();
  void start_run(int64_t pieces, uint64_t& epoch);
  void run_on_caller(uint64_t epoch);

  std::vector<ActorSpec> actors_;
  std::vector<ActorState> states_;
  std::vector<std::vector<int>> consumers_;
  std::vector<size_t> actor_worker_;
  std::vector<std::string> thread_names_;
  std::vector<std::unique_ptr<Worker>> threads_;
  std::vector<int> sinks_;
  std::vector<int> gated_;
  std::vector<int> all_actors_;
  bool any_waits_for_peers_ = false;

  // Run state. Messages of an earlier (or stopped) run carry an old epoch and are dropped.
  std::atomic<uint64_t> epoch_{0};
  std::atomic<int64_t> completed_pieces_{0};
  int64_t pieces_ = 0;
  std::mutex run_mutex_;  // guards what follows
  std::condition_variable run_done_;
  std::deque<int> sink_counts_;  // per unfinished piece, sinks done with it
  std::exception_ptr error_;
  // Messages posted to worker threads and not yet handled (see wait_idle).
  std::atomic<int64_t> pending_messages_{0};
  std::mutex idle_mutex_;
  std::condition_variable idle_;
  std::deque<Message> caller_queue_;  // messages of a run driven by the caller's thread
};

}  // namespace flow::graph
