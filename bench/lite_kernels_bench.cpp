// oneflow_lite's own CPU kernels against what they replace, on the shapes of the exported nets.
// Convolutions: flow's direct convolution (core/kernels/cpu/conv_blocked.h) against oneDNN's, both
// reading the same nChw8c source and writing nChw8c, oneDNN on its weights reordered once into its
// own layout (the CNN's and ResNet-style net's layers at batch 64, the CNN's 32 -> 64 also at 8
// and 1). Linears: flow's product on packed weights (core/kernels/cpu/linear_packed.h) against
// OpenBLAS (x @ W^T onto the bias, as the linear op's kernel runs it) and oneDNN's matmul on its
// packed weights (lite's route before). Rounds alternate the sides (median of --reps calls each);
// a row gives each side's best median, flow's time over the other's as the median over the rounds
// (min-max), and the largest difference of the outputs.
//   flow_lite_kernels_bench [--rounds 8] [--reps 200] [--threads 1]
#include <cblas.h>
#include <dnnl.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "core/kernels/cpu/conv_blocked.h"
#include "core/kernels/cpu/linear_packed.h"
#include "core/thread_pool.h"

namespace {

struct Case {
  int64_t batch, in, out, size, kernel, stride, pad;
};

double median_us(const std::function<void()>& fn, int reps) {
  std::vector<double> times;
  for (int i = 0; i < std::max(1, reps / 20); ++i) fn();
  for (int i = 0; i < reps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    times.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(times.begin(), times.begin() + reps / 2, times.end());
  return times[static_cast<size_t>(reps / 2)];
}

// Each side's median time (us) in each round, the sides alternating within a round.
std::vector<std::vector<double>> alternate(const std::vector<std::function<void()>>& sides, int rounds, int reps) {
  std::vector<std::vector<double>> medians(sides.size());
  for (int r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < sides.size(); ++i) medians[i].push_back(median_us(sides[i], reps));
  }
  return medians;
}

// "best a | best b | b / a median (min-max)" over the rounds.
std::string compare(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> ratios;
  for (size_t r = 0; r < a.size(); ++r) ratios.push_back(b[r] / a[r]);
  std::sort(ratios.begin(), ratios.end());
  char text[128];
  std::snprintf(text, sizeof(text), "%.0f | %.0f | %.2f (%.2f-%.2f)", *std::min_element(a.begin(), a.end()), *std::min_element(b.begin(), b.end()),
                ratios[ratios.size() / 2], ratios.front(), ratios.back());
  return text;
}

double max_abs_diff(const float* a, const float* b, size_t count) {
  double diff = 0;
  for (size_t i = 0; i < count; ++i) diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
  return diff;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"oneflow_lite's convolution and linear kernels vs oneDNN's and OpenBLAS's"};
  int rounds = 8, reps = 200, threads = 1;
  app.add_option("--rounds", rounds, "alternating rounds")->check(CLI::PositiveNumber);
  app.add_option("--reps", reps, "timed calls per round and side")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "intra-op threads")->check(CLI::PositiveNumber);
  if (const auto status = flow::cli::parse(app, argc, argv)) return *status;
  flow::set_num_threads(threads);
  flow::sync_openmp_threads();

  using dnnl::memory;
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  const std::vector<Case> cases = {{64, 32, 64, 13, 3, 1, 0}, {64, 8, 8, 14, 3, 1, 1}, {64, 8, 16, 14, 3, 2, 1},
                                   {64, 16, 16, 7, 3, 1, 1},  {8, 32, 64, 13, 3, 1, 0}, {1, 32, 64, 13, 3, 1, 0}};
  std::printf("| convolution | oneDNN | oneDNN us (best) | flow us (best) | flow / oneDNN (min-max) | max abs diff |\n");
  std::printf("| --- | --- | --- | --- | --- | --- |\n");
  for (const Case& c : cases) {
    const int64_t out_size = (c.size + 2 * c.pad - c.kernel) / c.stride + 1;
    const memory::dims src_dims{c.batch, c.in, c.size, c.size}, weight_dims{c.out, c.in, c.kernel, c.kernel},
        dst_dims{c.batch, c.out, out_size, out_size};
    const memory::desc src_desc(src_dims, memory::data_type::f32, memory::format_tag::nChw8c),
        dst_desc(dst_dims, memory::data_type::f32, memory::format_tag::nChw8c), bias_desc({c.out}, memory::data_type::f32, memory::format_tag::a);
    const dnnl::convolution_forward::primitive_desc pd(
        {dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src_desc,
         memory::desc(weight_dims, memory::data_type::f32, memory::format_tag::any), bias_desc, dst_desc, {c.stride, c.stride}, {c.pad, c.pad},
         {c.pad, c.pad}},
        engine);
    std::vector<float> weight(static_cast<size_t>(c.out * c.in * c.kernel * c.kernel)), bias(static_cast<size_t>(c.out));
    for (float& v : weight) v = dist(gen);
    for (float& v : bias) v = dist(gen);
    memory src(src_desc, engine), dst(dst_desc, engine), weights(pd.weights_desc(), engine), bias_memory(bias_desc, engine, bias.data());
    memory plain_weights({weight_dims, memory::data_type::f32, memory::format_tag::oihw}, engine, weight.data());
    dnnl::reorder(plain_weights, weights).execute(stream, plain_weights, weights);
    float* src_data = static_cast<float*>(src.get_data_handle());
    for (size_t i = 0; i < src_desc.get_size() / sizeof(float); ++i) src_data[i] = dist(gen);
    const dnnl::convolution_forward onednn(pd);
    const auto run_onednn = [&] {
      onednn.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_BIAS, bias_memory}, {DNNL_ARG_DST, dst}});
      stream.wait();
    };
    const flow::cpu::BlockedConvShape shape{c.batch,  c.in,     c.size,   c.size,   c.out, out_size, out_size,
                                            c.kernel, c.kernel, c.stride, c.stride, c.pad, c.pad};
    if (!flow::cpu::BlockedConv::supports(shape)) {
      std::fprintf(stderr, "flow_lite_kernels_bench: this build has no direct convolution (AVX2)\n");
      return 1;
    }
    const flow::cpu::BlockedConv direct(shape, weight.data(), bias.data());
    std::vector<float> out(dst_desc.get_size() / sizeof(float));
    const auto run_direct = [&] { direct.run(src_data, out.data(), false, false); };
    run_onednn();
    run_direct();
    const double diff = max_abs_diff(out.data(), static_cast<const float*>(dst.get_data_handle()), out.size());
    const auto medians = alternate({run_onednn, run_direct}, rounds, reps);
    std::printf("| batch %lld, %lld -> %lld, %lldx%lld, %lldx%lld stride %lld pad %lld | %s | %s | %.1g |\n", static_cast<long long>(c.batch),
                static_cast<long long>(c.in), static_cast<long long>(c.out), static_cast<long long>(c.size), static_cast<long long>(c.size),
                static_cast<long long>(c.kernel), static_cast<long long>(c.kernel), static_cast<long long>(c.stride), static_cast<long long>(c.pad),
                pd.impl_info_str(), compare(medians[0], medians[1]).c_str(), diff);
    std::fflush(stdout);
  }

  // x (rows, in) @ W^T + bias: the quickstart MLP's layers and the CNN's two linears.
  const std::vector<std::array<int64_t, 3>> linears = {{2, 784, 512}, {8, 784, 512}, {8, 512, 512}, {8, 512, 10}, {32, 784, 512},
                                                       {8, 1600, 128}, {32, 1600, 128}, {64, 784, 512}};
  std::printf("\n| linear (rows x in -> out) | OpenBLAS us (best) | flow us (best) | flow / OpenBLAS (min-max) | oneDNN packed us (best) | "
              "flow us (best) | flow / oneDNN (min-max) | max abs diff |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (const auto& [rows, in, out] : linears) {
    std::vector<float> x(static_cast<size_t>(rows * in)), weight(static_cast<size_t>(out * in)), bias(static_cast<size_t>(out));
    for (std::vector<float>* values : {&x, &weight, &bias}) {
      for (float& v : *values) v = dist(gen);
    }
    std::vector<float> y_blas(static_cast<size_t>(rows * out)), y_onednn(y_blas.size()), y_flow(y_blas.size());
    const auto run_blas = [&] {
      for (int64_t r = 0; r < rows; ++r) std::copy(bias.begin(), bias.end(), y_blas.begin() + r * out);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), static_cast<int>(out), static_cast<int>(in), 1.f, x.data(),
                  static_cast<int>(in), weight.data(), static_cast<int>(in), 1.f, y_blas.data(), static_cast<int>(out));
    };
    const memory::desc x_desc({rows, in}, memory::data_type::f32, memory::format_tag::ab),
        bias_desc({1, out}, memory::data_type::f32, memory::format_tag::ab), y_desc({rows, out}, memory::data_type::f32, memory::format_tag::ab);
    const dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(x_desc, memory::desc({in, out}, memory::data_type::f32, memory::format_tag::any), bias_desc, y_desc), engine);
    memory packed(pd.weights_desc(), engine), plain_weights({{in, out}, memory::data_type::f32, memory::format_tag::ba}, engine, weight.data());
    dnnl::reorder(plain_weights, packed).execute(stream, plain_weights, packed);
    memory x_memory(x_desc, engine, x.data()), bias_memory(bias_desc, engine, bias.data()), y_memory(y_desc, engine, y_onednn.data());
    const dnnl::matmul matmul(pd);
    const auto run_onednn = [&] {
      matmul.execute(stream, {{DNNL_ARG_SRC, x_memory}, {DNNL_ARG_WEIGHTS, packed}, {DNNL_ARG_BIAS, bias_memory}, {DNNL_ARG_DST, y_memory}});
      stream.wait();
    };
    if (!flow::cpu::PackedLinear::available()) {
      std::fprintf(stderr, "flow_lite_kernels_bench: this build has no packed linear (AVX2)\n");
      return 1;
    }
    const flow::cpu::PackedLinear linear(in, out, weight.data(), bias.data());
    const auto run_flow = [&] { linear.run(x.data(), rows, in, y_flow.data(), false); };
    run_blas();
    run_onednn();
    run_flow();
    const double diff =
        std::max(max_abs_diff(y_flow.data(), y_blas.data(), y_flow.size()), max_abs_diff(y_flow.data(), y_onednn.data(), y_flow.size()));
    const auto medians = alternate({run_blas, run_flow, run_onednn}, rounds, reps);
    std::printf("| %lld x %lld -> %lld | %s | %s | %.1g |\n", static_cast<long long>(rows), static_cast<long long>(in), static_cast<long long>(out),
                compare(medians[0], medians[1]).c_str(), compare(medians[2], medians[1]).c_str(), diff);
    std::fflush(stdout);
  }
  return 0;
}
