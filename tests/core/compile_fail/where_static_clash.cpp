// Must NOT compile: the third operand of where ([2, 4]) clashes with the first two ([3], [2, 3]).
#include <ttmoe/ttmoe.hpp>
using namespace ttmoe;
int main() {
  auto m = Tensor<float, Shape<3>>::zeros();
  auto a = Tensor<float, Shape<2, 3>>::zeros();
  auto b = Tensor<float, Shape<2, 4>>::zeros();
  auto c = eval(where(m, a, b));
  return static_cast<int>(c.numel());
}
