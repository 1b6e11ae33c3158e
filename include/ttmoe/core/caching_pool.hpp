#pragma once
// A caching allocator, shared by the CPU device (large buffers) and the CUDA devices. Blocks are
// rounded up to a size class (powers of two up to 64 MiB, then multiples of 2 MiB); a freed block
// goes to its class's free list and the next request of that class reuses it, so a training /
// adaptation loop that allocates the same tensors every step reaches a steady state with no raw
// allocation per step: no cudaMalloc on a GPU, no page faults (the kernel zeroing fresh pages) on the
// CPU. `Raw` supplies the underlying allocation: `static void* raw_alloc(std::size_t)` (nullptr on
// failure) and `static void raw_free(void*, std::size_t)`.
//
// Unused cached bytes are capped (`set_cache_limit`); a block freed beyond the cap goes back to Raw.
// Reuse is safe on a GPU because all ttmoe work runs on one stream: a block freed on the host while a
// kernel still reads it is only handed to work queued later on the same stream.
// Host-only code (no Eigen, no fmt): fine in a CUDA translation unit.

#include <algorithm>
#include <cstddef>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace ttmoe::memory {

/// Pool statistics.
struct PoolStats {
  std::size_t raw_allocations = 0;  // calls to the underlying allocator so far
  std::size_t reserved_bytes = 0;   // bytes held (in use + cached)
  std::size_t in_use_bytes = 0;     // bytes handed out and not yet returned
  std::size_t peak_in_use_bytes = 0;  // most bytes in use at once (since the start or reset_peak())
  std::size_t cached_bytes() const { return reserved_bytes - in_use_bytes; }  // held for reuse
};

/// A size-class caching pool over the raw allocator `Raw`.
template <class Raw>
class CachingPool {
 public:
  /// Size class for a request of `bytes` (at least 256 bytes).
  static std::size_t size_class(std::size_t bytes) {
    constexpr std::size_t kMin = 256, kPow2Limit = std::size_t(64) << 20, kLarge = std::size_t(2) << 20;
    if (bytes <= kMin) return kMin;
    if (bytes <= kPow2Limit) {
      std::size_t c = kMin;
      while (c < bytes) c <<= 1;
      return c;
    }
    return (bytes + kLarge - 1) / kLarge * kLarge;
  }

  void* allocate(std::size_t bytes) {
    const std::size_t c = size_class(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    auto& fl = free_[c];
    void* p = nullptr;
    if (!fl.empty()) {
      p = fl.back();
      fl.pop_back();
    } else {
      p = Raw::raw_alloc(c);
      if (!p) {  // out of memory: return cached blocks and retry once
        release_cached_locked();
        p = Raw::raw_alloc(c);
        if (!p) throw std::bad_alloc();
      }
      ++stats_.raw_allocations;
      stats_.reserved_bytes += c;
    }
    live_[p] = c;
    stats_.in_use_bytes += c;
    if (stats_.in_use_bytes > stats_.peak_in_use_bytes) stats_.peak_in_use_bytes = stats_.in_use_bytes;
    return p;
  }

  void deallocate(void* p) noexcept {
    if (!p) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(p);
    if (it == live_.end()) return;  // not ours (never happens in correct use)
    const std::size_t c = it->second;
    live_.erase(it);
    stats_.in_use_bytes -= c;
    if (stats_.cached_bytes() > cache_limit_) {  // (c already counts as cached here)
      Raw::raw_free(p, c);
      stats_.reserved_bytes -= c;
      return;
    }
    try {
      free_[c].push_back(p);
    } catch (...) {
      Raw::raw_free(p, c);
      stats_.reserved_bytes -= c;
    }
  }

  /// Caps the bytes kept for reuse (not in use); blocks freed beyond it go back to the raw allocator.
  /// Lowering the cap releases the whole cache first.
  void set_cache_limit(std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    if (bytes < cache_limit_) release_cached_locked();
    cache_limit_ = bytes;
  }
  std::size_t cache_limit() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cache_limit_;
  }

  /// Restarts the peak-in-use count from the bytes in use now (to measure one phase's peak).
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_in_use_bytes = stats_.in_use_bytes;
  }

  /// Frees every cached (unused) block.
  void release_cached() {
    std::lock_guard<std::mutex> lock(mu_);
    release_cached_locked();
  }

  /// The cached (unused) blocks now, sorted: what release_cached_except(...) later keeps.
  std::vector<void*> cached_blocks() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<void*> blocks;
    for (const auto& [c, list] : free_) blocks.insert(blocks.end(), list.begin(), list.end());
    std::sort(blocks.begin(), blocks.end());
    return blocks;
  }

  /// Frees the cached blocks that are not in `kept` (a sorted cached_blocks() taken earlier): what a
  /// phase added to the cache goes back to Raw, the blocks cached before it stay for reuse.
  void release_cached_except(const std::vector<void*>& kept) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [c, list] : free_) {
      const auto first_new = std::partition(list.begin(), list.end(), [&](void* p) {
        return std::binary_search(kept.begin(), kept.end(), p);
      });
      for (auto it = first_new; it != list.end(); ++it) {
        Raw::raw_free(*it, c);
        stats_.reserved_bytes -= c;
      }
      list.erase(first_new, list.end());
    }
  }

  /// Current statistics.
  PoolStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  void release_cached_locked() {
    for (auto& [c, list] : free_) {
      for (void* p : list) {
        Raw::raw_free(p, c);
        stats_.reserved_bytes -= c;
      }
      list.clear();
    }
  }

  mutable std::mutex mu_;
  std::unordered_map<std::size_t, std::vector<void*>> free_;
  std::unordered_map<void*, std::size_t> live_;
  PoolStats stats_;
  std::size_t cache_limit_ = static_cast<std::size_t>(-1);
};

/// Scope guard for a phase whose buffers are transient (e.g. a loader's scratch): on leaving the
/// scope, even by an exception, frees the blocks that entered `pool`'s cache since it was made and
/// keeps those cached before, which other code freed and expects to reuse without a raw allocation.
template <class Raw>
class ReleaseCachedAfterScope {
 public:
  explicit ReleaseCachedAfterScope(CachingPool<Raw>& pool) : pool_(pool), kept_(pool.cached_blocks()) {}
  ~ReleaseCachedAfterScope() { pool_.release_cached_except(kept_); }
  ReleaseCachedAfterScope(const ReleaseCachedAfterScope&) = delete;
  ReleaseCachedAfterScope& operator=(const ReleaseCachedAfterScope&) = delete;

 private:
  CachingPool<Raw>& pool_;
  std::vector<void*> kept_;
};

/// The process-wide pool of `Raw` (deliberately leaked: tensors with static storage may release
/// memory during static destruction).
template <class Raw>
CachingPool<Raw>& pool() {
  static auto* p = new CachingPool<Raw>();
  return *p;
}

}  // namespace ttmoe::memory
