#pragma once
// Tensor<T, Shape, Device>: a handle to reference-counted, contiguous, row-major storage plus a shape
// whose extents are each static or dynamic. Copies are shallow (like torch.Tensor); clone() copies
// data. Views (slice along the leading dimension, reshape) share storage and, under a tape, route
// gradients back to their base.

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "ttmoe/core/backend_decl.hpp"
#include "ttmoe/core/broadcast.hpp"
#include "ttmoe/core/grad_meta.hpp"
#include "ttmoe/core/recording.hpp"
#include "ttmoe/core/shape.hpp"
#include "ttmoe/core/storage.hpp"

namespace ttmoe {

/// Types that are lazy elementwise expressions (not tensors); materialised when assigned to a Tensor.
template <class E>
concept LazyExpression = requires { typename E::is_lazy_expression; };

template <class T, ShapeType S, class D = cpu>
class Tensor;

namespace op {
/// Tag naming reshape in static shape diagnostics.
struct reshape_tag {
  static constexpr const char* name = "reshape";
};
}  // namespace op

/// True for any Tensor<...>.
template <class X>
struct is_tensor : std::false_type {};
template <class T, class S, class D>
struct is_tensor<Tensor<T, S, D>> : std::true_type {};
template <class X>
concept TensorType = is_tensor<std::remove_cvref_t<X>>::value;

/// A dense tensor. `T` is the element type (float, double; the storage admits others), `S` the shape
/// type, `D` the device.
template <class T, ShapeType S, class D>
class Tensor {
 public:
  using value_type = T;
  using shape_type = S;
  using device_type = D;
  using Meta = autograd::GradMeta<T, D>;
  static constexpr std::size_t rank = S::rank;

  /// A null tensor (no storage); `defined()` is false.
  Tensor() = default;
  /// Allocates uninitialised storage for `shape`.
  explicit Tensor(const S& shape) : buf_(make_buffer<T, D>(shape.numel())), data_(buf_->data()), shape_(shape) {}
  /// A fully static shape needs no argument; allocates uninitialised storage.
  static Tensor empty(const S& shape = default_shape()) { return Tensor(shape); }
  /// All zeros.
  static Tensor zeros(const S& shape = default_shape()) {
    Tensor t(shape);
    D::template fill_zero<T>(t.data_, t.numel());
    return t;
  }
  /// All elements equal to `value`.
  static Tensor full(const S& shape, T value) {
    std::vector<T> host(shape.numel(), value);
    return from_host(shape, host);
  }
  /// Copies host values (row-major); their count must equal the shape's.
  static Tensor from_host(const S& shape, std::span<const T> values) {
    if (values.size() != shape.numel())
      throw ShapeError("Tensor::from_host: " + std::to_string(values.size()) + " values for shape " +
                       shape.to_string() + " (" + std::to_string(shape.numel()) + " elements)");
    Tensor t(shape);
    D::template copy_from_host<T>(t.data_, values.data(), values.size());
    return t;
  }
  /// Copies a list of host values: Tensor<float, Shape<2, 2>>::from_host({}, {1, 2, 3, 4}).
  static Tensor from_host(const S& shape, std::initializer_list<T> values) {
    return from_host(shape, std::span<const T>(values.begin(), values.size()));
  }

  /// Materialises a lazy expression: one fused loop (and one tape node when recording).
  template <LazyExpression E>
  Tensor(const E& expr) {  // NOLINT: implicit on purpose, `Tensor y = a * b + c;`
    *this = materialize<S>(expr);
  }

  /// Shape-converting copy of the handle where no run-time check is needed (static -> dynamic).
  template <ShapeType S2>
    requires(!std::is_same_v<S2, S> && StaticallyConvertible<S2, S>)
  Tensor(const Tensor<T, S2, D>& other)  // NOLINT: implicit widening, like std::span
      : buf_(other.buffer()), data_(other.data()), shape_(S::from_extents(other.extents())), meta_(other.meta()) {}

  /// Reinterprets as shape type S2 with the same extents, checking static extents at run time.
  template <ShapeType S2>
  Tensor<T, S2, D> as(const char* op = "Tensor::as") const {
    static_assert(S2::rank == rank, "ttmoe: Tensor::as<S2> keeps the rank; use reshape to change it");
    return Tensor<T, S2, D>::from_parts(buf_, data_, S2::from_extents(extents(), op), meta_);
  }

