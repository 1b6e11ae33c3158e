#pragma once
// Calling a module runs its forward, as torch's Module.__call__ does. Layers derive from
// `Callable<Self>` instead of each repeating an operator() per forward overload.

namespace ttmoe::nn {

/// Gives a module `m(args...)` meaning `m.forward(args...)` for every const forward overload it has.
template <class Self>
struct Callable {
  /// Runs `forward(args...)`.
  // Deliberately unconstrained: a `requires self.forward(args...)` clause is checked, and by clang 14
  // cached, at the first call site it meets, which can be while the derived layer is still incomplete
  // (a member of a class template being instantiated), and the cached failure then rejects every later
  // call (clang_build caught it). A call with arguments no forward accepts still fails to compile, at
  // the forward call below, naming the layer.
  template <class... Args>
  auto operator()(const Args&... args) const {
    return static_cast<const Self&>(*this).forward(args...);
  }
};

}  // namespace ttmoe::nn
