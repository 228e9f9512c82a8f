#include "serving/stream_infer.h"

#include <deque>
#include <mutex>

namespace flow::serving {
namespace {

using Request = inference::ModelInferRequest;
using Response = inference::ModelStreamInferResponse;

class StreamReactor;

// What a call's responders share with its reactor: they outlive it (a handler may answer after the
// client is gone), so they reach the reactor only through here, and only until it finishes. The
// mutex is recursive because gRPC may run a reaction (OnWriteDone) inside StartWrite.
struct StreamState {
  std::recursive_mutex mutex;
  StreamReactor* reactor = nullptr;  // null once finished
  std::deque<Response> queue;
  bool writing = false;
  int64_t unanswered = 0;  // requests whose last response is not queued yet
  bool reads_done = false;
  bool cancelled = false;
};

class StreamReactor final : public grpc::ServerBidiReactor<Request, Response> {
 public:
  StreamReactor(RequestTracker& tracker, StreamRequestHandler handler)
      : tracker_(tracker), handler_(std::move(handler)), state_(std::make_shared<StreamState>()) {
    state_->reactor = this;
    StartRead(&request_);
  }

  // Queues `response` (under the state's lock) and writes it unless a write is in flight.
  static void enqueue(StreamState& state, Response response) {
    state.queue.push_back(std::move(response));
    if (!state.writing) state.reactor->write_next();
  }

  // Finishes the call when nothing is left to read, answer or write, or when cancelled. Under the
  // state's lock.
  static void maybe_finish(StreamState& state) {
    StreamReactor* reactor = state.reactor;
    if (!reactor || state.writing) return;  // a write in flight: its OnWriteDone comes back here
    const bool drained = state.reads_done && state.unanswered == 0 && state.queue.empty() && !state.writing;
    if (!drained && !state.cancelled) return;
    state.reactor = nullptr;
    reactor->Finish(state.cancelled ? grpc::Status(grpc::StatusCode::CANCELLED, "[serving] the client cancelled the stream") : grpc::Status::OK);
  }

  void OnReadDone(bool ok) override {
    std::shared_ptr<const Request> request;
    {
      std::lock_guard lock(state_->mutex);
      if (!ok) {
        state_->reads_done = true;
        return maybe_finish(*state_);
      }
      request = std::make_shared<const Request>(std::move(request_));
      request_.Clear();
      if (tracker_.begin()) {
        ++state_->unanswered;
      } else {
        Response refusal;
        refusal.set_error_message("[serving] the server is shutting down");
        refusal.mutable_infer_response()->set_id(request->id());
        enqueue(*state_, std::move(refusal));
        request.reset();
      }
    }
    // Not under the state's lock: the handler takes other locks (a model's queue) whose holders
    // call back into this stream (cancelled(), send()).
    if (request) handler_(request, std::make_shared<Responder>(state_, tracker_));
    std::lock_guard lock(state_->mutex);
    if (state_->reactor && !state_->cancelled) StartRead(&request_);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard lock(state_->mutex);
    state_->writing = false;
    if (!ok) state_->cancelled = true;  // the stream broke: nothing more can be written
    if (state_->cancelled) {
      state_->queue.clear();
      return maybe_finish(*state_);
    }
    if (!state_->queue.empty()) return write_next();
    maybe_finish(*state_);
  }

  void OnCancel() override {
    std::lock_guard lock(state_->mutex);
    state_->cancelled = true;
    state_->queue.clear();
    if (!state_->writing) maybe_finish(*state_);
  }

  void OnDone() override {
    {
      std::lock_guard lock(state_->mutex);
      state_->reactor = nullptr;
    }
    delete this;
  }

 private:
  // One request's responder: its answer ends (the request leaves the tracker) with its last
  // response, or when it is dropped.
  class Responder final : public StreamResponder {
   public:
    Responder(std::shared_ptr<StreamState> state, RequestTracker& tracker) : state_(std::move(state)), tracker_(tracker) {}
    ~Responder() override { end(); }

    bool send(Response response, bool last) override {
      std::lock_guard lock(state_->mutex);
      if (answered_) return false;
      const bool open = state_->reactor && !state_->cancelled;
      if (open) enqueue(*state_, std::move(response));
      if (last || !open) end_locked();
      return open && !last;
    }
    bool cancelled() const override {
      std::lock_guard lock(state_->mutex);
      return !state_->reactor || state_->cancelled;
    }

   private:
    void end() {
      std::lock_guard lock(state_->mutex);
      end_locked();
    }
    void end_locked() {
      if (answered_) return;
      answered_ = true;
      --state_->unanswered;
      tracker_.end();
      maybe_finish(*state_);
    }

    std::shared_ptr<StreamState> state_;
    RequestTracker& tracker_;
    bool answered_ = false;
  };

  // Under the state's lock, with a non-empty queue and no write in flight.
  void write_next() {
    response_ = std::move(state_->queue.front());
    state_->queue.pop_front();
    state_->writing = true;
    StartWrite(&response_);
  }

  RequestTracker& tracker_;
  const StreamRequestHandler handler_;
  std::shared_ptr<StreamState> state_;
  Request request_;    // the read in flight
  Response response_;  // the write in flight
};

}  // namespace

grpc::ServerBidiReactor<Request, Response>* start_stream_infer(RequestTracker& tracker, StreamRequestHandler handler) {
  return new StreamReactor(tracker, std::move(handler));
}

}  // namespace flow::serving
