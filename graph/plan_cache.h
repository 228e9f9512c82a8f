#pragma once
// The compiled plans of one nn::Graph, keyed by input signature (graph/signature.h), as
// torch.compile's guards: a call whose signature matches a plan runs it, a new signature compiles
// another plan, up to the graph's cache limit; past it a call is an error naming the signatures
// seen (each plan holds its own Job, runtime and planned memory, so the limit bounds memory).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "graph/signature.h"

namespace flow::graph {

// Compiled: a plan with an `InputSignature signature` member. Plans stay where they were made.
template <typename Compiled>
class PlanCache {
 public:
  // The plan for `signature` (the latest one run is tried first), or null; a found plan becomes
  // the latest.
  Compiled* find(const InputSignature& signature) {
    if (latest_ && latest_->signature == signature) return latest_;
    for (auto& plan : plans_) {
      if (plan->signature == signature) return latest_ = plan.get();
    }
    return nullptr;
  }
  // Why `signature` fails each plan's guards, in compile order. Throws flow::Error naming `graph`
  // when one more plan would pass `limit`.
  std::vector<std::string> guard_failures(const InputSignature& signature, int64_t limit, const std::string& graph) const {
    if (static_cast<int64_t>(plans_.size()) >= limit) {
      std::string seen;
      for (size_t i = 0; i < plans_.size(); ++i) seen += "\n  plan " + std::to_string(i) + ": " + signature_str(plans_[i]->signature);
      fail("graph", graph, ": input signature ", signature_str(signature), " would compile a plan past the cache limit of ", limit,
           " (graph.config().set_cache_limit(n) raises it); signatures compiled:", seen);
    }
    std::vector<std::string> failures;
    for (const auto& plan : plans_) failures.push_back(signature_change(plan->signature, signature));
    return failures;
  }
  // Keeps a newly compiled plan; it becomes the latest.
  Compiled& add(std::unique_ptr<Compiled> plan) {
    plans_.push_back(std::move(plan));
    return *(latest_ = plans_.back().get());
  }

  // The plan the latest call ran, or null before the first.
  const Compiled* latest() const { return latest_; }
  Compiled* latest() { return latest_; }
  bool empty() const { return plans_.empty(); }
  size_t size() const { return plans_.size(); }
  // In compile order.
  const Compiled& at(size_t index) const { return *plans_.at(index); }

 private:
  std::vector<std::unique_ptr<Compiled>> plans_;
  Compiled* latest_ = nullptr;
};

}  // namespace flow::graph
