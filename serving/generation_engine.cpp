#include "serving/generation_engine.h"

#include <glog/logging.h>

#include <algorithm>

#include "serving/status.h"

namespace flow::serving {

using Clock = std::chrono::steady_clock;

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "error";
}

struct GenerationEngine::Sequence {
  std::vector<int64_t> tokens;  // the prompt, then what was generated
  GenerationParams params;
  TokenSink sink;
  std::unique_ptr<Generator> generator;
  Clock::time_point submitted;
  int64_t generated = 0;
};

GenerationEngine::GenerationEngine(std::shared_ptr<const DecoderModel> model, EngineOptions options, const ModelMetrics& metrics)
    : model_(std::move(model)), options_(options), metrics_(metrics), cache_(model_, options.slots) {
  slots_.resize(static_cast<size_t>(options_.slots));
  thread_ = std::thread([this] { run(); });
}

GenerationEngine::~GenerationEngine() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void GenerationEngine::check(const std::vector<int64_t>& prompt, const GenerationParams& params) const {
  const DecoderSpec& spec = model_->spec();
  const auto invalid = grpc::StatusCode::INVALID_ARGUMENT;
  if (prompt.empty()) fail_status(invalid, "the prompt is empty");
  for (int64_t token : prompt) {
    if (token < 0 || token >= spec.vocab_size) fail_status(invalid, "token id ", token, " is outside the vocabulary [0, ", spec.vocab_size, ")");
  }
  const int64_t length = static_cast<int64_t>(prompt.size());
  if (length >= spec.max_length) {
    fail_status(invalid, "the prompt has ", length, " tokens; the model holds ", spec.max_length, " in all, so at most ", spec.max_length - 1,
                " leave room to generate");
  }
  if (params.max_tokens < 0) fail_status(invalid, "max_tokens must be >= 0, got ", params.max_tokens);
  if (const auto error = sampling_options_error(params.sampling)) fail_status(invalid, *error);
  if (params.stop_token_ids) {
    for (int64_t token : *params.stop_token_ids) {
      if (token < 0 || token >= spec.vocab_size) fail_status(invalid, "stop token id ", token, " is outside the vocabulary [0, ", spec.vocab_size, ")");
    }
  }
}

void GenerationEngine::submit(std::vector<int64_t> prompt, GenerationParams params, TokenSink sink) {
  check(prompt, params);
  auto sequence = std::make_unique<Sequence>();
  sequence->tokens = std::move(prompt);
  sequence->params = std::move(params);
  if (!sequence->params.stop_token_ids) sequence->params.stop_token_ids = model_->spec().eos_token_ids;
  sequence->sink = std::move(sink);
  sequence->submitted = Clock::now();
  {
    std::lock_guard lock(mutex_);
    if (stopping_) fail_status(grpc::StatusCode::UNAVAILABLE, "the model is being unloaded");
    if (static_cast<int64_t>(waiting_.size()) >= options_.max_waiting) {
      fail_status(grpc::StatusCode::RESOURCE_EXHAUSTED, "too many sequences waiting (", options_.max_waiting, ")");
    }
    sequence->generator = std::make_unique<Generator>(sequence->params.seed ? *sequence->params.seed : next_seed_++);
    waiting_.push_back(std::move(sequence));
    metrics_.pending_request_count->Set(static_cast<double>(waiting_.size()));
  }
  wake_.notify_one();
}

int64_t GenerationEngine::active() const {
  std::lock_guard lock(mutex_);
  return active_;
}

void GenerationEngine::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !waiting_.empty() || active_ > 0; });
    if (stopping_) break;
    admit(lock);
    if (active_ == 0) continue;
    lock.unlock();
    decode_step();
    lock.lock();
  }
  std::deque<std::unique_ptr<Sequence>> left = std::move(waiting_);
  lock.unlock();
  for (auto& sequence : left) finish(*sequence, FinishReason::kCancelled);
  for (auto& slot : slots_) {
    if (slot) finish(*slot, FinishReason::kCancelled);
  }
}

