#pragma once
// A caching allocator, shared by the CPU device (large buffers) and the CUDA devices. Blocks are
// rounded up to a size class (powers of two up to 64 MiB, then multiples of 2 MiB); a freed block
// goes to its class's free list and a later request reuses it, so a training / adaptation loop that
// allocates the same tensors every step reaches a steady state with no raw allocation per step: no
// cudaMalloc on a GPU, no page faults (the kernel zeroing fresh pages) on the CPU. `Raw` supplies the
// underlying allocation: `static void* raw_alloc(std::size_t)` (nullptr on failure) and
// `static void raw_free(void*, std::size_t)`.
//
// Reuse across classes: a request whose class has no cached block takes the smallest cached block of
// a larger class up to `reuse_limit(class)` (the next class, or 1/8 more where classes are 2 MiB
// apart) before asking Raw. Why: a MoE layer's expert batches change size with the routing every
// step, so their buffers wander between neighbouring classes; serving them only from their own class
// mapped (and faulted in, zeroed) fresh blocks every step while larger ones sat cached.
//
// Unused cached bytes are capped; a block freed beyond the cap goes back to Raw. Two kinds of cap:
//   - fixed (`set_cache_limit(bytes)`, the explicit override; unbounded by default);
//   - following the working set (`follow_working_set(floor)`, the CPU device's default): the cap is
//     floor + (high-water lent bytes - lent bytes now), i.e. the pool keeps everything a step freed
//     plus `floor` of slack, and its footprint never exceeds its own past peak + floor: the bound a
//     fixed cap of `floor` had at that peak. A training step whose activations exceed the floor is
//     then reused whole by the next one, with no knob. The slack matters: a step whose buffers change
//     class from one step to the next (routing, drop-path) needs blocks beyond the peak's own, and a
//     cap of exactly the peak (tried first) unmapped and re-mapped ~22 blocks every GMoE-S/16 step at
//     32 images. `release_cached()` (empty_cache) restarts the high-water mark from the bytes lent,
//     so a phase with a smaller working set stops holding the previous phase's.
//     (Lent counts a block serving a smaller class at its own size; stats().in_use_bytes counts the
//     classes asked for, so that what a tensor holds reads the same whichever block served it.)
// Reuse is safe on a GPU because all ttmoe work runs on one stream: a block freed on the host while a
// kernel still reads it is only handed to work queued later on the same stream.
// Host-only code (no Eigen, no fmt): fine in a CUDA translation unit.

#include <algorithm>
#include <cstddef>
#include <map>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace ttmoe::memory {

/// Pool statistics. reserved = in use + cached + the slack of blocks lent to a smaller class.
struct PoolStats {
  std::size_t raw_allocations = 0;  // calls to the underlying allocator so far
  std::size_t reserved_bytes = 0;   // bytes held from the raw allocator
  std::size_t in_use_bytes = 0;     // bytes handed out and not yet returned, at the requests' classes
  std::size_t peak_in_use_bytes = 0;  // most bytes in use at once (since the start or reset_peak())
  std::size_t cached_block_bytes = 0;  // bytes of the blocks in the free lists
  std::size_t cached_bytes() const { return cached_block_bytes; }  // held for reuse
  /// Bytes of the blocks handed out (in use + the slack of larger blocks serving smaller classes).
  std::size_t lent_bytes() const { return reserved_bytes - cached_block_bytes; }
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

  /// The largest class a request of class `c` may be served from when its own class has no cached
  /// block: the next class (powers of two: at most half the block unused) or c + c/8 where classes
  /// are 2 MiB apart (at most 1/9 of the block unused).
  static std::size_t reuse_limit(std::size_t c) {
    const std::size_t next = size_class(c + 1);
    return std::max(next, c + c / 8);
  }

