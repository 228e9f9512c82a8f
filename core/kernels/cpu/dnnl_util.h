#pragma once
// Plumbing shared by the oneDNN kernels (conv, matmul, pooling, batch norm): one CPU engine, plain
// row-major memory descriptors, reorders between flow's plain buffers and the layouts a primitive
// picks, and a stream whose OpenMP pool matches flow's thread count.
#include <omp.h>

#include <cstdlib>
#include <dnnl.hpp>
#include <memory>
#include <new>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "core/dtype.h"
#include "core/kernels/cpu/kernel_caches.h"
#include "core/lru_cache.h"
#include "core/storage.h"
#include "core/thread_pool.h"

namespace flow::cpu::dnnl_util {

using dnnl::memory;
using Dims = memory::dims;

inline dnnl::engine& engine() {
  static dnnl::engine instance(dnnl::engine::kind::cpu, 0);
  return instance;
}

// Dense row-major layout of up to 5 dims (x, nc, ncw, nchw / oihw, goihw).
inline memory::desc plain(const Dims& dims, memory::data_type type = memory::data_type::f32) {
  using tag = memory::format_tag;
  static const tag tags[] = {tag::a, tag::ab, tag::abc, tag::abcd, tag::abcde};
  return memory::desc(dims, type, tags[dims.size() - 1]);
}
inline memory::desc any(const Dims& dims, memory::data_type type = memory::data_type::f32) {
  return memory::desc(dims, type, memory::format_tag::any);
}

// oneDNN's type of the dtypes flow runs on it (float32, bfloat16), or nullopt.
inline std::optional<memory::data_type> data_type_of(DType dtype) {
  if (dtype == kFloat32) return memory::data_type::f32;
  if (dtype == kBFloat16) return memory::data_type::bf16;
  return std::nullopt;
}

// Whether oneDNN runs its kernels for `wanted_isa` (and those below it) here.
inline bool has_cpu_isa(dnnl::cpu_isa wanted_isa) {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa()), wanted = static_cast<unsigned>(wanted_isa);
  return (isa & wanted) == wanted;
}
// Whether oneDNN runs its AVX-512 kernels here (brgemm products, 16-channel blocked convolutions).
inline bool has_avx512_core() {
  static const bool avx512 = has_cpu_isa(dnnl::cpu_isa::avx512_core);
  return avx512;
}
// Whether the CPU also converts float32 to bfloat16 itself (AVX512-BF16: Cooper Lake, Zen 4 and on).
inline bool has_avx512_bf16() {
  static const bool bf16 = has_cpu_isa(dnnl::cpu_isa::avx512_core_bf16);
  return bf16;
}

// Compiles a function for the AVX-512 subset has_avx512_core() stands for (F, BW, VL, DQ), leaving
// the rest of the file on the baseline ISA: for kernels run only where has_avx512_core() holds.
#define FLOW_AVX512_CORE_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
// The same with AVX512-BF16, for kernels run only where has_avx512_bf16() holds.
#define FLOW_AVX512_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

// oneDNN's reference implementations ("ref:any") are plain loops, slower than widening to float32
// for flow's float32 kernels: 16-bit floats take oneDNN only where it has optimized kernels.
inline bool is_reference_implementation(const char* impl_info) { return std::string_view(impl_info).starts_with("ref"); }

// A oneDNN memory in the layout `wanted`, filled from (or later written back to) a plain buffer.
// The reordered copy lives in a block of flow's CPU allocator (`buffer`), which keeps large blocks
// for reuse: oneDNN's own allocation was freed after every call, and the next call paid a page
// fault per 4 KiB of fresh memory (in a VM whose page faults are costly, oneflow_lite's bfloat16
// resnet18 at batch 8, whose convolutions run here, took 144 ms a run on 1 thread against 116).
// `buffer` is null when the user's layout is the wanted one and `inner` is `user` itself.
struct Bound {
  memory user, inner;
  std::shared_ptr<Storage> buffer;
};
inline Bound bind_memory(const memory::desc& user_desc, void* data, const memory::desc& wanted, dnnl::stream& stream, bool read) {
  memory user(user_desc, engine(), data);
  if (wanted == user_desc) return {user, user, nullptr};
  auto buffer = std::make_shared<Storage>(wanted.get_size(), Device(DeviceType::kCPU));
  memory inner(wanted, engine(), buffer->data());
  if (read) dnnl::reorder(user, inner).execute(stream, user, inner);
  return {user, inner, std::move(buffer)};
}
inline Bound bind_memory(const Dims& dims, void* data, const memory::desc& wanted, dnnl::stream& stream, bool read) {
  return bind_memory(plain(dims, wanted.data_type()), data, wanted, stream, read);
}
inline void write_back(Bound& bound, dnnl::stream& stream) {
  if (bound.buffer) dnnl::reorder(bound.inner, bound.user).execute(stream, bound.inner, bound.user);
}

