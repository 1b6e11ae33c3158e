// Must NOT compile: viewing 6 static elements as 4.
#include <ttmoe/ttmoe.hpp>
using namespace ttmoe;
int main() {
  auto a = Tensor<float, Shape<2, 3>>::zeros();
  auto b = a.reshape(Shape<4>{});
  return static_cast<int>(b.numel());
}
