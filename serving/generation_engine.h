#pragma once
// Continuous batching for a served decoder: one thread owns a DecoderCache of `slots` rows. Each
// round it prefills waiting sequences into free rows, then runs one decode step for every row in
// use, so a new sequence joins the running batch at the next step instead of waiting for the
// batch to finish; a finished or cancelled sequence frees its row at once.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/random.h"
#include "core/sampling.h"
#include "serving/decoder_model.h"
#include "serving/metrics.h"

namespace flow::serving {

// One request's generation settings (Hugging Face's names; Triton's max_tokens).
struct GenerationParams {
  int64_t max_tokens = 16;  // generated tokens at most
  SamplingOptions sampling;  // greedy by default
  std::optional<uint64_t> seed;  // unset: a seed from the engine's own sequence
  std::optional<std::vector<int64_t>> stop_token_ids;  // unset: the model's eos tokens
};

// Why a sequence ended.
enum class FinishReason { kStop, kLength, kCancelled, kError };
const char* finish_reason_name(FinishReason reason);

// Callbacks of one sequence, run on the engine's thread (keep them short: they hold up every
// sequence in the batch).
struct TokenSink {
  // Each generated token, in order. Returning false cancels the sequence (its client is gone).
  std::function<bool(int64_t token)> on_token;
  // Exactly once, after the last on_token: why it ended, and for kError the message.
  std::function<void(FinishReason reason, const std::string& error)> on_finish;
};

struct EngineOptions {
  int64_t slots = 8;         // sequences decoded together at most
  int64_t max_waiting = 64;  // sequences queued for a free slot at most; more: submit() refuses
};

class GenerationEngine {
 public:
  GenerationEngine(std::shared_ptr<const DecoderModel> model, EngineOptions options, const ModelMetrics& metrics);
  // Cancels every sequence (their on_finish says kCancelled) and joins the thread.
  ~GenerationEngine();
  GenerationEngine(const GenerationEngine&) = delete;
  GenerationEngine& operator=(const GenerationEngine&) = delete;

  // Throws ServingError(INVALID_ARGUMENT) for a request that cannot run: an empty prompt, a token
  // id outside the vocabulary, a prompt without room for one more token, bad parameters.
  void check(const std::vector<int64_t>& prompt, const GenerationParams& params) const;
  // check()s the request and queues it; ServingError(RESOURCE_EXHAUSTED) when max_waiting
  // sequences already wait, UNAVAILABLE while the engine stops.
  void submit(std::vector<int64_t> prompt, GenerationParams params, TokenSink sink);

  const DecoderModel& model() const { return *model_; }
  // Sequences holding a slot.
  int64_t active() const;

 private:
  struct Sequence;
  void run();
  void admit(std::unique_lock<std::mutex>& lock);
  void decode_step();
  // Chooses the sequence's next token from its logits (1, vocab) and hands it over; false when
  // the sequence ended.
  bool advance(Sequence& sequence, const Tensor& logits);
  void finish(Sequence& sequence, FinishReason reason, const std::string& error = "");

  std::shared_ptr<const DecoderModel> model_;
  const EngineOptions options_;
  ModelMetrics metrics_;
  DecoderCache cache_;
  std::vector<std::unique_ptr<Sequence>> slots_;  // engine thread only; null: free

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  int64_t active_ = 0;
  bool stopping_ = false;
  uint64_t next_seed_ = 0;
  std::thread thread_;
};

}  // namespace flow::serving
