#pragma once
// A read-only row-major matrix of bfloat16 bits: the resident form of an inference-only weight
// (nn::Linear's BF16 weight, issue #14). Half the bytes of F32, and batch-1 decode is bound by
// how many weight bytes stream from memory per token, so decode runs up to twice as fast. The
// BF16 codec is io's (safetensors_float16.hpp). The bits are shared (copies alias) and `owner`
// keeps whatever holds them alive: a vector converted once at load, or later a memory-mapped
// checkpoint the bits point straight into.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "ttmoe/core/config.hpp"
#include "ttmoe/core/host_pages.hpp"
#include "ttmoe/io/safetensors_mmap.hpp"
#include "ttmoe/io/safetensors_float16.hpp"

namespace ttmoe::io {

/// What a product with a BF16-resident weight does with its F32 activations (issue #14). The
/// default is `exact`: the model then computes exactly what the F32 model on the same (BF16-valued)
/// weights computes, up to summation order, on every CPU, and decode (memory-bound) gains nothing
/// from rounding. `bf16_activations` is the speed option for prefill (what llama.cpp and torch's BF16
/// do): on AVX512-BF16 CPUs many-row products run `vdpbf16ps` at twice the F32 FMA's multiply-adds;
/// elsewhere the rounded activations go through the F32 kernels, so the results agree across CPUs
/// up to summation order (a product of two BF16 values is exact in F32).
enum class Bf16Arithmetic {
  exact,            ///< F32 activations times the BF16 weight's values, F32 sums
  bf16_activations  ///< activations rounded to BF16 (nearest even) first, F32 sums
};

/// rows x cols bfloat16 values, row-major, read-only; undefined while `bits` is null.
struct Bf16Matrix {
  std::shared_ptr<const void> owner;  ///< keeps the storage `bits` points into alive
  const std::uint16_t* bits = nullptr;
  index_t rows = 0, cols = 0;
  Bf16Arithmetic arithmetic = Bf16Arithmetic::exact;  ///< how linear_bf16 multiplies by this weight

  bool defined() const noexcept { return bits != nullptr; }
  /// Bytes the values occupy (what one pass over the matrix streams from memory).
  std::size_t bytes() const noexcept { return std::size_t(rows) * std::size_t(cols) * 2; }

  /// Rounds rows x cols floats (row-major) to a new, owned BF16 matrix.
  static Bf16Matrix from_floats(const float* values, index_t rows, index_t cols) {
    auto storage = std::make_shared<std::vector<std::uint16_t>>(std::size_t(rows) * std::size_t(cols));
    for (std::size_t i = 0; i < storage->size(); ++i) (*storage)[i] = float_to_bf16(values[i]);
    Bf16Matrix m;
    m.bits = storage->data();
    m.owner = std::move(storage);
    m.rows = rows;
    m.cols = cols;
    return m;
  }
  /// A matrix over BF16 bits that live elsewhere (e.g. a memory-mapped checkpoint): no copy;
  /// `owner` keeps that storage alive for as long as any copy of the matrix exists.
  static Bf16Matrix view(std::shared_ptr<const void> owner, const std::uint16_t* bits, index_t rows, index_t cols) {
    Bf16Matrix m;
    m.owner = std::move(owner);
    m.bits = bits;
    m.rows = rows;
    m.cols = cols;
    return m;
  }
  /// The values widened to floats, row-major (tests, merging a BF16 layer back to F32).
  std::vector<float> to_floats() const {
    std::vector<float> out(bytes() / 2);
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_float(bits[i]);
    return out;
  }
};

/// A copy of `m` (same values, shape and arithmetic) in its own anonymous mapping that asks for
/// transparent huge pages (memory::HostPages: MADV_HUGEPAGE from 2 MiB), for a weight a batch-1
/// GEMV streams every token; the mapping goes back to the OS when the last copy of the result goes.
/// With `release_source`, `m` must view a read-only file mapping (detail::MappedFile): its pages are
/// dropped from the resident set as they are copied, kCopyChunkBytes at a time (detail::
/// release_pages), so copying a whole checkpoint raises the peak resident set by one chunk, not by
/// a tensor. Why copy at all: docs/design.md, #14 decode (helper bw17).
inline Bf16Matrix copy_to_huge_pages(const Bf16Matrix& m, bool release_source = false) {
  constexpr std::size_t kCopyChunkBytes = std::size_t(32) << 20;
  const std::size_t n = m.bytes();
  if (n == 0) return m;
  void* p = memory::HostPages::raw_alloc(n);
  if (p == nullptr) throw std::bad_alloc();
  std::shared_ptr<const void> owner(p, [n](const void* q) { memory::HostPages::raw_free(const_cast<void*>(q), n); });
  const auto* src = reinterpret_cast<const std::byte*>(m.bits);
  for (std::size_t at = 0; at < n; at += kCopyChunkBytes) {
    const std::size_t len = std::min(kCopyChunkBytes, n - at);
    std::memcpy(static_cast<std::byte*>(p) + at, src + at, len);
    if (release_source) detail::release_pages({src + at, len});
  }
  Bf16Matrix out = Bf16Matrix::view(std::move(owner), static_cast<const std::uint16_t*>(p), m.rows, m.cols);
  out.arithmetic = m.arithmetic;
  return out;
}

}  // namespace ttmoe::io