  /// A block of at least `bytes` (its class, or a larger cached one: see reuse_limit).
  void* allocate(std::size_t bytes) {
    const std::size_t c = size_class(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    std::size_t block = c;
    void* p = take_cached_locked(c, block);
    const bool raw = p == nullptr;
    if (raw) {
      p = Raw::raw_alloc(c);
      if (!p) {  // out of memory: return cached blocks and retry once
        release_cached_locked();
        p = Raw::raw_alloc(c);
        if (!p) throw std::bad_alloc();
      }
      ++stats_.raw_allocations;
      stats_.reserved_bytes += c;
    }
    live_[p] = Lent{block, c};
    stats_.in_use_bytes += c;
    if (stats_.in_use_bytes > stats_.peak_in_use_bytes) stats_.peak_in_use_bytes = stats_.in_use_bytes;
    if (stats_.lent_bytes() > high_water_) high_water_ = stats_.lent_bytes();
    // A raw allocation lowers the working-set cap (more lent) without shrinking the cache: cached
    // blocks of classes the step did not ask for go back, so the footprint stays within the cap.
    if (raw) trim_cache_locked();
    return p;
  }

  /// Returns a block from allocate() to the cache, or to Raw beyond the cap.
  void deallocate(void* p) noexcept {
    if (!p) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(p);
    if (it == live_.end()) return;  // not ours (never happens in correct use)
    const Lent lent = it->second;
    live_.erase(it);
    stats_.in_use_bytes -= lent.asked;
    stats_.cached_block_bytes += lent.block;  // counted as cached while the cap is checked
    if (stats_.cached_block_bytes > cache_limit_locked()) {
      stats_.cached_block_bytes -= lent.block;
      free_raw_locked(p, lent.block);
      return;
    }
    try {
      free_[lent.block].push_back(p);
    } catch (...) {
      stats_.cached_block_bytes -= lent.block;
      free_raw_locked(p, lent.block);
    }
  }

  /// Fixed cap on the bytes kept for reuse (not in use), the explicit override: blocks freed beyond
  /// it go back to the raw allocator, and the cap no longer follows the working set. Lowering the
  /// cap releases the whole cache first.
  void set_cache_limit(std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    if (bytes < cache_limit_locked()) release_cached_locked();
    floor_ = bytes;
    follow_working_set_ = false;
  }
  /// Cap = floor + (high-water lent bytes - lent bytes now): the cache keeps what the working set
  /// freed and `floor` more (see the file comment; lent = in use + the slack of blocks serving a
  /// smaller class). Lowering the cap releases the whole cache first.
  void follow_working_set(std::size_t floor) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::size_t old = cache_limit_locked();
    floor_ = floor;
    follow_working_set_ = true;
    if (cache_limit_locked() < old) release_cached_locked();
  }
  /// Whether the cap follows the working set (follow_working_set) rather than a fixed set_cache_limit.
  bool follows_working_set() const {
    std::lock_guard<std::mutex> lock(mu_);
    return follow_working_set_;
  }
  /// The cap in force now (the fixed cap, or the working-set cap at the current in-use bytes).
  std::size_t cache_limit() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cache_limit_locked();
  }
  /// The high-water mark of lent bytes the working-set cap follows (since the start or the last
  /// release_cached; unlike stats().peak_in_use_bytes not restarted by reset_peak).
  std::size_t working_set_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return high_water_;
  }

  /// Restarts the peak-in-use count from the bytes in use now (to measure one phase's peak).
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_in_use_bytes = stats_.in_use_bytes;
  }

  /// Frees every cached (unused) block and restarts the working-set high-water mark from the bytes in
  /// use now.
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
        free_raw_locked(*it, c);
        stats_.cached_block_bytes -= c;
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
  std::size_t cache_limit_locked() const {
    if (!follow_working_set_) return floor_;
    return floor_ + (high_water_ - stats_.lent_bytes());
  }

  /// Pops a cached block of class c, else of the smallest larger class up to reuse_limit(c); sets
  /// `block` to the block's class. nullptr when there is none.
  void* take_cached_locked(std::size_t c, std::size_t& block) {
    const std::size_t limit = reuse_limit(c);
    for (auto it = free_.lower_bound(c); it != free_.end() && it->first <= limit; ++it) {
      if (it->second.empty()) continue;
      void* p = it->second.back();
      it->second.pop_back();
      stats_.cached_block_bytes -= it->first;
      block = it->first;
      return p;
    }
    return nullptr;
  }

  /// Frees cached blocks, smallest classes first (a larger block can still serve a smaller request),
  /// until the cached bytes are within the cap.
  void trim_cache_locked() {
    const std::size_t cap = cache_limit_locked();
    for (auto it = free_.begin(); it != free_.end() && stats_.cached_bytes() > cap; ++it) {
      auto& list = it->second;
      while (!list.empty() && stats_.cached_bytes() > cap) {
        stats_.cached_block_bytes -= it->first;
        free_raw_locked(list.back(), it->first);
        list.pop_back();
      }
    }
  }

  void free_raw_locked(void* p, std::size_t block) {
    Raw::raw_free(p, block);
    stats_.reserved_bytes -= block;
  }

  void release_cached_locked() {
    for (auto& [c, list] : free_) {
      for (void* p : list) free_raw_locked(p, c);
      list.clear();
    }
    stats_.cached_block_bytes = 0;
    high_water_ = stats_.lent_bytes();
  }

  mutable std::mutex mu_;
  std::map<std::size_t, std::vector<void*>> free_;  // by class, ordered: take_cached_locked looks upward
  /// A block handed out: its own class and the class it was asked for (smaller when lent upward).
  struct Lent {
    std::size_t block, asked;
  };
  std::unordered_map<void*, Lent> live_;
  PoolStats stats_;
  std::size_t floor_ = static_cast<std::size_t>(-1);  // the fixed cap, or the working-set cap's floor
  bool follow_working_set_ = false;
  std::size_t high_water_ = 0;  // most bytes lent at once since the start or the last release
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
