#pragma once
// The one parallel runtime of the CPU backend: a fixed pool of worker threads plus the calling thread.
// Elementwise loops, reductions and GEMM all split their work here, so there is never more than one
// thread per core (no OpenMP + BLAS + Eigen oversubscription). Nested calls run serially.

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "ttmoe/core/config.hpp"

namespace ttmoe::cpu_backend {

/// A fixed-size pool running one job at a time over all its threads.
class ThreadPool {
 public:
  /// The process-wide pool. Size: $TTMOE_NUM_THREADS, else the number of hardware threads.
  static ThreadPool& instance() {
    static ThreadPool pool(default_threads());
    return pool;
  }

  explicit ThreadPool(std::size_t threads) { start(threads); }
  ~ThreadPool() { stop(); }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  /// Threads that share a job (workers + the caller).
  std::size_t num_threads() const noexcept { return workers_.size() + 1; }

  /// Resizes the pool (not from inside a parallel region).
  void set_num_threads(std::size_t n) {
    stop();
    start(std::max<std::size_t>(1, n));
  }

  /// Runs f(thread_index, num_threads) on every pool thread and waits. Exceptions are rethrown.
  void run_on_all(const std::function<void(std::size_t, std::size_t)>& f) { run(f, false); }

  /// Like run_on_all, for a job whose threads take all their work from shared counters, so that any
  /// set of threads that includes the caller completes it: a worker that has not started f by the
  /// time the caller's f returns is released from the job (it never calls f, and its index goes
  /// unused), and the caller waits only for workers already inside f. Why: on a shared machine a
  /// sleeping worker can take milliseconds to be scheduled, and a GEMM of a few hundred microseconds
  /// (a LoRA factor's product) would otherwise wait that long for it, at its barrier or at the end.
  void run_on_available(const std::function<void(std::size_t, std::size_t)>& f) { run(f, true); }

  /// Splits [0, n) into one contiguous range per thread (multiples of `grain` elements) and runs
  /// f(begin, end) on each; small n runs inline on the caller.
  template <class F>
  void parallel_for(index_t n, index_t grain, F&& f) {
    if (n == 0) return;
    grain = std::max<index_t>(grain, 1);
    const std::size_t nt = num_threads();
    if (nt == 1 || n <= grain || in_parallel()) {
      f(index_t{0}, n);
      return;
    }
    const index_t chunks = std::min<index_t>(nt, (n + grain - 1) / grain);
    index_t per = (n + chunks - 1) / chunks;
    per = (per + grain - 1) / grain * grain;
    run_on_all([&](std::size_t t, std::size_t) {
      const index_t b = std::min<index_t>(n, t * per), e = std::min<index_t>(n, b + per);
      if (b < e) f(b, e);
    });
  }

  /// Runs body(i) for every i in [0, n), each thread taking the next item from a shared counter
  /// rather than a fixed share: with items of a few tens of microseconds (attention heads), a vCPU
  /// that the host slows for a while then hands its items to the others instead of keeping them all
  /// waiting. `make_body()` runs once on each participating thread and returns that thread's body,
  /// which may own per-thread scratch. Small n, one thread or a nested call run inline. A worker that
  /// is not running when the caller has finished every item is not waited for (run_on_available).
  template <class MakeBody>
  void parallel_items(index_t n, MakeBody&& make_body) {
    if (n == 0) return;
    if (num_threads() == 1 || n == 1 || in_parallel()) {
      auto body = make_body();
      for (index_t i = 0; i < n; ++i) body(i);
      return;
    }
    std::atomic<index_t> next{0};
    run_on_available([&](std::size_t, std::size_t) {
      auto body = make_body();
      for (index_t i = next.fetch_add(1, std::memory_order_relaxed); i < n; i = next.fetch_add(1, std::memory_order_relaxed))
        body(i);
    });
  }

  /// True inside a pool job (nested parallel calls then run serially).
  static bool in_parallel() noexcept { return parallel_depth() > 0; }

