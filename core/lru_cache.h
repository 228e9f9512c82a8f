#pragma once
// A thread-safe cache of at most `capacity` values, evicting the least recently used: what flow
// compiles per shape (oneDNN primitives, oneflow_lite's per-batch programs, decoded fused
// programs) is kept in one, so that a process seeing ever new shapes keeps a bounded number of
// them instead of every one it ever made.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <future>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/error.h"

namespace flow {

template <typename Key, typename Value, typename Compare = std::less<Key>>
class LruCache {
 public:
  explicit LruCache(size_t capacity) : capacity_(checked(capacity)) {}
  LruCache(const LruCache&) = delete;
  LruCache& operator=(const LruCache&) = delete;

  // The value of `key`, made by make() (returning something convertible to shared_ptr<Value>,
  // null included) on a miss. make runs without the cache's lock, once per key while the key
  // stays cached: other callers of the same key wait for it, callers of other keys do not. An
  // exception from make reaches every caller waiting for it, and nothing is cached. Callers hold
  // the shared_ptr while they use the value, so an eviction by another thread never frees a value
  // in use.
  template <typename Make>
  std::shared_ptr<Value> get_or_make(const Key& key, Make make) {
    std::promise<std::shared_ptr<Value>> promise;
    uint64_t id = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      auto found = entries_.find(key);
      if (found != entries_.end()) {
        order_.splice(order_.begin(), order_, found->second.position);
        std::shared_future<std::shared_ptr<Value>> value = found->second.value;
        lock.unlock();
        return value.get();
      }
      id = ++last_id_;
      order_.push_front(key);
      entries_.emplace(key, Entry{promise.get_future().share(), order_.begin(), id});
      evict_over(capacity_.load(std::memory_order_relaxed));
    }
    try {
      std::shared_ptr<Value> made = make();
      promise.set_value(made);
      return made;
    } catch (...) {
      promise.set_exception(std::current_exception());
      std::lock_guard<std::mutex> lock(mutex_);
      auto entry = entries_.find(key);
      if (entry != entries_.end() && entry->second.id == id) {
        order_.erase(entry->second.position);
        entries_.erase(entry);
      }
      throw;
    }
  }

  // Entries cached, those still being made included.
  size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return entries_.size();
  }
  // Read without the lock: kernels compare it with their setting on every call.
  size_t capacity() const { return capacity_.load(std::memory_order_relaxed); }
  // Evicts the least recently used entries down to the new capacity.
  void set_capacity(size_t capacity) {
    std::lock_guard<std::mutex> lock(mutex_);
    capacity_.store(checked(capacity), std::memory_order_relaxed);
    evict_over(capacity);
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    evict_over(0);
  }

 private:
  struct Entry {
    std::shared_future<std::shared_ptr<Value>> value;
    typename std::list<Key>::iterator position;
    uint64_t id;  // tells a failed make its own entry from one made again after an eviction
  };

  static size_t checked(size_t capacity) {
    if (capacity == 0) fail("LruCache", "capacity must be at least 1");
    return capacity;
  }
  void evict_over(size_t capacity) {
    while (entries_.size() > capacity) {
      entries_.erase(order_.back());
      order_.pop_back();
    }
  }

  mutable std::mutex mutex_;
  std::atomic<size_t> capacity_;  // written under mutex_
  uint64_t last_id_ = 0;
  std::list<Key> order_;  // most recently used first
  std::map<Key, Entry, Compare> entries_;
};

// A cache capacity from the environment variable `name` (a positive integer), else `fallback`.
// A malformed value is a user mistake: flow::Error naming the variable.
inline size_t cache_capacity_from_env(const char* name, size_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  if (*end != '\0' || value < 1) fail("cache", name, " must be a positive integer, got '", text, "'");
  return static_cast<size_t>(value);
}

}  // namespace flow
