// Parity of the LoRA / TTMM components (LoRA, sparse-softmax merging weights, LoRA merging,
// bisecting k-means) against the PyTorch fixtures described in tests/reference/README.md.

#include "parity_util.hpp"
#include "ttmoe/moe/bisecting_kmeans.hpp"
#include "ttmoe/moe/lora.hpp"
#include "ttmoe/moe/lora_merge.hpp"
#include "ttmoe/moe/sparse_softmax.hpp"

using namespace ttmoe;
using namespace ttmoe::test;

TEST_CASE("parity lora", "[parity][lora]") {
  Fixture f("lora");
  moe::LoRALinear<double> l;
  l.weight = f.get<2>("param.weight");
  l.bias = f.get<1>("param.bias");
  l.lora_A.weight = leaf<2>(f, "param.lora_A.weight");
  l.lora_B.weight = leaf<2>(f, "param.lora_B.weight");
  l.scaling = f.meta_double("scaling");
  auto x = leaf<3>(f, "in.x");
  Tensor<double, DynShape<3>> y;
  {
    autograd::Tape tape;
    y = l.forward(x);
    check_close<3>(f, "out.y", y, 1e-9);
    autograd::backward(tape, upstream_term<3>(f, "y", y));
  }
  check_close<3>(f, "grad.in.x", x.grad(), 1e-9);
  check_close<2>(f, "grad.param.lora_A.weight", l.lora_A.weight.grad(), 1e-9);
  check_close<2>(f, "grad.param.lora_B.weight", l.lora_B.weight.grad(), 1e-9);
  REQUIRE_FALSE(l.weight.grad().defined());  // frozen base
  // merge() folds s B A into W; the merged forward matches; unmerge() restores W.
  const auto w0 = l.weight.to_vector();
  l.merge();
  check_close<2>(f, "out.merged_weight", l.weight, 1e-12);
  Tensor<double, DynShape<3>> ym = l.forward(x.detach());
  REQUIRE(max_rel_error(ym, y) < 1e-12);
  l.unmerge();
  REQUIRE(max_rel_error(l.weight, Tensor<double, DynShape<2>>::from_host(l.weight.shape(), w0)) < 1e-14);
}

namespace {
void run_sparse_softmax(const std::string& file) {
  Fixture f(file);
  const bool single = f.shape("in.query").size() == 1;
  Tensor<double, DynShape<2>> q;
  if (single) {
    auto q1 = f.get<1>("in.query");
    q = q1.reshape(DynShape<2>(1, q1.extent(0)));
  } else {
    q = f.get<2>("in.query");
  }
  auto c = f.get<2>("in.centroids");
  moe::SparseSoftmaxConfig cfg{f.meta_double("beta"), f.meta_double("tau"), f.meta_int("max_experts")};
  auto r = moe::sparse_softmax_weights(q, c, cfg);
  const index_t K = c.extent(0);
  if (single) {
    check_close<1>(f, "out.similarity", r.similarity.reshape(DynShape<1>(K)), 1e-9);
    check_close<1>(f, "out.kernel_weights", r.kernel_weights.reshape(DynShape<1>(K)), 1e-9);
    check_close<1>(f, "out.weights", r.weights.reshape(DynShape<1>(K)), 1e-9);
    require_equal_ints<1>(f, "out.selected", r.selected.reshape(DynShape<1>(K)));
    require_equal_ints<0>(f, "out.num_selected", r.num_selected.reshape(Shape<>()));
    require_equal_ints<0>(f, "out.status", r.status.reshape(Shape<>()));
  } else {
    check_close<2>(f, "out.similarity", r.similarity, 1e-9);
    check_close<2>(f, "out.kernel_weights", r.kernel_weights, 1e-9);
    check_close<2>(f, "out.weights", r.weights, 1e-9);
    require_equal_ints<2>(f, "out.selected", r.selected);
    require_equal_ints<1>(f, "out.num_selected", r.num_selected);
    require_equal_ints<1>(f, "out.status", r.status);
    if (f.has("out.weights_paper"))
      check_close<2>(f, "out.weights_paper", moe::sparse_softmax_paper(r.kernel_weights, cfg.tau), 1e-9);
  }
}
}  // namespace

