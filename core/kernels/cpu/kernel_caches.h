#pragma once
// The capacities of the CPU kernels' caches (core/lru_cache.h): each oneDNN kernel's primitives
// by shape (dnnl_util.h, cached_primitives: one cache per kernel) and the fused kernels' decoded
// programs. Read once from the environment; tests change them through the setters. Without
// dnnl.hpp, so that callers outside flow_core need not find oneDNN's headers.
#include <cstddef>
#include <cstdint>

namespace flow::cpu {

// FLOW_PRIMITIVE_CACHE_CAPACITY, default 1024 (oneDNN's own primitive cache's default): the most
// shapes each oneDNN kernel keeps primitives for.
size_t primitive_cache_capacity();
// Applies at each cache's next lookup, evicting the least recently used primitives over it.
void set_primitive_cache_capacity(size_t capacity);
// How many primitive sets the oneDNN kernels' caches have made in this process.
int64_t primitives_made();
void count_primitives_made();

// FLOW_FUSED_PROGRAM_CACHE_CAPACITY, default 256: the most distinct fused_elementwise programs kept
// decoded (a model has a few dozen; the text holds no shape, so batch sizes add none).
size_t fused_program_cache_capacity();

}  // namespace flow::cpu
