// Must NOT compile: batched matmul with static batch extents 2 and 5 (the inner dimensions match).
#include <ttmoe/ttmoe.hpp>
using namespace ttmoe;
int main() {
  auto a = Tensor<float, Shape<2, 3, 4>>::zeros();
  auto b = Tensor<float, Shape<5, 4, 6>>::zeros();
  auto c = matmul(a, b);
  return static_cast<int>(c.numel());
}
