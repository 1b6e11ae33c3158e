#include <ttmoe/ttmoe.hpp>
#include <ttmoe/backend/cuda/thrust_host.hpp>
#include <cstdio>
using namespace ttmoe;
int main(){
  using S = Shape<2,3>;
  auto a = Tensor<float,S,thrust_host>::from_host(S(), {1,2,3,4,5,6});
  auto b = Tensor<float,Shape<3>,thrust_host>::from_host(Shape<3>(), {1,2,3});
  Tensor<float,S,thrust_host> y = exp(a*b + 1.f);
  auto s = softmax(a); auto m = matmul<false,true>(a, a); auto t = topk(a, 2);
  for (auto v : y.to_vector()) std::printf("%g ", v);
  for (auto v : m.to_vector()) std::printf("%g ", v);
  for (auto v : t.second.to_vector()) std::printf("%ld ", (long)v);
  std::printf("\n");
}
