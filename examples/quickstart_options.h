#pragma once
// The command line both quickstarts share: --epochs, --data, --out, --device and --amp.
#include <string>

#include "cli/cli.h"
#include "data/vision.h"

struct QuickstartOptions {
  int epochs = 5;
  std::string data = flow::data::FashionMNIST::kDefaultRoot;
  std::string out;  // the checkpoint file; each quickstart sets its default
  std::string device = "cpu";  // where the model trains: cpu or cuda[:N]
  bool amp = false;  // bfloat16 mixed precision (flow::autocast; a Graph's config().enable_amp())
};

inline void add_quickstart_options(CLI::App& app, QuickstartOptions& options) {
  app.add_option("--epochs", options.epochs, "training epochs")->check(flow::cli::at_least(0))->capture_default_str();
  app.add_option("--data", options.data, "the FashionMNIST directory (IDX files, gzip or raw)")
      ->check(CLI::ExistingDirectory)
      ->capture_default_str();
  app.add_option("--out", options.out, "where to save the trained state (safetensors)")->capture_default_str();
  app.add_option("--device", options.device, "where the model trains: cpu, or cuda[:N] (needs a CUDA build and GPU)")
      ->capture_default_str();
  app.add_flag("--amp", options.amp, "mixed precision: matrix products in bfloat16, float32 master weights");
}
