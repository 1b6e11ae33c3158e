// MUST compile (control for functor_without_vjp.cpp): the same user functor WITH its vjp, used the
// same way under recording, so the failure there is the missing vjp and nothing else.
#include <ttmoe/ttmoe.hpp>
using namespace ttmoe;

struct cube_with_vjp {
  static constexpr const char* name = "cube_with_vjp";
  static constexpr bool differentiable = true;
  template <class V> static V apply(V a) { return a * a * a; }
  template <class V> static void vjp(V a, V, V g, V& ga) { ga = V(3) * a * a * g; }
};

int main() {
  auto x = Tensor<float, Shape<4>>::full({}, 2.0f);
  x.set_requires_grad();
  autograd::Tape tape;
  Tensor<float, Shape<4>> y = expr::make_expr<cube_with_vjp>(x) * 2.0f;
  auto loss = sum_all(y);
  autograd::backward(tape, loss);
  return static_cast<int>(y.numel());
}
