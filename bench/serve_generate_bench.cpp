// Serving throughput of a decoder language model, continuous batching against sequential serving,
// in one process: a GPT-2 of random weights (--model gpt_train: examples/gpt_train's defaults, 4
// layers, width 256, 4 heads, 256 byte tokens, 128 positions; --model gpt2: GPT-2 small) exported
// with flow::models::export_decoder into a temporary model repository (config max_batch_size:
// --slots), served by an in-process flow::serving::Server, and asked over REST generate_stream
// (server-sent events) for --new greedy tokens after each of --streams random prompts: first one
// request after another (sequential), then all at once from --streams client threads (concurrent).
// Every request must get exactly --new tokens, and the concurrent tokens must equal the
// sequential ones request by request (greedy); otherwise it prints an error and exits 1.
// Prints per phase "serve_generate <model> <phase> threads <t> slots <s> streams <n> prompt <p>
// new <k> wall_s <w> tokens_per_s <x> ttft_ms_median <y> ttft_ms_max <z>" (time to first token:
// from sending the request to its first event, client side), then
// "serve_generate <model> threads <t> speedup <concurrent tokens/s over sequential>".
#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench/generation_models.h"
#include "cli/cli.h"
#include "core/flow.h"
#include "models/decoder_export.h"
#include "serving/server.h"