  // ---- inspection -------------------------------------------------------------------------
  bool defined() const noexcept { return static_cast<bool>(buf_); }
  const S& shape() const noexcept { return shape_; }
  std::array<index_t, rank> extents() const { return shape_.extents(); }
  index_t extent(std::size_t i) const { return shape_.extent(i); }
  index_t numel() const { return shape_.numel(); }
  /// Pointer to the first element (device memory for device tensors). Handles are shallow: a const
  /// Tensor still lets you write its elements, as with torch.Tensor.
  T* data() const noexcept { return data_; }
  const std::shared_ptr<Buffer<T, D>>& buffer() const noexcept { return buf_; }

  /// Element at a multi-index (host-accessible devices only; bounds checked).
  template <class... I>
    requires(sizeof...(I) == rank && (std::is_integral_v<I> && ...) && D::host_accessible)
  T& operator()(I... idx) const {
    const std::array<index_t, rank> ix{static_cast<index_t>(idx)...};
    const auto st = shape_.strides();
    index_t off = 0;
    for (std::size_t i = 0; i < rank; ++i) {
      if (ix[i] >= shape_.extent(i))
        throw ValueError("Tensor(): index " + extents_to_string(ix) + " out of range for shape " + shape_.to_string());
      off += ix[i] * st[i];
    }
    return data_[off];
  }
  /// The value of a one-element tensor, copied to the host.
  T item() const {
    if (numel() != 1) throw ShapeError("Tensor::item: shape " + shape_.to_string() + " has " + std::to_string(numel()) + " elements, not 1");
    T v;
    D::template copy_to_host<T>(&v, data_, 1);
    return v;
  }
  /// All elements copied to a host vector (row-major).
  std::vector<T> to_vector() const {
    std::vector<T> v(numel());
    D::template copy_to_host<T>(v.data(), data_, v.size());
    return v;
  }

  // ---- copies and views -------------------------------------------------------------------
  /// A deep copy (a differentiable identity under a tape).
  Tensor clone() const;
  /// Same storage, cut from the tape: no gradient flows through the result.
  Tensor detach() const { return from_parts(buf_, data_, shape_, nullptr); }
  /// Rows [begin, end) of the leading dimension, sharing storage (rank >= 1).
  auto slice(index_t begin, index_t end) const;
  /// Same storage viewed with another shape of equal element count.
  template <ShapeType S2>
  Tensor<T, S2, D> reshape(const S2& shape) const;

  // ---- autograd ---------------------------------------------------------------------------
  /// Marks a leaf as trainable (or frozen). Ops on it record onto an active tape.
  Tensor& set_requires_grad(bool on = true) {
    if (on && !meta_) meta_ = std::make_shared<Meta>(numel(), /*is_leaf=*/true);
    if (!on) meta_.reset();
    return *this;
  }
  /// True if ops on this tensor are recorded for differentiation.
  bool requires_grad() const noexcept { return static_cast<bool>(meta_); }
  /// The accumulated gradient (a null tensor if none reached this tensor).
  Tensor grad() const {
    if (!meta_ || !meta_->has_grad()) return Tensor();
    const auto& g = meta_->grad_buffer();
    return from_parts(g, g->data(), shape_, nullptr);
  }
  /// Clears the accumulated gradient.
  void zero_grad() const {
    if (meta_) meta_->reset_grad();
  }
  /// Keeps this intermediate's gradient after backward.
  void retain_grad() const {
    if (meta_) meta_->retain_grad();
  }
  /// A rank-1 view of all elements that SHARES this tensor's gradient metadata (for optimisers and
  /// other code that treats parameters of any shape alike).
  Tensor<T, Shape<dyn>, D> flat_view() const {
    return Tensor<T, Shape<dyn>, D>::from_parts(buf_, data_, Shape<dyn>(numel()), meta_);
  }
  /// Autograd metadata (null when no gradient is needed).
  const std::shared_ptr<Meta>& meta() const noexcept { return meta_; }

  /// Assembles a tensor from parts (for views and ops; not for everyday use).
  static Tensor from_parts(std::shared_ptr<Buffer<T, D>> buf, T* data, const S& shape, std::shared_ptr<Meta> meta) {
    Tensor t;
    t.buf_ = std::move(buf);
    t.data_ = data;
    t.shape_ = shape;
    t.meta_ = std::move(meta);
    return t;
  }
  /// Gives this (output) tensor fresh non-leaf metadata; returns it.
  std::shared_ptr<Meta> make_output_meta() {
    meta_ = std::make_shared<Meta>(numel(), /*is_leaf=*/false);
    return meta_;
  }

