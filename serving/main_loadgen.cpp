// flow_loadgen: load against one model of a KServe v2 gRPC server, with the server-side
// queue/compute breakdown read from its Prometheus metrics.
//   flow_loadgen --model M [--url localhost:8001] [--metrics-url localhost:8002]
//                [--concurrency N | --rate R] [--requests N | --seconds S] [--batch N]
// Inputs follow the model's metadata (-1 becomes --batch), filled with 0, 1, 2, ...
//   flow_loadgen --empty-rpcs N [--url ...]: the floor instead, N blocking ServerLive round trips
//                (an empty request and answer) with their latency percentiles.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "serving/loadgen.h"
#include "serving/metrics_text.h"

namespace fs = flow::serving;

namespace {

struct Args {
  std::string url = "localhost:8001";
  std::string metrics_url;  // host:port; empty: no server-side breakdown
  std::string model, version;
  int64_t batch = 1;
  int64_t empty_rpcs = 0;
  fs::LoadOptions load;
};

[[noreturn]] void usage_error(const std::string& message) {
  std::cerr << "flow_loadgen: " << message
            << "\nusage: flow_loadgen --model M [--version V] [--url HOST:PORT] [--metrics-url HOST:PORT]"
               " [--concurrency N | --rate R] [--requests N | --seconds S] [--batch N]\n       flow_loadgen --empty-rpcs N [--url HOST:PORT]\n";
  std::exit(2);
}

Args parse_args(int argc, char** argv) {
  Args args;
  args.load.duration = std::chrono::seconds(10);
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage_error("missing value for " + flag);
    const std::string value = argv[++i];
    try {
      if (flag == "--url") args.url = value;
      else if (flag == "--metrics-url") args.metrics_url = value;
      else if (flag == "--model") args.model = value;
      else if (flag == "--version") args.version = value;
      else if (flag == "--batch") args.batch = std::stoll(value);
      else if (flag == "--empty-rpcs") args.empty_rpcs = std::stoll(value);
      else if (flag == "--concurrency") args.load.concurrency = std::stoi(value);
      else if (flag == "--rate") args.load.rate = std::stod(value);
      else if (flag == "--requests") args.load.requests = std::stoll(value);
      else if (flag == "--seconds") args.load.duration = std::chrono::milliseconds(static_cast<int64_t>(std::stod(value) * 1000));
      else usage_error("unknown option " + flag);
    } catch (const std::logic_error&) {
      usage_error("bad value '" + value + "' for " + flag);
    }
  }
  if (args.model.empty() && args.empty_rpcs <= 0) usage_error("--model is required");
  return args;
}

struct ServerTotals {
  double success = 0, queue_us = 0, compute_us = 0, request_us = 0, executions = 0;
};

ServerTotals server_totals(const Args& args) {
  const size_t colon = args.metrics_url.rfind(':');
  const std::string text = fs::fetch_metrics(args.metrics_url.substr(0, colon), std::stoi(args.metrics_url.substr(colon + 1)));
  std::map<std::string, std::string> labels{{"model", args.model}};
  if (!args.version.empty()) labels["version"] = args.version;
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
  const Args args = parse_args(argc, argv);
  try {
    fs::Client client(args.url);
    if (args.empty_rpcs > 0) {
      empty_round_trips(client, args.empty_rpcs);
      return 0;
    }
    const inference::ModelMetadataResponse metadata = client.model_metadata(args.model, args.version);
    std::vector<fs::WireTensor> inputs;
    for (const auto& spec : metadata.inputs()) {
      int64_t count = 0;
      fs::WireTensor tensor = fs::input_for(spec, args.batch, count);
      std::vector<double> values(static_cast<size_t>(count));
      for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i % 100);
      tensor.data = fs::encode_values(tensor.datatype, values);
      inputs.push_back(std::move(tensor));
    }
    const inference::ModelInferRequest request = fs::make_infer_request(args.model, inputs, {}, args.version);

    ServerTotals before;
    if (!args.metrics_url.empty()) before = server_totals(args);
    const fs::LoadReport report = fs::run_load(client, args.load, [&](int64_t) { return request; });
    if (args.load.rate > 0) {
      std::cout << "fixed rate " << args.load.rate << "/s";
    } else {
      std::cout << "concurrency " << args.load.concurrency;
    }
    std::cout << ", batch " << args.batch << "\n" << fs::format_report(report);
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
