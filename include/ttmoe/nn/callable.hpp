#pragma once
// Calling a module runs its forward, as torch's Module.__call__ does. Layers derive from
// `Callable<Self>` instead of each repeating an operator() per forward overload.

namespace ttmoe::nn {

/// Gives a module `m(args...)` meaning `m.forward(args...)` for every const forward overload it has.
template <class Self>
struct Callable {
  /// Runs `forward(args...)`.
  template <class... Args>
    requires requires(const Self& self, const Args&... args) { self.forward(args...); }
  auto operator()(const Args&... args) const {
    return static_cast<const Self&>(*this).forward(args...);
  }
};

}  // namespace ttmoe::nn
