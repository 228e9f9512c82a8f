#pragma once
// Text generation by decoder models over both protocols:
// - REST, Triton's generate extension: POST /v2/models/{name}[/versions/{v}]/generate answers
//   once with the whole output; .../generate_stream answers as server-sent events, one per token
//   ("data: {...}\n\n"), the last with finish_reason. The body is a JSON object with text_input
//   (a string, for a model with a tokenizer) or input_ids (token ids), and the parameters
//   (max_tokens, do_sample, temperature, top_k, top_p, repetition_penalty, seed, stop_token_ids)
//   at its top level or in "parameters".
// - gRPC ModelStreamInfer to a decoder model: inputs text_input (BYTES) or input_ids (INT64), the
//   same parameters; one response per token (outputs text_output and output_ids), then a last one
//   with no outputs and the parameters triton_final_response = true and finish_reason.
// A stream whose client goes away cancels its sequence, which frees its slot at once.
#include <memory>

#include "serving/http_endpoint.h"
#include "serving/model_repository.h"
#include "serving/request_tracker.h"
#include "serving/stream_infer.h"

namespace flow::serving {

// Answers POST {model path}/generate (stream = false) or /generate_stream on the calling worker
// thread; HTTP errors: 400 for a bad request, 404 for an unknown model, 503 when full or draining.
void generate_over_http(const HttpRequest& request, HttpResponse& response, ModelRepository& repository, RequestTracker& tracker,
                        bool stream);

// Starts a ModelStreamInfer request on `served` when it is a decoder model (its answer goes to
// `responder`); false for other models.
bool start_stream_generation(ServedModel& served, std::shared_ptr<const inference::ModelInferRequest> request,
                             std::shared_ptr<StreamResponder> responder);

}  // namespace flow::serving
