// Must NOT compile: inner dimensions 3 and 4 differ statically.
#include <ttmoe/ttmoe.hpp>
using namespace ttmoe;
int main() {
  auto a = Tensor<float, Shape<2, 3>>::zeros();
  auto b = Tensor<float, Shape<4, 5>>::zeros();
  auto c = matmul(a, b);
  return static_cast<int>(c.numel());
}
