// Causal self-attention forward + backward, fused (flow::flash_attention) or composite (matmul,
// masked_fill, softmax, matmul: the formula GPT-2 used before), float32 or bfloat16, timed; and the
// process's peak resident memory, so run one configuration per process (bench/attention_bench.sh).
// Prints: "attention <impl> <dtype> dropout <p> B <b> H <h> T <t> D <d> threads <n> ms <median> peak_rss_mb <mb>"; with
// --queries, the decode shape: "attention decode <dtype> B <b> H <h> queries <q> keys <s> D <d> caches <c> threads <n> us_per_call <median>".
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <vector>

#include "autograd/engine.h"
#include "cli/cli.h"
#include "core/flow.h"

namespace {

struct Options {
  std::string impl = "fused", dtype = "float32";
  int64_t batch = 1, heads = 4, length = 1024, head_dim = 64;
  double dropout = 0.0;
  int steps = 5;
  int64_t queries = 0;  // > 0: decode-shaped forward instead (see --queries)
  int64_t caches = 1;   // decode: key/value caches called in turn (see --caches)
};

flow::Tensor composite(const flow::Tensor& q, const flow::Tensor& k, const flow::Tensor& v, double dropout) {
  const int64_t t = q.size(-2);
  const flow::Tensor future = flow::gt(flow::arange(t).unsqueeze(0), flow::arange(t).unsqueeze(1));
  const flow::Tensor scores = flow::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  flow::Tensor weights = flow::softmax(flow::masked_fill(scores, future, -INFINITY), -1);
  // nn::functional::dropout's formula (this benchmark links no nn).
  if (dropout > 0) weights = flow::where(flow::lt(flow::rand_like(weights), 1.0 - dropout), weights * (1.0 / (1.0 - dropout)), 0);
  return flow::matmul(weights, v);
}

// One decode-shaped call repeated: the query rows of a step over a KV cache whose rows hold
// different lengths (a batch of streams at different points), as a decoder step calls the kernel.
int decode(const Options& o) {
  flow::manual_seed(0);
  const flow::DType dtype = o.dtype == "bfloat16" ? flow::kBFloat16 : flow::kFloat32;
  const flow::Tensor q = flow::randn({o.batch, o.heads, o.queries, o.head_dim}).to(dtype);
  std::vector<flow::Tensor> keys, values;
  for (int64_t c = 0; c < o.caches; ++c) {
    keys.push_back(flow::randn({o.batch, o.heads, o.length, o.head_dim}).to(dtype));
    values.push_back(flow::randn({o.batch, o.heads, o.length, o.head_dim}).to(dtype));
  }
  std::vector<int64_t> row_lengths;
  for (int64_t b = 0; b < o.batch; ++b) row_lengths.push_back((b + 1) * o.length / o.batch);
  const flow::Tensor lengths = flow::tensor<int64_t>(row_lengths, flow::Shape{o.batch});
  const flow::Tensor mask = flow::lt(flow::arange(o.length).reshape({1, 1, 1, o.length}), lengths.reshape({o.batch, 1, 1, 1}));
  constexpr int kCalls = 100;
  std::vector<double> us;
  for (int step = 0; step <= o.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    for (int call = 0; call < kCalls; ++call) {
      const auto c = static_cast<size_t>(call % o.caches);
      flow::flash_attention(q, keys[c], values[c], mask);
    }
    if (step > 0) us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / kCalls);
  }
  std::sort(us.begin(), us.end());
  std::cout << "attention decode " << o.dtype << " B " << o.batch << " H " << o.heads << " queries " << o.queries << " keys " << o.length
            << " D " << o.head_dim << " caches " << o.caches << " threads " << flow::get_num_threads() << " us_per_call " << us[us.size() / 2] << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("Causal attention forward + backward, fused or composite, timed, with the peak RSS");
  app.add_option("--impl", o.impl, "fused or composite")->check(CLI::IsMember({"fused", "composite"}))->capture_default_str();
  app.add_option("--dtype", o.dtype, "float32 or bfloat16")->check(CLI::IsMember({"float32", "bfloat16"}))->capture_default_str();
  app.add_option("--batch", o.batch, "batch")->check(flow::cli::at_least<int64_t>(1))->capture_default_str();
  app.add_option("--heads", o.heads, "heads")->check(flow::cli::at_least<int64_t>(1))->capture_default_str();
  app.add_option("--length", o.length, "tokens")->check(flow::cli::at_least<int64_t>(1))->capture_default_str();
  app.add_option("--head-dim", o.head_dim, "features per head")->check(flow::cli::at_least<int64_t>(1))->capture_default_str();
  app.add_option("--dropout", o.dropout, "dropout on the attention weights")->check(CLI::Range(0.0, 0.99))->capture_default_str();
  app.add_option("--steps", o.steps, "timed steps after one warm-up (the median counts)")->check(flow::cli::at_least(1))->capture_default_str();
  app.add_option("--queries", o.queries,
                 "decode shape instead: this many query rows per head attend to --length cached keys under a mask of per-row lengths "
                 "(row b sees its first (b + 1) * length / batch keys), forward only, fused; the median of --steps x 100 calls")
      ->check(flow::cli::at_least<int64_t>(1));
  app.add_option("--caches", o.caches,
                 "with --queries: key/value caches called in turn, as a model's layers are (several make each call read its cache "
                 "from further out in the memory hierarchy)")
      ->check(flow::cli::at_least<int64_t>(1))
      ->capture_default_str();
  if (const auto status = flow::cli::parse(app, argc, argv)) return *status;
  if (o.queries > 0) return decode(o);

  flow::manual_seed(0);
  const flow::DType dtype = o.dtype == "bfloat16" ? flow::kBFloat16 : flow::kFloat32;
  const flow::Shape shape{o.batch, o.heads, o.length, o.head_dim};
  const flow::Tensor q = flow::randn(shape).to(dtype).requires_grad_(true);
  const flow::Tensor k = flow::randn(shape).to(dtype).requires_grad_(true);
  const flow::Tensor v = flow::randn(shape).to(dtype).requires_grad_(true);
  const flow::Tensor grad = flow::randn(shape).to(dtype);
  std::vector<double> ms;
  for (int step = 0; step <= o.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    const flow::Tensor out =
        o.impl == "fused" ? flow::flash_attention(q, k, v, flow::Tensor(), true, std::nullopt, o.dropout) : composite(q, k, v, o.dropout);
    flow::autograd::grad({out}, {q, k, v}, {grad});
    if (step > 0) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::cout << "attention " << o.impl << " " << o.dtype << " dropout " << o.dropout << " B " << o.batch << " H " << o.heads << " T " << o.length << " D " << o.head_dim
            << " threads " << flow::get_num_threads() << " ms " << ms[ms.size() / 2] << " peak_rss_mb " << usage.ru_maxrss / 1024.0
            << std::endl;
  return 0;
}
