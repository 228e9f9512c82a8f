#pragma once
// ModelStreamInfer (Triton's streaming extension) on the callback API: a bidirectional stream on
// which each request is handed to a handler as it arrives, and the handler's responses (one, or
// one per generated token) are written in the order they are sent, one write at a time.
#include <functional>
#include <memory>

#include "serving/grpc_predict_v2.grpc.pb.h"
#include "serving/request_tracker.h"

namespace flow::serving {

// The sending side of one request on a stream. Any thread may use it.
class StreamResponder {
 public:
  virtual ~StreamResponder() = default;
  // Queues a response; `last` ends this request's answer (a responder dropped before sending its
  // last response ends it with nothing more). False once the stream is gone (the client
  // cancelled, or the call finished): stop producing.
  virtual bool send(inference::ModelStreamInferResponse response, bool last) = 0;
  virtual bool cancelled() const = 0;
};

// Starts handling one request: must not block (queue the work), and answers through `responder`.
using StreamRequestHandler =
    std::function<void(std::shared_ptr<const inference::ModelInferRequest> request, std::shared_ptr<StreamResponder> responder)>;

// The reactor of one ModelStreamInfer call. Each request is admitted by `tracker` (refused with an
// error response while the server drains) and stays in flight until its last response is queued.
// The call finishes once the client has half-closed and every answer is written, or at once when
// the client cancels.
grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>* start_stream_infer(RequestTracker& tracker,
                                                                                                            StreamRequestHandler handler);

}  // namespace flow::serving
