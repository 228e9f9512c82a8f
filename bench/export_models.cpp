// Writes the deploy benchmarks' models, untrained (the weights do not change the cost), as a
// model repository for flow_serve: <repository>/mlp/1 and <repository>/cnn/1, input "image"
// (-1, 1, 28, 28) float32, output "logits", batch dimension dynamic.
// Usage: export_bench_models <repository>
#include <cstdio>
#include <filesystem>
#include <string>

#include "bench/bench_models.h"
#include "cli/cli.h"
#include "core/flow.h"
#include "graph/export.h"
#include "tests/common/graphs.h"

int main(int argc, char** argv) {
  CLI::App app("Writes the deploy benchmarks' models (untrained) as a model repository: <repository>/mlp/1 and\n"
               "<repository>/cnn/1.",
               "export_bench_models");
  std::string repository;
  app.add_option("repository", repository, "the model repository to write into")->required();
  if (const auto status = flow::cli::parse(app, argc, argv)) return *status;
  flow::manual_seed(0);
  using MakeModel = std::shared_ptr<flow::nn::Module> (*)();
  for (const auto& [name, make] : {std::pair<const char*, MakeModel>{"mlp", bench::mlp}, {"cnn", bench::cnn}}) {
    test_graphs::PredictGraph graph(make());
    graph(flow::rand({2, 1, 28, 28}));
    const std::filesystem::path dir = std::filesystem::path(repository) / name / "1";
    flow::save(graph, dir.string(), flow::ExportOptions().input_names({"image"}).output_names({"logits"}));
    std::printf("%s\n", dir.c_str());
  }
  return 0;
}
