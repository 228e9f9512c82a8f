// flow_loadgen: load against one model of a KServe v2 gRPC server, with the server-side
// queue/compute breakdown read from its Prometheus metrics.
//   flow_loadgen --model M [--url localhost:8001] [--metrics-url localhost:8002]
//                [--concurrency N | --rate R] [--requests N | --seconds S] [--batch N] [--input NAME=v1,...]
// Inputs follow the model's metadata (-1 becomes --batch); those without --input are filled with
// 0, 1, 2, ... (modulo 100). `flow_loadgen --help` lists the options.
//   flow_loadgen --empty-rpcs N [--url ...]: the floor instead, N blocking ServerLive round trips
//                (an empty request and answer) with their latency percentiles.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "serving/cli_options.h"
#include "serving/loadgen.h"
#include "serving/metrics_text.h"

namespace fs = flow::serving;

namespace {

constexpr double kSecondsPerYear = 365.0 * 24 * 3600;

struct Args {
  fs::cli::ModelArgs model;
  std::string metrics_url;  // host:port; empty: no server-side breakdown
  int64_t empty_rpcs = 0;
  double seconds = 10;
  fs::LoadOptions load;
};

// Fills args from the command line; returns the status to exit with when the tool should not go on.
std::optional<int> parse_args(int argc, char** argv, Args& args) {
  CLI::App app("Load against one model of a KServe v2 gRPC server; with --metrics-url also the server-side\n"
               "queue and compute time per request. Inputs follow the model's metadata (-1 becomes --batch).",
               "flow_loadgen");
  fs::cli::add_url_option(app, args.model);
  app.add_option("--metrics-url", args.metrics_url, "the server's Prometheus endpoint, for the server-side breakdown")
      ->type_name("HOST:PORT")
      ->check(flow::cli::host_port());
  fs::cli::add_model_options(app, args.model, false);
  fs::cli::add_input_options(app, args.model);
  CLI::Option* concurrency = app.add_option("--concurrency", args.load.concurrency, "requests kept outstanding (closed loop)")
                                 ->check(flow::cli::at_least(1))
                                 ->capture_default_str();
  app.add_option("--rate", args.load.rate, "requests started per second whatever the latency (open loop)")
      ->check(flow::cli::positive())
      ->excludes(concurrency);
  CLI::Option* requests = app.add_option("--requests", args.load.requests, "stop after N requests")->check(flow::cli::at_least<int64_t>(1));
  app.add_option("--seconds", args.seconds, "stop after S seconds")
      ->check(flow::cli::positive(kSecondsPerYear))
      ->excludes(requests)
      ->capture_default_str();
  CLI::Option* empty = app.add_option("--empty-rpcs", args.empty_rpcs,
                                      "instead of load: N blocking ServerLive round trips (an empty request and answer)\n"
                                      "and their latency percentiles, the floor under any call")
                           ->check(flow::cli::at_least<int64_t>(1));
  app.callback([&] {
    if (empty->count() == 0 && args.model.model.empty()) throw CLI::RequiredError("--model");
  });
  if (const auto status = flow::cli::parse(app, argc, argv)) return status;
  args.load.duration = std::chrono::milliseconds(static_cast<int64_t>(args.seconds * 1000));
  return std::nullopt;
}

struct ServerTotals {
  double success = 0, queue_us = 0, compute_us = 0, request_us = 0, executions = 0;
};

ServerTotals server_totals(const Args& args) {
  const size_t colon = args.metrics_url.rfind(':');
  const std::string text = fs::fetch_metrics(args.metrics_url.substr(0, colon), std::stoi(args.metrics_url.substr(colon + 1)));
  std::map<std::string, std::string> labels{{"model", args.model.model}};
  if (!args.model.version.empty()) labels["version"] = args.model.version;
  return {fs::metric_value(text, "nv_inference_request_success", labels),
          fs::metric_value(text, "nv_inference_queue_duration_us", labels),
          fs::metric_value(text, "nv_inference_compute_infer_duration_us", labels),
          fs::metric_value(text, "nv_inference_request_duration_us", labels),
          fs::metric_value(text, "nv_inference_exec_count", labels)};
}

// The round trip of an empty request: what any call costs before the server does anything.
void empty_round_trips(fs::Client& client, int64_t count) {
  std::vector<double> micros;
  for (int64_t i = 0; i < count; ++i) {
    const auto start = std::chrono::steady_clock::now();
    client.server_live();
    micros.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(micros.begin(), micros.end());
  auto at = [&](double q) { return micros[static_cast<size_t>(q * static_cast<double>(micros.size() - 1))]; };
  std::cout << "empty round trip (ServerLive) over " << count << " calls (us): p50 " << at(0.5) << ", p90 " << at(0.9) << ", p99 "
            << at(0.99) << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (const auto status = parse_args(argc, argv, args)) return *status;
  try {
    fs::Client client(args.model.url, fs::cli::client_options(args.model));
    if (args.empty_rpcs > 0) {
      empty_round_trips(client, args.empty_rpcs);
      return 0;
    }
    const inference::ModelMetadataResponse metadata = client.model_metadata(args.model.model, args.model.version);
    const std::vector<fs::WireTensor> inputs =
        fs::cli::metadata_inputs(metadata, args.model, [](size_t i) { return static_cast<double>(i % 100); });
    const inference::ModelInferRequest request = fs::make_infer_request(args.model.model, inputs, {}, args.model.version);

    ServerTotals before;
    if (!args.metrics_url.empty()) before = server_totals(args);
    const fs::LoadReport report = fs::run_load(client, args.load, [&](int64_t) { return request; });
    if (args.load.rate > 0) {
      std::cout << "fixed rate " << args.load.rate << "/s";
    } else {
      std::cout << "concurrency " << args.load.concurrency;
    }
    std::cout << ", batch " << args.model.batch << "\n" << fs::format_report(report);
    if (!args.metrics_url.empty()) {
      const ServerTotals after = server_totals(args);
      const double requests = after.success - before.success;
      if (requests > 0) {
        std::cout << "server per request (us): queue " << (after.queue_us - before.queue_us) / requests << ", compute "
                  << (after.compute_us - before.compute_us) / requests << ", total "
                  << (after.request_us - before.request_us) / requests << "; "
                  << requests / std::max(1.0, after.executions - before.executions) << " requests per model run\n";
      }
    }
    return report.failed == 0 ? 0 : 1;
  } catch (const std::exception& error) {
    std::cerr << "flow_loadgen: " << error.what() << "\n";
    return 1;
  }
}
