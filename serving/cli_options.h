#pragma once
// The options flow_client and flow_loadgen share (--url, --model, --version, --batch, --input)
// and the request inputs they build from a model's metadata.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cli/cli.h"
#include "serving/client.h"
#include "serving/text_file.h"

namespace flow::serving::cli {

struct ModelArgs {
  std::string url = "localhost:8001";
  ClientOptions client;   // TLS files; the token is read from token_file
  std::string token_file;
  std::string model, version;
  int64_t batch = 1;
  std::vector<std::string> inputs;  // NAME=v1,v2,... as given
};

// "NAME=v1,v2,..." into its name and values; false when the text is not of that form.
inline bool parse_input(const std::string& text, std::pair<std::string, std::vector<double>>& input) {
  const size_t equals = text.find('=');
  if (equals == std::string::npos || equals == 0) return false;
  input.first = text.substr(0, equals);
  input.second.clear();
  for (const std::string& item : CLI::detail::split(text.substr(equals + 1), ',')) {
    double value = 0;
    if (!CLI::detail::lexical_cast(item, value)) return false;
    input.second.push_back(value);
  }
  return true;
}

// --url and the connection's security: --tls-ca (with --tls-cert/--tls-key for mutual TLS) and
// --token-file.
inline void add_url_option(CLI::App& app, ModelArgs& args) {
  app.add_option("--url", args.url, "the server's gRPC address")->type_name("HOST:PORT")->capture_default_str();
  app.add_option("--tls-ca", args.client.tls_ca_file, "speak TLS, trusting the server certificate this CA signed (PEM)")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-cert", args.client.tls_cert_file, "this client's certificate, for mutual TLS (PEM)")->check(CLI::ExistingFile);
  app.add_option("--tls-key", args.client.tls_key_file, "this client's private key, for mutual TLS (PEM)")->check(CLI::ExistingFile);
  app.add_option("--token-file", args.token_file, "send the bearer token on this file's first line")->check(CLI::ExistingFile);
}

// The client options the flags give, the token read from its file. Throws flow::Error when it
// cannot be read.
inline ClientOptions client_options(const ModelArgs& args) {
  ClientOptions options = args.client;
  if (!args.token_file.empty()) options.token = first_line_of("client", args.token_file, "bearer token");
  return options;
}

// --model (required or not) and --version.
inline void add_model_options(CLI::App& app, ModelArgs& args, bool model_required) {
  app.add_option("--model", args.model, "the model's name")->required(model_required);
  app.add_option("--version", args.version, "the model version (default: the server's choice)");
}

// --batch and --input: the request's inputs.
inline void add_input_options(CLI::App& app, ModelArgs& args) {
  app.add_option("--batch", args.batch, "replaces a -1 dimension of the model's input shapes")
      ->check(flow::cli::at_least<int64_t>(1))
      ->capture_default_str();
  app.add_option("--input", args.inputs, "an input's values (repeatable); without it 0, 1, 2, ...")
      ->type_name("NAME=v1,v2,...")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            std::pair<std::string, std::vector<double>> input;
            return parse_input(text, input) ? "" : "'" + text + "' is not NAME=v1,v2,... with numbers";
          },
          ""));
}

// One tensor per input of the model's metadata, shaped with args.batch: the values of its --input,
// else fill(i) for element i. Throws flow::Error for an --input the model lacks or of the wrong size.
inline std::vector<WireTensor> metadata_inputs(const inference::ModelMetadataResponse& metadata, const ModelArgs& args,
                                               const std::function<double(size_t)>& fill) {
  std::map<std::string, std::vector<double>> given;
  for (const std::string& text : args.inputs) {
    std::pair<std::string, std::vector<double>> input;
    parse_input(text, input);
    given.insert(std::move(input));
  }
  std::vector<WireTensor> inputs;
  for (const auto& spec : metadata.inputs()) {
    int64_t count = 0;
    WireTensor tensor = input_for(spec, args.batch, count);
    std::vector<double> values(static_cast<size_t>(count));
    if (auto it = given.find(spec.name()); it != given.end()) {
      if (static_cast<int64_t>(it->second.size()) != count) {
        fail("--input", "input ", spec.name(), " needs ", count, " values, got ", it->second.size());
      }
      values = std::move(it->second);
      given.erase(it);
    } else {
      for (size_t i = 0; i < values.size(); ++i) values[i] = fill(i);
    }
    tensor.data = encode_values(tensor.datatype, values);
    inputs.push_back(std::move(tensor));
  }
  if (!given.empty()) fail("--input", "model ", metadata.name(), " has no input named ", given.begin()->first);
  return inputs;
}

}  // namespace flow::serving::cli
