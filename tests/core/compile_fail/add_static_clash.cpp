// Must NOT compile: [2, 3] + [4] cannot broadcast, and both extents are static.
#include <ttmoe/ttmoe.hpp>
using namespace ttmoe;
int main() {
  auto a = Tensor<float, Shape<2, 3>>::zeros();
  auto b = Tensor<float, Shape<4>>::zeros();
  Tensor<float, Shape<2, 3>> c = a + b;
  return static_cast<int>(c.numel());
}