// Prefills waiting sequences into free slots (with the lock released while the model runs). A
// sequence that ends at its first token leaves its slot free for the next one.
void GenerationEngine::admit(std::unique_lock<std::mutex>& lock) {
  size_t slot = 0;
  while (!waiting_.empty()) {
    while (slot < slots_.size() && slots_[slot]) ++slot;
    if (slot == slots_.size()) return;
    std::unique_ptr<Sequence> sequence = std::move(waiting_.front());
    waiting_.pop_front();
    metrics_.pending_request_count->Set(static_cast<double>(waiting_.size()));
    lock.unlock();
    if (sequence->params.max_tokens == 0) {
      finish(*sequence, FinishReason::kLength);
    } else {
      try {
        const auto started = Clock::now();
        const Tensor logits = cache_.prefill(static_cast<int64_t>(slot), sequence->tokens);
        metrics_.queue_duration_us->Increment(
            static_cast<double>(std::chrono::duration_cast<std::chrono::microseconds>(started - sequence->submitted).count()));
        const bool going = advance(*sequence, logits);
        if (sequence->generated > 0) {
          metrics_.first_response_ms->Observe(std::chrono::duration<double, std::milli>(Clock::now() - sequence->submitted).count());
        }
        if (going) slots_[slot] = std::move(sequence);
      } catch (const std::exception& e) {
        finish(*sequence, FinishReason::kError, e.what());
      }
    }
    lock.lock();
    if (slots_[slot]) ++active_;
  }
}

void GenerationEngine::decode_step() {
  // The step runs the slots up to the last one in use (admit() fills the lowest free slots first).
  size_t rows = slots_.size();
  while (rows > 1 && !slots_[rows - 1]) --rows;
  std::vector<int64_t> tokens(rows, 0), lengths(rows, 0);
  for (size_t slot = 0; slot < rows; ++slot) {
    if (!slots_[slot]) continue;
    // The newest token is not in the cache yet: it goes in at its position now.
    tokens[slot] = slots_[slot]->tokens.back();
    lengths[slot] = static_cast<int64_t>(slots_[slot]->tokens.size()) - 1;
  }
  Tensor logits;
  try {
    const auto started = Clock::now();
    logits = cache_.decode(tokens, lengths);
    metrics_.exec_count->Increment();
    metrics_.compute_infer_duration_us->Increment(
        static_cast<double>(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started).count()));
  } catch (const std::exception& e) {
    LOG(ERROR) << "[serving] decode step failed: " << e.what();
    for (auto& slot : slots_) {
      if (slot) finish(*slot, FinishReason::kError, e.what());
      slot.reset();
    }
    std::lock_guard lock(mutex_);
    active_ = 0;
    return;
  }
  int64_t ended = 0;
  for (size_t slot = 0; slot < rows; ++slot) {
    if (!slots_[slot]) continue;
    if (!advance(*slots_[slot], logits.slice(0, static_cast<int64_t>(slot), static_cast<int64_t>(slot) + 1))) {
      slots_[slot].reset();
      ++ended;
    }
  }
  std::lock_guard lock(mutex_);
  active_ -= ended;
}

bool GenerationEngine::advance(Sequence& sequence, const Tensor& logits) {
  const GenerationParams& p = sequence.params;
  const int64_t token = next_tokens(logits, p.sampling, {sequence.tokens}, sequence.generator.get()).item<int64_t>();
  sequence.tokens.push_back(token);
  ++sequence.generated;
  metrics_.inference_count->Increment();
  if (!sequence.sink.on_token(token)) {
    finish(sequence, FinishReason::kCancelled);
    return false;
  }
  const auto& stops = *p.stop_token_ids;
  if (std::find(stops.begin(), stops.end(), token) != stops.end()) {
    finish(sequence, FinishReason::kStop);
    return false;
  }
  // The cache holds max_length tokens: the newest one must still fit when it is decoded.
  if (sequence.generated >= p.max_tokens || static_cast<int64_t>(sequence.tokens.size()) >= model_->spec().max_length) {
    finish(sequence, FinishReason::kLength);
    return false;
  }
  return true;
}

void GenerationEngine::finish(Sequence& sequence, FinishReason reason, const std::string& error) {
  const auto elapsed = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - sequence.submitted).count();
  if (reason == FinishReason::kStop || reason == FinishReason::kLength) {
    metrics_.request_success->Increment();
    metrics_.request_duration_us->Increment(static_cast<double>(elapsed));
  } else {
    metrics_.count_failure(reason == FinishReason::kCancelled ? FailureReason::kCanceled : FailureReason::kBackend);
  }
  sequence.sink.on_finish(reason, error);
}

}  // namespace flow::serving
