// flow_client: health, metadata and inference against a KServe v2 gRPC server.
//   flow_client [--url localhost:8001] live | ready | health [--service S]
//   flow_client [--url ...] metadata [--model M [--version V]]
//   flow_client [--url ...] infer --model M [--version V] [--batch N] [--input NAME=v1,v2,...]...
//                                 [--output NAME]...
// infer reads the input shapes and datatypes from the model's metadata (-1 becomes --batch);
// an input without values is filled with 0, 1, 2, ...
#include <cstdlib>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "serving/client.h"

namespace fs = flow::serving;

namespace {

struct Args {
  std::string url = "localhost:8001";
  std::string command;
  std::string model, version, service;
  int64_t batch = 1;
  std::map<std::string, std::vector<double>> inputs;
  std::vector<std::string> outputs;
};

[[noreturn]] void usage_error(const std::string& message) {
  std::cerr << "flow_client: " << message
            << "\nusage: flow_client [--url HOST:PORT] live|ready|health|metadata|infer [--model M] [--version V]"
               " [--service S] [--batch N] [--input NAME=v1,v2,...] [--output NAME]\n";
  std::exit(2);
}

std::vector<double> parse_values(const std::string& text) {
  std::vector<double> values;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) values.push_back(std::stod(item));
  return values;
}

Args parse_args(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (!arg.starts_with("--")) {
      if (!args.command.empty()) usage_error("unexpected argument " + arg);
      args.command = arg;
      continue;
    }
    if (i + 1 >= argc) usage_error("missing value for " + arg);
    const std::string value = argv[++i];
    try {
      if (arg == "--url") args.url = value;
      else if (arg == "--model") args.model = value;
      else if (arg == "--version") args.version = value;
      else if (arg == "--service") args.service = value;
      else if (arg == "--batch") args.batch = std::stoll(value);
      else if (arg == "--output") args.outputs.push_back(value);
      else if (arg == "--input" && value.find('=') != std::string::npos)
        args.inputs[value.substr(0, value.find('='))] = parse_values(value.substr(value.find('=') + 1));
      else usage_error("unknown option " + arg + " " + value);
    } catch (const std::logic_error&) {
      usage_error("bad value '" + value + "' for " + arg);
    }
  }
  if (args.command.empty()) usage_error("no command");
  return args;
}

void print_metadata(const inference::ModelMetadataResponse& metadata) {
  std::cout << "model " << metadata.name() << " (platform " << metadata.platform() << "), versions:";
  for (const auto& version : metadata.versions()) std::cout << " " << version;
  std::cout << "\n";
  auto print = [](const char* kind, const auto& tensors) {
    for (const auto& tensor : tensors) {
      std::cout << "  " << kind << " " << tensor.name() << " " << tensor.datatype() << " [";
      for (int d = 0; d < tensor.shape_size(); ++d) std::cout << (d ? "," : "") << tensor.shape(d);
      std::cout << "]\n";
    }
  };
  print("input ", metadata.inputs());
  print("output", metadata.outputs());
}

int infer(fs::Client& client, const Args& args) {
  if (args.model.empty()) usage_error("infer needs --model");
  const inference::ModelMetadataResponse metadata = client.model_metadata(args.model, args.version);
  std::vector<fs::WireTensor> inputs;
  for (const auto& spec : metadata.inputs()) {
    int64_t count = 0;
    fs::WireTensor tensor = fs::input_for(spec, args.batch, count);
    std::vector<double> values(static_cast<size_t>(count));
    if (auto it = args.inputs.find(spec.name()); it != args.inputs.end()) {
      if (static_cast<int64_t>(it->second.size()) != count) {
        usage_error("input " + spec.name() + " needs " + std::to_string(count) + " values");
      }
      values = it->second;
    } else {
      for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i);
    }
    tensor.data = fs::encode_values(tensor.datatype, values);
    inputs.push_back(std::move(tensor));
  }
  for (const fs::WireTensor& output : client.infer(args.model, inputs, args.outputs, args.version)) {
    std::cout << output.name << " " << output.datatype << " [";
    for (size_t d = 0; d < output.shape.size(); ++d) std::cout << (d ? "," : "") << output.shape[d];
    std::cout << "]:";
    const std::vector<double> values = fs::decode_values(output.datatype, output.data);
    for (size_t i = 0; i < values.size() && i < 32; ++i) std::cout << " " << values[i];
    std::cout << (values.size() > 32 ? " ...\n" : "\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse_args(argc, argv);
  try {
    fs::Client client(args.url);
    if (args.command == "live") {
      const bool live = client.server_live();
      std::cout << "live: " << (live ? "true" : "false") << "\n";
      return live ? 0 : 1;
    } else if (args.command == "ready") {
      const bool ready = args.model.empty() ? client.server_ready() : client.model_ready(args.model, args.version);
      std::cout << "ready: " << (ready ? "true" : "false") << "\n";
      return ready ? 0 : 1;
    } else if (args.command == "health") {
      std::cout << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(client.health(args.service)) << "\n";
    } else if (args.command == "metadata") {
      if (args.model.empty()) {
        const auto metadata = client.server_metadata();
        std::cout << "server " << metadata.name() << " " << metadata.version() << "\n";
      } else {
        print_metadata(client.model_metadata(args.model, args.version));
      }
    } else if (args.command == "infer") {
      return infer(client, args);
    } else {
      usage_error("unknown command " + args.command);
    }
  } catch (const std::exception& error) {
    std::cerr << "flow_client: " << error.what() << "\n";
    return 1;
  }
  return 0;
}