 private:
  static S default_shape() {
    if constexpr (S::fully_static) {
      return S{};
    } else {
      auto e = S::static_extents;
      for (auto& x : e)
        if (x == dyn) x = 0;
      return S::from_extents(e, "Tensor");
    }
  }
  std::shared_ptr<Buffer<T, D>> buf_;
  T* data_ = nullptr;
  S shape_ = default_shape();
  std::shared_ptr<Meta> meta_;
};

/// True if any of the tensors needs a gradient and a tape is recording.
template <class... Ts>
bool should_record(const Ts&... ts) {
  return autograd::is_recording() && (ts.requires_grad() || ...);
}

// ---- view and copy definitions ------------------------------------------------------------------
/// Adds the output gradient g (n values, held by `out`) into input `in`'s gradient: by taking over
/// out's buffer when it is the first gradient to reach `in` and `out` does not retain it (no copy;
/// the output drops its own reference right after its VJP), else by adding. Call it last in a VJP:
/// once taken over, the buffer is in's to add to.
template <class T, class D>
void pass_gradient(autograd::GradMeta<T, D>& in, autograd::GradMeta<T, D>& out, const T* g, index_t n) {
  if (!out.retains_grad() && in.adopt(out.grad_buffer())) return;
  Backend<D>::add_inplace(in.accumulate_target(), g, n);
}

template <class T, ShapeType S, class D>
Tensor<T, S, D> Tensor<T, S, D>::clone() const {
  Tensor out(shape_);
  D::template copy<T>(out.data_, data_, numel());
  if (should_record(*this)) {
    auto self = meta_;
    const index_t n = numel();
    autograd::active_recorder()->push("clone", out.make_output_meta(), [self, n](const T* g) {
      Backend<D>::add_inplace(self->accumulate_target(), g, n);
    });
  }
  return out;
}

template <class T, ShapeType S, class D>
auto Tensor<T, S, D>::slice(index_t begin, index_t end) const {
  // A static_assert, not a requires-clause: clang 14 cannot match an out-of-line definition whose
  // requires-clause names a member.
  static_assert(S::rank >= 1, "ttmoe: Tensor::slice cuts the leading dimension of a tensor of rank >= 1");
  using Out = Tensor<T, shape_set_t<S, 0, dyn>, D>;
  if (begin > end || end > extent(0))
    throw ValueError("Tensor::slice: rows [" + std::to_string(begin) + ", " + std::to_string(end) +
                     ") out of range for shape " + shape_.to_string());
  auto e = extents();
  const index_t row = extent(0) == 0 ? 0 : numel() / extent(0);
  e[0] = end - begin;
  Out out = Out::from_parts(buf_, data_ + begin * row, Out::shape_type::from_extents(e), nullptr);
  if (should_record(*this)) {
    auto self = meta_;
    const index_t offset = begin * row, n = out.numel();
    autograd::active_recorder()->push("slice", out.make_output_meta(), [self, offset, n](const T* g) {
      auto t = self->target();
      if (t.fresh) {  // first gradient: copy the slice's part, zero the rest (one pass, not two)
        D::template fill_zero<T>(t.data, offset);
        D::template copy<T>(t.data + offset, g, n);
        D::template fill_zero<T>(t.data + offset + n, self->numel() - offset - n);
      } else {
        Backend<D>::add_inplace(t.data + offset, g, n);
      }
    });
  }
  return out;
}

template <class T, ShapeType S, class D>
template <ShapeType S2>
Tensor<T, S2, D> Tensor<T, S, D>::reshape(const S2& shape) const {
  if constexpr (S::fully_static && S2::fully_static) {
    // Different element counts: a static_shape_mismatch naming reshape and both shapes.
    using Checked = typename checked_shape<S{}.numel() == S2{}.numel(), S2, op::reshape_tag, S, S2>::type;
    static_assert(std::is_same_v<Checked, S2>, "ttmoe: reshape between static shapes of different element counts");
  }
  if (shape.numel() != numel())
    throw ShapeError("reshape: cannot view shape " + shape_.to_string() + " (" + std::to_string(numel()) +
                     " elements) as " + shape.to_string() + " (" + std::to_string(shape.numel()) + " elements)");
  auto out = Tensor<T, S2, D>::from_parts(buf_, data_, shape, nullptr);
  if (should_record(*this)) {
    auto self = meta_;
    const index_t n = numel();
    auto om = out.make_output_meta();
    // A reshape's gradient is its output's gradient, handed on without a copy where possible.
    autograd::active_recorder()->push("reshape", om, [self, o = om.get(), n](const T* g) {
      pass_gradient(*self, *o, g, n);
    });
  }
  return out;
}

// ---- common aliases ---------------------------------------------------------------------------
/// A float tensor of any rank-R dynamic shape on the CPU.
template <std::size_t R, class T = float, class D = cpu>
using DTensor = Tensor<T, DynShape<R>, D>;

}  // namespace ttmoe