TEST_CASE("parity sparse_softmax", "[parity][ttmm]") { run_sparse_softmax("sparse_softmax"); }
TEST_CASE("parity sparse_softmax_max50", "[parity][ttmm]") { run_sparse_softmax("sparse_softmax_max50"); }
TEST_CASE("parity sparse_softmax_none_kept", "[parity][ttmm]") { run_sparse_softmax("sparse_softmax_none_kept"); }
TEST_CASE("parity sparse_softmax_nan", "[parity][ttmm]") { run_sparse_softmax("sparse_softmax_nan"); }

TEST_CASE("parity lora_merge", "[parity][ttmm]") {
  Fixture f("lora_merge");
  auto x = f.get<2>("in.x");
  auto W = f.get<2>("param.weight");
  const auto w = f.get<1>("in.weights").to_vector();
  const auto s = f.get<1>("in.scalings").to_vector();
  std::vector<Tensor<double, DynShape<2>>> A, B;
  for (std::size_t k = 0; k < w.size(); ++k) {
    A.push_back(f.get<2>("param.experts." + std::to_string(k) + ".lora_A.weight"));
    B.push_back(f.get<2>("param.experts." + std::to_string(k) + ".lora_B.weight"));
  }
  auto st = moe::stack_lora(A, B, w, s);
  auto dw = moe::merged_delta(st);
  check_close<2>(f, "out.A_cat", st.A_cat, 1e-12);
  check_close<2>(f, "out.B_cat", st.B_cat, 1e-12);
  check_close<2>(f, "out.delta_w", dw, 1e-12);
  auto yu = moe::apply_stacked(x, W, st);
  Tensor<double, DynShape<2>> wm = W + dw;
  Tensor<double, DynShape<2>> ym = matmul<false, true>(x, wm);
  check_close<2>(f, "out.y_unmerged", yu, 1e-12);
  check_close<2>(f, "out.y_merged", ym, 1e-12);
  REQUIRE(max_rel_error(yu, ym) < 1e-12);  // dense and unmaterialised forms agree
  // The same in float, against each other.
  std::vector<Tensor<float, DynShape<2>>> Af, Bf;
  auto tof = [](const Tensor<double, DynShape<2>>& t) {
    auto v = t.to_vector();
    std::vector<float> fv(v.begin(), v.end());
    return Tensor<float, DynShape<2>>::from_host(t.shape(), fv);
  };
  for (std::size_t k = 0; k < w.size(); ++k) Af.push_back(tof(A[k])), Bf.push_back(tof(B[k]));
  std::vector<float> wf(w.begin(), w.end()), sf(s.begin(), s.end());
  auto stf = moe::stack_lora(Af, Bf, wf, sf);
  auto Wf = tof(W), xf = tof(x);
  Tensor<float, DynShape<2>> wmf = Wf + moe::merged_delta(stf);
  Tensor<float, DynShape<2>> ymf = matmul<false, true>(xf, wmf);
  REQUIRE(max_rel_error(moe::apply_stacked(xf, Wf, stf), ymf) < 1e-5);
}

namespace {
void run_kmeans(const std::string& file) {
  Fixture f(file);
  auto e = f.get<2>("in.embeddings");
  const auto rule = f.meta("split") == "diameter" ? moe::SplitRule::Diameter : moe::SplitRule::Largest;
  auto r = moe::bisecting_kmeans(e, f.meta_int("num_clusters"), rule, int(f.meta_int("max_iter")));
  auto i1 = [](const std::vector<std::int64_t>& v) {
    return IndexTensor<DynShape<1>>::from_host(DynShape<1>(index_t(v.size())), v);
  };
  require_equal_ints<1>(f, "out.assignments", i1(r.assignments));
  require_equal_ints<1>(f, "out.sizes", i1(r.sizes));
  require_equal_ints<1>(f, "out.split_order", i1(r.split_order));
  require_equal_ints<1>(f, "out.lloyd_iterations", i1(r.lloyd_iterations));
  check_close<2>(f, "out.centroids", r.centroids, 1e-9);
}
}  // namespace

TEST_CASE("parity bisecting_kmeans", "[parity][ttmm]") { run_kmeans("bisecting_kmeans"); }
TEST_CASE("parity bisecting_kmeans_largest", "[parity][ttmm]") { run_kmeans("bisecting_kmeans_largest"); }