namespace {

namespace fs = std::filesystem;
namespace models = flow::models;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string model = "gpt_train";
  int64_t slots = 8, streams = 8, prompt = 32, new_tokens = 64, prefill_length = 16;
  int threads = flow::get_num_threads();
};

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The model repository in a fresh temporary directory, removed with the object (also on an error).
class TemporaryDirectory {
 public:
  TemporaryDirectory() : path_(fs::temp_directory_path() / ("flow_serve_generate_bench_" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TemporaryDirectory() {
    std::error_code ignored;  // a leftover directory is harmless; never throw from a destructor
    fs::remove_all(path_, ignored);
  }
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// One generate_stream answer: the tokens of its events, its finish_reason, seconds from sending
// to the first event; error is empty when the request succeeded.
struct StreamResult {
  std::vector<int64_t> tokens;
  std::string finish_reason, error;
  double ttft_s = 0;
};

StreamResult generate_stream(int port, const std::vector<int64_t>& prompt, int64_t new_tokens) {
  StreamResult result;
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(600);
  httplib::Request request;
  request.method = "POST";
  request.path = "/v2/models/lm/generate_stream";
  request.set_header("Content-Type", "application/json");
  request.body = json{{"input_ids", prompt}, {"max_tokens", new_tokens}, {"stop_token_ids", json::array()}}.dump();
  // Events are parsed as they arrive, so the first one's time is when the client could use it.
  std::string pending;
  bool first = true;
  const auto start = Clock::now();
  request.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    pending.append(data, size);
    for (size_t end; (end = pending.find("\n\n")) != std::string::npos; pending.erase(0, end + 2)) {
      if (pending.rfind("data: ", 0) != 0) continue;
      if (first) result.ttft_s = seconds_since(start);
      first = false;
      const json event = json::parse(pending.substr(6, end - 6));
      for (const json& id : event.value("output_ids", json::array())) result.tokens.push_back(id.get<int64_t>());
      if (event.contains("finish_reason")) result.finish_reason = event["finish_reason"].get<std::string>();
    }
    return true;
  };
  httplib::Response response;
  httplib::Error error = httplib::Error::Success;
  try {
    if (!client.send(request, response, error)) {
      result.error = httplib::to_string(error);
    } else if (response.status != 200) {
      result.error = "HTTP " + std::to_string(response.status) + ": " + pending;
    }
  } catch (const json::exception& e) {
    result.error = std::string("bad event: ") + e.what();
  }
  return result;
}

struct Phase {
  double wall_s = 0;
  std::vector<StreamResult> results;
};

Phase run_sequential(int port, const std::vector<std::vector<int64_t>>& prompts, int64_t new_tokens) {
  Phase phase;
  const auto start = Clock::now();
  for (const auto& prompt : prompts) phase.results.push_back(generate_stream(port, prompt, new_tokens));
  phase.wall_s = seconds_since(start);
  return phase;
}

Phase run_concurrent(int port, const std::vector<std::vector<int64_t>>& prompts, int64_t new_tokens) {
  Phase phase;
  phase.results.resize(prompts.size());
  const auto start = Clock::now();
  {
    std::vector<std::jthread> clients;
    for (size_t i = 0; i < prompts.size(); ++i) {
      clients.emplace_back([&, i] { phase.results[i] = generate_stream(port, prompts[i], new_tokens); });
    }
  }
  phase.wall_s = seconds_since(start);
  return phase;
}

// Prints the first failed request of the phase (an error, or not exactly new_tokens tokens ending
// at the length limit); true when there is none.
bool check(const char* name, const Phase& phase, int64_t new_tokens) {
  for (size_t i = 0; i < phase.results.size(); ++i) {
    const StreamResult& r = phase.results[i];
    if (!r.error.empty() || static_cast<int64_t>(r.tokens.size()) != new_tokens || r.finish_reason != "length") {
      std::fprintf(stderr, "error: %s request %zu: %zu tokens, finish_reason \"%s\" (want %lld, \"length\") %s\n", name, i, r.tokens.size(),
                   r.finish_reason.c_str(), static_cast<long long>(new_tokens), r.error.c_str());
      return false;
    }
  }
  return true;
}

// tokens_per_s of the phase, after printing its line.
double report(const Options& o, const char* name, const Phase& phase) {
  std::vector<double> ttft_ms;
  size_t tokens = 0;
  for (const StreamResult& r : phase.results) {
    ttft_ms.push_back(r.ttft_s * 1e3);
    tokens += r.tokens.size();
  }
  const double rate = static_cast<double>(tokens) / phase.wall_s;
  std::printf("serve_generate %s %s threads %d slots %lld streams %lld prompt %lld new %lld wall_s %.3f tokens_per_s %.1f ttft_ms_median %.1f "
              "ttft_ms_max %.1f\n",
              o.model.c_str(), name, o.threads, static_cast<long long>(o.slots), static_cast<long long>(o.streams),
              static_cast<long long>(o.prompt), static_cast<long long>(o.new_tokens), phase.wall_s, rate, median(ttft_ms),
              *std::max_element(ttft_ms.begin(), ttft_ms.end()));
  return rate;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("Serving throughput of a random GPT-2 over REST generate_stream: continuous batching vs sequential");
  app.add_option("--model", o.model, "gpt_train or gpt2 (GPT-2 small)")->check(CLI::IsMember({"gpt_train", "gpt2"}))->capture_default_str();
  app.add_option("--slots", o.slots, "max_batch_size: sequences the server decodes together")->check(flow::cli::at_least<int64_t>(1))->capture_default_str();
  app.add_option("--streams", o.streams, "requests per phase (the concurrent phase's client threads)")
      ->check(flow::cli::at_least<int64_t>(1))
      ->capture_default_str();
  app.add_option("--prompt", o.prompt, "prompt tokens per request")->check(flow::cli::at_least<int64_t>(1))->capture_default_str();
  app.add_option("--new", o.new_tokens, "tokens generated per request")->check(flow::cli::at_least<int64_t>(1))->capture_default_str();
  app.add_option("--prefill-length", o.prefill_length, "tokens of one prefill step of the export")
      ->check(flow::cli::at_least<int64_t>(1))
      ->capture_default_str();
  app.add_option("--threads", o.threads, "kernel threads (flow::set_num_threads)")->check(flow::cli::at_least(1))->capture_default_str();
  if (const auto status = flow::cli::parse(app, argc, argv)) return *status;
  try {
    flow::set_num_threads(o.threads);
    const auto config = bench::generation_model_config(o.model);
    if (o.prompt + o.new_tokens > config.n_positions_) {
      flow::fail("serve_generate_bench", "--prompt + --new exceed the model's ", config.n_positions_, " positions");
    }
    flow::manual_seed(0);
    auto model = std::make_shared<models::GPT2LMHeadModel>(config);
    model->eval();
    // One random prompt per request (the same in both phases), from the seeded generator.
    const std::vector<int64_t> flat = flow::randint(0, config.vocab_size_, {o.streams, o.prompt}).tolist<int64_t>();
    std::vector<std::vector<int64_t>> prompts;
    for (int64_t i = 0; i < o.streams; ++i) prompts.emplace_back(flat.begin() + i * o.prompt, flat.begin() + (i + 1) * o.prompt);

    const TemporaryDirectory repository;
    // The default export has no tokenizer ("none") and no eos tokens.
    models::export_decoder(model, (repository.path() / "lm" / "1").string(), models::DecoderExportOptions().prefill_length(o.prefill_length));
    std::ofstream(repository.path() / "lm" / "config.pbtxt") << "max_batch_size: " << o.slots << "\n";
    flow::serving::ServerOptions options;
    options.model_repository = repository.path().string();
    options.address = "127.0.0.1";
    options.grpc_port = 0;
    options.http_port = 0;
    options.metrics_port = 0;
    const flow::serving::Server server(options);
    const int port = server.http_port();

    if (const StreamResult warm_up = generate_stream(port, prompts[0], o.new_tokens); !warm_up.error.empty()) {
      flow::fail("serve_generate_bench", "warm-up request: ", warm_up.error);
    }
    const Phase sequential = run_sequential(port, prompts, o.new_tokens);
    const Phase concurrent = run_concurrent(port, prompts, o.new_tokens);
    if (!check("sequential", sequential, o.new_tokens) || !check("concurrent", concurrent, o.new_tokens)) return 1;
    for (size_t i = 0; i < prompts.size(); ++i) {
      if (concurrent.results[i].tokens != sequential.results[i].tokens) {
        std::fprintf(stderr, "error: request %zu: the concurrent tokens differ from the sequential ones\n", i);
        return 1;
      }
    }
    const double sequential_rate = report(o, "sequential", sequential);
    const double concurrent_rate = report(o, "concurrent", concurrent);
    std::printf("serve_generate %s threads %d speedup %.2f\n", o.model.c_str(), o.threads, concurrent_rate / sequential_rate);
  } catch (const flow::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
