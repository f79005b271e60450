// A map from string keys that holds at most `capacity` entries: storing a
// new key in a full map forgets the entry used least recently (found or
// stored). What the selector keeps per shape is held in one, so that a
// client sending ever-new shapes cannot grow the daemon without end.
#ifndef MATMUL_KERNELS_CUDA_SELECTOR_INTERNAL_LRU_MAP_H_
#define MATMUL_KERNELS_CUDA_SELECTOR_INTERNAL_LRU_MAP_H_

#include <algorithm>
#include <cstddef>
#include <list>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"

namespace matmul::cuda {

template <typename Value>
class LruMap {
 public:
  // At least one entry is held, whatever `capacity` says.
  explicit LruMap(size_t capacity) : capacity_(std::max<size_t>(1, capacity)) {}

  // The value under `key`, which becomes the most recently used; null when
  // absent. Valid until the next Put.
  Value* Find(const std::string& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return &it->second->second;
  }

  // Stores `value` under `key` (replacing what was there) as the most
  // recently used. Returns whether the least recently used entry was
  // forgotten to make room.
  bool Put(const std::string& key, Value value) {
    if (Value* held = Find(key)) {
      *held = std::move(value);
      return false;
    }
    bool forgot = false;
    if (index_.size() >= capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
      forgot = true;
    }
    order_.emplace_front(key, std::move(value));
    index_.emplace(key, order_.begin());
    return forgot;
  }

  size_t size() const { return index_.size(); }
  size_t capacity() const { return capacity_; }

  // Calls fn(key, value) for every entry, the most recently used first.
  template <typename Fn>
  void ForEach(Fn fn) const {
    for (const auto& [key, value] : order_) fn(key, value);
  }

 private:
  using Entry = std::pair<std::string, Value>;
  const size_t capacity_;
  // Most recently used first; list nodes stay put, so the index can point
  // at them.
  std::list<Entry> order_;
  absl::flat_hash_map<std::string, typename std::list<Entry>::iterator> index_;
};

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_SELECTOR_INTERNAL_LRU_MAP_H_
