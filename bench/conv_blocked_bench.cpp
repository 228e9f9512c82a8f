// flow's direct convolution (core/kernels/cpu/conv_blocked.h) against oneDNN's on the shapes of the
// exported CNN and ResNet-style nets at batch 64 (and the CNN's 32 -> 64 layer at batches 8 and
// 1): both read the same nChw8c source and write nChw8c, oneDNN with its weights reordered once
// into its own layout, as oneflow_lite runs them. Rounds alternate the two (median of --reps
// calls each), and each row gives the best median of each and flow / oneDNN as the median over the
// rounds (min-max), with the largest difference of their outputs.
//   flow_conv_blocked_bench [--rounds 8] [--reps 200] [--threads 1]
#include <dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "cli/cli.h"
#include "core/kernels/cpu/conv_blocked.h"
#include "core/thread_pool.h"

namespace {

struct Case {
  int64_t batch, in, out, size, kernel, stride, pad;
};

template <typename Fn>
double median_us(Fn&& fn, int reps) {
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"flow's direct convolution vs oneDNN's on nChw8c"};
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
    const flow::cpu::BlockedConvShape shape{c.batch, c.in, c.size, c.size, c.out, out_size, out_size, c.kernel, c.kernel, c.stride, c.stride, c.pad, c.pad};
    if (!flow::cpu::BlockedConv::supports(shape)) {
      std::fprintf(stderr, "flow_conv_blocked_bench: this build has no direct convolution (AVX2)\n");
      return 1;
    }
    const flow::cpu::BlockedConv direct(shape, weight.data(), bias.data());
    std::vector<float> out(dst_desc.get_size() / sizeof(float));
    const auto run_direct = [&] { direct.run(src_data, out.data(), false, false); };
    run_onednn();
    run_direct();
    const float* reference = static_cast<const float*>(dst.get_data_handle());
    double max_diff = 0;
    for (size_t i = 0; i < out.size(); ++i) max_diff = std::max(max_diff, static_cast<double>(std::fabs(out[i] - reference[i])));
    double best_onednn = 1e30, best_direct = 1e30;
    std::vector<double> ratios;
    for (int r = 0; r < rounds; ++r) {
      const double a = median_us(run_onednn, reps), b = median_us(run_direct, reps);
      best_onednn = std::min(best_onednn, a);
      best_direct = std::min(best_direct, b);
      ratios.push_back(b / a);
    }
    std::sort(ratios.begin(), ratios.end());
    std::printf("| batch %lld, %lld -> %lld, %lldx%lld, %lldx%lld stride %lld pad %lld | %s | %.0f | %.0f | %.2f (%.2f-%.2f) | %.1g |\n",
                static_cast<long long>(c.batch), static_cast<long long>(c.in), static_cast<long long>(c.out), static_cast<long long>(c.size),
                static_cast<long long>(c.size), static_cast<long long>(c.kernel), static_cast<long long>(c.kernel),
                static_cast<long long>(c.stride), static_cast<long long>(c.pad), pd.impl_info_str(), best_onednn, best_direct,
                ratios[ratios.size() / 2], ratios.front(), ratios.back(), max_diff);
    std::fflush(stdout);
  }
  return 0;
}
