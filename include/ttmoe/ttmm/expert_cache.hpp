#pragma once
// An LRU cache of the store's hot experts, bounded in bytes. Experts are read from their
// adapter_model.safetensors through its mmap (ExpertStore::load_expert) on a miss; the least
// recently used ones are dropped once the loaded factors exceed the capacity. Handles stay valid
// after eviction (shared ownership), so an expert merged into a model may be evicted safely.

#include <cstddef>
#include <list>
#include <map>
#include <memory>
#include <utility>

#include "ttmoe/ttmm/expert_store.hpp"

namespace ttmoe::ttmm {

/// Least-recently-used cache of loaded experts (F32 factors) over an ExpertStore.
class ExpertCache {
 public:
  using Expert = models::PeftAdapter<float>;

  /// A cache over `store` (which must outlive it) holding at most `capacity_bytes` of factors; one
  /// expert larger than the capacity is still returned, just not kept.
  ExpertCache(const ExpertStore& store, std::size_t capacity_bytes) : store_(&store), capacity_(capacity_bytes) {}

  /// Expert i, loaded on a miss; marks it most recently used.
  std::shared_ptr<const Expert> get(index_t i) {
    if (auto it = entries_.find(i); it != entries_.end()) {
      ++hits_;
      order_.splice(order_.begin(), order_, it->second.position);
      return it->second.expert;
    }
    ++misses_;
    auto e = std::make_shared<const Expert>(store_->load_expert<float>(i));
    const std::size_t bytes = size_of(*e);
    if (bytes > capacity_) return e;
    while (bytes_ + bytes > capacity_ && !order_.empty()) evict_last();
    order_.push_front(i);
    entries_[i] = {e, bytes, order_.begin()};
    bytes_ += bytes;
    return e;
  }

  /// Bytes of factors held now.
  std::size_t bytes() const noexcept { return bytes_; }
  /// The capacity in bytes.
  std::size_t capacity() const noexcept { return capacity_; }
  /// Experts held now.
  std::size_t size() const noexcept { return entries_.size(); }
  /// Whether expert i is held.
  bool contains(index_t i) const { return entries_.count(i) != 0; }
  /// Lookups served from memory / read from the store so far.
  std::size_t hits() const noexcept { return hits_; }
  std::size_t misses() const noexcept { return misses_; }

  /// The bytes of an expert's factors.
  static std::size_t size_of(const Expert& e) {
    std::size_t n = 0;
    for (const auto& [name, m] : e.modules) n += std::size_t(m.lora_A.weight.numel() + m.lora_B.weight.numel());
    return n * sizeof(float);
  }

 private:
  struct Entry {
    std::shared_ptr<const Expert> expert;
    std::size_t bytes = 0;
    std::list<index_t>::iterator position;
  };
  void evict_last() {
    const index_t i = order_.back();
    order_.pop_back();
    bytes_ -= entries_.at(i).bytes;
    entries_.erase(i);
  }

  const ExpertStore* store_;
  std::size_t capacity_;
  std::size_t bytes_ = 0, hits_ = 0, misses_ = 0;
  std::list<index_t> order_;  // front = most recently used
  std::map<index_t, Entry> entries_;
};

}  // namespace ttmoe::ttmm
