// MUST compile (control for the compile-fail checks): the same calls with fitting static shapes,
// with dynamic extents (checked at run time instead), and the result types they produce.
#include <ttmoe/ttmoe.hpp>
#include <type_traits>
using namespace ttmoe;
int main() {
  auto a = Tensor<float, Shape<2, 3>>::zeros();
  auto b = Tensor<float, Shape<3>>::zeros();
  Tensor<float, Shape<2, 3>> c = a + b;
  auto d = Tensor<float, DynShape<1>>::zeros(DynShape<1>(4));
  auto e = eval(a + d);  // dynamic: compiles, would throw ShapeError at run time
  static_assert(std::is_same_v<decltype(e), Tensor<float, Shape<2, 3>>>);
  auto w = Tensor<float, Shape<3, 5>>::zeros();
  auto m = matmul(a, w);
  static_assert(std::is_same_v<decltype(m), Tensor<float, Shape<2, 5>>>);
  auto bm = matmul(Tensor<float, Shape<2, 3, 4>>::zeros(), Tensor<float, Shape<2, 4, 6>>::zeros());
  static_assert(std::is_same_v<decltype(bm), Tensor<float, Shape<2, 3, 6>>>);
  auto r = a.reshape(Shape<6>{});
  auto mask = Tensor<float, Shape<3>>::zeros();
  auto wh = eval(where(mask, a, c));
  return static_cast<int>(c.numel() + e.numel() + m.numel() + bm.numel() + r.numel() + wh.numel());
}