// The primitives of `key` for the calling thread's thread count, made by make(key) on first use:
// creating a primitive JIT-compiles code, so each is made once while it stays cached. One cache per
// call site (the lambda's type), shared by all threads, holding the primitives of at most
// primitive_cache_capacity() shapes (kernel_caches.h); the caller holds the returned pointer while
// it runs them, so that another thread's eviction cannot free them. OpenMP is set to the calling
// thread's count first, so that a primitive made here uses it: oneDNN 2.6 fixes a primitive's
// threads when it is created (measured: a conv created at 1 thread runs on 1 when called at 2, and
// one created at 2 ignores a cap of 1).
template <typename Value, typename Key, typename Make>
std::shared_ptr<const Value> cached_primitives(const Key& key, Make make) {
  static LruCache<std::pair<Key, int>, const Value> cache(primitive_cache_capacity());
  const size_t capacity = primitive_cache_capacity();
  if (cache.capacity() != capacity) cache.set_capacity(capacity);
  sync_openmp_threads();
  return cache.get_or_make({key, current_num_threads()}, [&] {
    count_primitives_made();
    return std::make_shared<const Value>(make(key));
  });
}

// flow caches its primitives and runs each on whichever thread calls: Graph workers, concurrent lite
// runs. oneDNN's default scratchpad belongs to the thread that made a primitive and is shared by
// every primitive made there ("primitives cannot migrate between threads"), so two of them running
// at once elsewhere overwrite each other's temporaries: wrong results in lite's concurrent runs on
// a Xeon with AVX-512 (whose kernels use one), a crash for dilated convolutions' weight gradients
// on AVX2 (test ConvNorm.CachedPrimitivesRunAtOnceOnOtherThreads). Every cached primitive is made
// with a user scratchpad instead, and run_primitive hands it the calling thread's buffer.
inline dnnl::primitive_attr user_scratchpad(dnnl::primitive_attr attr = dnnl::primitive_attr()) {
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// The calling thread's scratchpad, at least `bytes` long and 64-byte aligned as oneDNN's own; runs
// are synchronous, so one buffer per thread serves them all.
inline void* thread_scratchpad(size_t bytes) {
  struct Buffer {
    std::unique_ptr<void, decltype(&std::free)> data{nullptr, &std::free};
    size_t size = 0;
  };
  thread_local Buffer buffer;
  if (bytes > buffer.size) {
    const size_t size = (bytes + 63) / 64 * 64;
    buffer.data.reset(std::aligned_alloc(64, size));
    if (!buffer.data) throw std::bad_alloc();
    buffer.size = size;
  }
  return buffer.data.get();
}

// The user scratchpad `primitive` needs (a zero desc when none).
inline memory::desc scratchpad_desc(const dnnl::primitive& primitive) {
  const dnnl_memory_desc_t* scratchpad = dnnl_primitive_desc_query_md(primitive.get_primitive_desc(), dnnl_query_scratchpad_md, 0);
  return scratchpad != nullptr ? memory::desc(*scratchpad) : memory::desc();
}

inline void run_primitive(const dnnl::primitive& primitive, dnnl::stream& stream, std::unordered_map<int, memory> args) {
  const memory::desc scratchpad = scratchpad_desc(primitive);
  if (scratchpad.get_size() > 0) args.emplace(DNNL_ARG_SCRATCHPAD, memory(scratchpad, engine(), thread_scratchpad(scratchpad.get_size())));
  primitive.execute(stream, args);
}

// oneDNN runs on the calling thread's OpenMP team: match it to flow's thread count there.
inline dnnl::stream stream_for_call() {
  sync_openmp_threads();
  return dnnl::stream(engine());
}

}  // namespace flow::cpu::dnnl_util
