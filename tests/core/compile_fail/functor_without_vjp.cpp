// Must NOT compile: a user elementwise functor that declares itself differentiable but has no `vjp`,
// used in an expression that is materialised under recording (a tape is active, x requires grad).
// Every recorded node needs its VJP: the fused backward (expr/kernel.hpp) calls Op::vjp, so the
// expression cannot be instantiated without one.
#include <ttmoe/ttmoe.hpp>
using namespace ttmoe;

struct cube_without_vjp {
  static constexpr const char* name = "cube_without_vjp";
  static constexpr bool differentiable = true;
  template <class V> static V apply(V a) { return a * a * a; }
};

int main() {
  auto x = Tensor<float, Shape<4>>::full({}, 2.0f);
  x.set_requires_grad();
  autograd::Tape tape;
  Tensor<float, Shape<4>> y = expr::make_expr<cube_without_vjp>(x) * 2.0f;
  auto loss = sum_all(y);
  autograd::backward(tape, loss);
  return static_cast<int>(y.numel());
}