 private:
  /// run_on_all (`optional` false: every worker runs f) or run_on_available (`optional`: workers
  /// claim one of the job's seats before calling f; the caller closes the seats when its f returns).
  void run(const std::function<void(std::size_t, std::size_t)>& f, bool optional) {
    const std::size_t nt = num_threads();
    if (nt == 1 || in_parallel()) {
      f(0, 1);
      return;
    }
    std::unique_lock lock(mutex_);
    job_ = &f;
    error_ = nullptr;
    pending_.store(nt - 1, std::memory_order_relaxed);
    ++generation_;
    optional_ = optional;
    seats_.store(seats_word(generation_, optional ? nt - 1 : 0), std::memory_order_relaxed);
    published_.store(generation_, std::memory_order_release);
    lock.unlock();
    wake_.notify_all();
    {
      ParallelScope scope;
      try {
        f(0, nt);
      } catch (...) {
        record_error();
      }
    }
    if (optional) {  // workers that have not claimed a seat by now never will: stop waiting for them
      const std::size_t unclaimed = seats_.exchange(seats_word(generation_, 0), std::memory_order_acq_rel) & kSeatMask;
      if (unclaimed) pending_.fetch_sub(unclaimed, std::memory_order_acq_rel);
    }
    // Spin briefly (the other core usually finishes within microseconds), then block.
    for (int i = 0; i < 20000 && pending_.load(std::memory_order_acquire) != 0; ++i) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    lock.lock();
    done_.wait(lock, [&] { return pending_.load(std::memory_order_acquire) == 0; });
    job_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

  /// The seats word: the job's generation above kSeatBits bits of seats still open.
  static constexpr int kSeatBits = 16;
  static constexpr std::size_t kSeatMask = (std::size_t(1) << kSeatBits) - 1;
  static std::size_t seats_word(std::size_t generation, std::size_t seats) { return (generation << kSeatBits) | seats; }
  /// Takes a seat of job `generation` (false when the caller has closed them or a newer job is out).
  bool claim_seat(std::size_t generation) {
    std::size_t w = seats_.load(std::memory_order_acquire);
    while ((w >> kSeatBits) == (generation & (~std::size_t(0) >> kSeatBits)) && (w & kSeatMask) != 0)
      if (seats_.compare_exchange_weak(w, w - 1, std::memory_order_acq_rel)) return true;
    return false;
  }

  struct ParallelScope {
    ParallelScope() { ++parallel_depth(); }
    ~ParallelScope() { --parallel_depth(); }
  };
  static int& parallel_depth() noexcept {
    thread_local int depth = 0;
    return depth;
  }
  static std::size_t default_threads() {
    if (const char* env = std::getenv("TTMOE_NUM_THREADS")) {
      const long v = std::strtol(env, nullptr, 10);
      if (v > 0) return static_cast<std::size_t>(v);
    }
    return std::max(1u, std::thread::hardware_concurrency());
  }
  void start(std::size_t threads) {
    quit_ = false;
    // Workers start from the current generation: a restarted pool (set_num_threads) must not mistake
    // the last finished job for a new one.
    const std::size_t gen = generation_;
    for (std::size_t i = 1; i < threads; ++i) workers_.emplace_back([this, i, gen] { worker(i, gen); });
  }
  void stop() {
    {
      std::lock_guard lock(mutex_);
      quit_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
  }
  void record_error() {
    std::lock_guard lock(error_mutex_);
    if (!error_) error_ = std::current_exception();
  }
  void worker(std::size_t index, std::size_t seen) {
    for (;;) {
      const std::function<void(std::size_t, std::size_t)>* job;
      std::size_t nt;
      bool optional;
      // Jobs come in quick succession (one per op of a forward or backward): poll for the next one
      // for a few tens of microseconds before sleeping, since waking a blocked thread costs about
      // as long again on a virtual machine and the job's caller would wait for it at the end.
      for (int i = 0; i < kWorkerSpins && published_.load(std::memory_order_acquire) == seen; ++i) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
      }
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return quit_ || generation_ != seen; });
        if (quit_) return;
        seen = generation_;
        job = job_;
        nt = workers_.size() + 1;
        optional = optional_;
      }
      // A released worker must not touch the job: its caller may have returned already.
      if (optional && !claim_seat(seen)) continue;
      {
        ParallelScope scope;
        try {
          (*job)(index, nt);
        } catch (...) {
          record_error();
        }
      }
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard lock(mutex_);
        done_.notify_one();
      }
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mutex_, error_mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(std::size_t, std::size_t)>* job_ = nullptr;
  std::exception_ptr error_;
  std::atomic<std::size_t> pending_{0};
  std::size_t generation_ = 0;
  std::atomic<std::size_t> published_{0};  // generation_, readable without the lock (workers' polling)
  std::atomic<std::size_t> seats_{0};      // run_on_available: seats_word(generation, seats still open)
  bool optional_ = false;                  // whether the current job is run_on_available's
  bool quit_ = false;
  static constexpr int kWorkerSpins = 2000;  // ~50-100 us of pause instructions
};

/// Convenience: ThreadPool::instance().parallel_for(n, grain, f).
template <class F>
void parallel_for(index_t n, index_t grain, F&& f) {
  ThreadPool::instance().parallel_for(n, grain, std::forward<F>(f));
}

/// Sets the number of threads ttmoe uses on the CPU.
inline void set_num_threads(std::size_t n) { ThreadPool::instance().set_num_threads(n); }
/// Number of threads ttmoe uses on the CPU.
inline std::size_t num_threads() { return ThreadPool::instance().num_threads(); }

/// Backend<cpu>'s task runner (backend/backend.hpp, TaskParallelBackend): independent tasks over the
/// pool, each thread taking the next index from a shared counter; inside a task every parallel loop
/// and GEMM runs serially on that task's thread (nested calls do).
struct TaskKernels {
  /// Tasks that run at once: the pool's threads.
  static index_t task_threads() { return index_t(num_threads()); }
  /// task(i) for every i in [0, n); returns when all have run (a task's exception is rethrown here).
  static void run_tasks(index_t n, const std::function<void(index_t)>& task) {
    ThreadPool::instance().parallel_items(n, [&] { return [&](index_t i) { task(i); }; });
  }
};

}  // namespace ttmoe::cpu_backend
