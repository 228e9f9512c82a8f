// flow_client: health, metadata and inference against a KServe v2 gRPC server.
//   flow_client [--url localhost:8001] live | ready [--model M [--version V]] | health [--service S]
//   flow_client [--url ...] metadata [--model M [--version V]]
//   flow_client [--url ...] infer --model M [--version V] [--batch N] [--input NAME=v1,v2,...]...
//                                 [--output NAME]...
// infer reads the input shapes and datatypes from the model's metadata (-1 becomes --batch);
// an input without values is filled with 0, 1, 2, ... `flow_client --help` (or COMMAND --help)
// lists the options.
#include <iostream>
#include <string>
#include <vector>

#include "serving/cli_options.h"

namespace fs = flow::serving;

namespace {

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

int infer(fs::Client& client, const fs::cli::ModelArgs& args, const std::vector<std::string>& outputs) {
  const inference::ModelMetadataResponse metadata = client.model_metadata(args.model, args.version);
  const std::vector<fs::WireTensor> inputs =
      fs::cli::metadata_inputs(metadata, args, [](size_t i) { return static_cast<double>(i); });
  for (const fs::WireTensor& output : client.infer(args.model, inputs, outputs, args.version)) {
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
  CLI::App app("Health, metadata and inference against a KServe v2 gRPC server.", "flow_client");
  // Options of the tool itself (--url) may also follow the command.
  app.fallthrough();
  // Checked after parsing rather than with require_subcommand, so that a misspelt command is named.
  app.callback([&app] {
    if (app.get_subcommands().empty()) throw CLI::RequiredError("A command (live, ready, health, metadata or infer)");
  });
  fs::cli::ModelArgs args;
  std::string service;
  std::vector<std::string> outputs;
  fs::cli::add_url_option(app, args);
  CLI::App* live = app.add_subcommand("live", "is the server live (exit status 0 when it is)");
  CLI::App* ready = app.add_subcommand("ready", "is the server, or with --model that model, ready (exit status 0 when it is)");
  fs::cli::add_model_options(*ready, args, false);
  CLI::App* health = app.add_subcommand("health", "grpc.health.v1 status of the server or of a service");
  health->add_option("--service", service, "the service to check (default: the whole server)");
  CLI::App* metadata = app.add_subcommand("metadata", "the server's metadata, or with --model the model's inputs and outputs");
  fs::cli::add_model_options(*metadata, args, false);
  CLI::App* infer_command = app.add_subcommand("infer", "one inference; prints the outputs");
  fs::cli::add_model_options(*infer_command, args, true);
  fs::cli::add_input_options(*infer_command, args);
  infer_command->add_option("--output", outputs, "an output to ask for (repeatable; default: all)")->type_name("NAME");
  if (const auto status = flow::cli::parse(app, argc, argv)) return *status;

  try {
    fs::Client client(args.url, fs::cli::client_options(args));
    if (live->parsed()) {
      const bool is_live = client.server_live();
      std::cout << "live: " << (is_live ? "true" : "false") << "\n";
      return is_live ? 0 : 1;
    }
    if (ready->parsed()) {
      const bool is_ready = args.model.empty() ? client.server_ready() : client.model_ready(args.model, args.version);
      std::cout << "ready: " << (is_ready ? "true" : "false") << "\n";
      return is_ready ? 0 : 1;
    }
    if (health->parsed()) {
      std::cout << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(client.health(service)) << "\n";
      return 0;
    }
    if (metadata->parsed()) {
      if (args.model.empty()) {
        const auto server = client.server_metadata();
        std::cout << "server " << server.name() << " " << server.version() << "\n";
      } else {
        print_metadata(client.model_metadata(args.model, args.version));
      }
      return 0;
    }
    return infer(client, args, outputs);
  } catch (const std::exception& error) {
    std::cerr << "flow_client: " << error.what() << "\n";
    return 1;
  }
}
