#pragma once
// Reference-counted contiguous storage on a device. Tensors share one Buffer through a shared_ptr,
// which is what makes views and lazy expressions safe: an expression holding a tensor keeps its
// buffer alive.

#include <memory>

#include "ttmoe/core/device.hpp"

namespace ttmoe {

/// An owning, uninitialised device allocation of `size` elements of T.
template <class T, class D>
class Buffer {
 public:
  explicit Buffer(index_t size) : data_(D::template allocate<T>(size)), size_(size) {}
  ~Buffer() { D::template deallocate<T>(data_, size_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  T* data() const noexcept { return data_; }
  index_t size() const noexcept { return size_; }

 private:
  T* data_;
  index_t size_;
};

/// Allocates a shared buffer of n elements.
template <class T, class D>
std::shared_ptr<Buffer<T, D>> make_buffer(index_t n) {
  return std::make_shared<Buffer<T, D>>(n);
}

}  // namespace ttmoe
