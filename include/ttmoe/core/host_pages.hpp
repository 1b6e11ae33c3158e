#pragma once
// Raw page allocations for the CPU device's caching pool: large buffers come straight from mmap so
// that a block the pool gives back (cache cap, empty_cache) really leaves the process, and blocks of
// 2 MiB and more ask for transparent huge pages (512x fewer page faults on first touch where the
// kernel allows it). Untouched pages of a rounded-up size class cost address space, not memory.

#include <cstddef>
#include <cstdlib>

#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#define TTMOE_HOST_PAGES_MMAP 1
#endif

// Under AddressSanitizer, pooled host blocks are poisoned while cached and beyond the requested size
// (see cpu::allocate), so the sanitizer build still catches overruns and use-after-free on them.
#if defined(__SANITIZE_ADDRESS__)
#define TTMOE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TTMOE_ASAN 1
#endif
#endif
#if defined(TTMOE_ASAN)
#include <sanitizer/asan_interface.h>
#define TTMOE_ASAN_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define TTMOE_ASAN_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define TTMOE_ASAN_POISON(p, n) ((void)(p), (void)(n))
#define TTMOE_ASAN_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace ttmoe::memory {

/// `Raw` for CachingPool over anonymous private mappings (aligned_alloc where mmap is unavailable).
struct HostPages {
  static void* raw_alloc(std::size_t bytes) {
#if TTMOE_HOST_PAGES_MMAP
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
#if defined(MADV_HUGEPAGE)
    if (bytes >= (std::size_t(2) << 20)) (void)::madvise(p, bytes, MADV_HUGEPAGE);
#endif
    return p;
#else
    return std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
#endif
  }
  static void raw_free(void* p, std::size_t bytes) {
    TTMOE_ASAN_UNPOISON(p, bytes);  // leave no stale poison behind for whoever maps these pages next
#if TTMOE_HOST_PAGES_MMAP
    (void)::munmap(p, bytes);
#else
    (void)bytes;
    std::free(p);
#endif
  }
};

}  // namespace ttmoe::memory
