#pragma once
// A background producer of batches: one thread calls produce(0), produce(1), ... in order and keeps
// at most `capacity` finished batches in a queue; the consumer takes them in the same order. While
// decoding is faster than the model, the queue stays full and the model never waits on I/O; a full
// queue blocks the producer, bounding memory. A producer exception is delivered to the consumer at
// the position where it happened, so a corrupt file fails the run instead of being skipped.

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

namespace ttmoe::data {

/// In-order, bounded, single-thread background producer of `count` values of type B.
template <class B>
class BackgroundLoader {
 public:
  /// Makes the value with index i (called on the loader thread, i = 0, 1, ..., count - 1).
  using Producer = std::function<B(std::size_t)>;

  /// Starts producing immediately. `capacity` >= 1 ready values are buffered.
  BackgroundLoader(std::size_t count, Producer produce, std::size_t capacity = 4)
      : count_(count), capacity_(capacity ? capacity : 1), produce_(std::move(produce)) {
    thread_ = std::thread([this] { loop(); });
  }
  BackgroundLoader(const BackgroundLoader&) = delete;
  BackgroundLoader& operator=(const BackgroundLoader&) = delete;
  /// Stops the producer (after the value it is making) and joins it.
  ~BackgroundLoader() {
    {
      std::lock_guard lk(m_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  /// The next value in order, or nullopt after the last. Rethrows a producer exception.
  std::optional<B> next() {
    std::unique_lock lk(m_);
    if (delivered_ == count_) return std::nullopt;
    if (ready_.empty() && !error_) ++waits_;  // the consumer had to wait: loading is the bottleneck
    cv_.wait(lk, [&] { return !ready_.empty() || error_; });
    if (ready_.empty() && error_) std::rethrow_exception(error_);
    B b = std::move(ready_.front());
    ready_.pop_front();
    ++delivered_;
    lk.unlock();
    cv_.notify_all();
    return b;
  }

  /// How many next() calls found the queue empty (0 = the consumer never waited).
  std::size_t waits() const {
    std::lock_guard lk(m_);
    return waits_;
  }
  /// Total number of values.
  std::size_t size() const { return count_; }

 private:
  void loop() {
    for (std::size_t i = 0; i < count_; ++i) {
      {
        std::unique_lock lk(m_);
        cv_.wait(lk, [&] { return stop_ || ready_.size() < capacity_; });
        if (stop_) return;
      }
      try {
        B b = produce_(i);
        std::lock_guard lk(m_);
        ready_.push_back(std::move(b));
      } catch (...) {
        std::lock_guard lk(m_);
        error_ = std::current_exception();
        cv_.notify_all();
        return;
      }
      cv_.notify_all();
    }
  }

  const std::size_t count_, capacity_;
  Producer produce_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<B> ready_;
  std::size_t delivered_ = 0, waits_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: starts after every other member exists
};

}  // namespace ttmoe::data
