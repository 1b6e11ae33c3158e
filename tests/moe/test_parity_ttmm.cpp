// Parity of the LoRA / TTMM components (LoRA, sparse-softmax merging weights, LoRA merging,
// bisecting k-means) against the PyTorch fixtures described in tests/reference/README.md.

#include "parity.hpp"
#include "ttmoe/moe/bisecting_kmeans.hpp"
#include "ttmoe/moe/lora.hpp"
#include "ttmoe/moe/lora_merge.hpp"
#include "ttmoe/moe/sparse_softmax.hpp"

using namespace ttmoe;
using namespace ttmoe::test;

namespace {
// Float runs compare float32 code paths with the same float64 references: tolerances are relative to
// max(1, |ref|) (tests/support/parity.hpp). LoRA and merging are a few small GEMMs, the sparse softmax goes
// through exp(sim / beta^2) with beta = 0.2; measured float errors are at most 4.3e-7 (outputs) and
// 9.5e-7 (LoRA gradients), so the float bounds below leave a margin of 10x or more.
struct Tol {
  double out, grad;  // outputs and gradients through softmax / exp
  double exact;      // results of a few products and sums (stacking, merging, merged forward)
  double restore;    // W after merge() then unmerge()
};
constexpr Tol kDoubleTol{1e-9, 1e-9, 1e-12, 1e-14}, kFloatTol{1e-5, 1e-4, 1e-5, 1e-6};

template <class T>
void run_lora(const std::string& file, Tol tol) {
  Fixture f(file);
  moe::LoRALinear<T> l;
  l.weight = f.get<2, T>("param.weight");
  l.bias = f.get<1, T>("param.bias");
  l.lora_A.weight = leaf<2, T>(f, "param.lora_A.weight");
  l.lora_B.weight = leaf<2, T>(f, "param.lora_B.weight");
  l.scaling = f.meta_double("scaling");
  auto x = leaf<3, T>(f, "in.x");
  Tensor<T, DynShape<3>> y;
  {
    autograd::Tape tape;
    y = l.forward(x);
    check_close(f, "out.y", y, tol.out);
    autograd::backward(tape, upstream_term(f, "y", y));
  }
  check_close(f, "grad.in.x", x.grad(), tol.grad);
  check_close(f, "grad.param.lora_A.weight", l.lora_A.weight.grad(), tol.grad);
  check_close(f, "grad.param.lora_B.weight", l.lora_B.weight.grad(), tol.grad);
  REQUIRE_FALSE(l.weight.grad().defined());  // frozen base
  // merge() folds s B A into W; the merged forward matches; unmerge() restores W.
  const auto w0 = l.weight.to_vector();
  l.merge();
  check_close(f, "out.merged_weight", l.weight, tol.exact);
  Tensor<T, DynShape<3>> ym = l.forward(x.detach());
  REQUIRE(max_rel_error(ym, y) < tol.exact);
  l.unmerge();
  REQUIRE(max_rel_error(l.weight, Tensor<T, DynShape<2>>::from_host(l.weight.shape(), w0)) < tol.restore);
}
}  // namespace

TEST_CASE("parity lora", "[parity][lora]") { run_lora<double>("lora", kDoubleTol); }
TEST_CASE("parity lora float", "[parity][lora]") { run_lora<float>("lora", kFloatTol); }
// PEFT's own LoRA layer on an nn.Linear (tests/reference/reference_libs.py, the pinned reference
// environment): its forward, gradients and merge() against moe::LoRALinear.
TEST_CASE("parity lora peft", "[parity][lora]") { run_lora<double>("lora_peft", kDoubleTol); }
TEST_CASE("parity lora peft float", "[parity][lora]") { run_lora<float>("lora_peft", kFloatTol); }

namespace {
template <class T = double>
void run_sparse_softmax(const std::string& file, Tol tol = kDoubleTol) {
  Fixture f(file);
  const bool single = f.shape("in.query").size() == 1;
  Tensor<T, DynShape<2>> q;
  if (single) {
    auto q1 = f.get<1, T>("in.query");
    q = q1.reshape(DynShape<2>(1, q1.extent(0)));
  } else {
    q = f.get<2, T>("in.query");
  }
  auto c = f.get<2, T>("in.centroids");
  moe::SparseSoftmaxConfig cfg{f.meta_double("beta"), f.meta_double("tau"), index_t(f.meta_int("max_experts"))};
  auto r = moe::sparse_softmax_weights(q, c, cfg);
  const index_t K = c.extent(0);
  if (single) {
    check_close(f, "out.similarity", r.similarity.reshape(DynShape<1>(K)), tol.out);
    check_close(f, "out.kernel_weights", r.kernel_weights.reshape(DynShape<1>(K)), tol.out);
    check_close(f, "out.weights", r.weights.reshape(DynShape<1>(K)), tol.out);
    require_equal_ints(f, "out.selected", r.selected.reshape(DynShape<1>(K)));
    require_equal_ints(f, "out.num_selected", r.num_selected.reshape(Shape<>()));
    require_equal_ints(f, "out.status", r.status.reshape(Shape<>()));
  } else {
    check_close(f, "out.similarity", r.similarity, tol.out);
    check_close(f, "out.kernel_weights", r.kernel_weights, tol.out);
    check_close(f, "out.weights", r.weights, tol.out);
    require_equal_ints(f, "out.selected", r.selected);
    require_equal_ints(f, "out.num_selected", r.num_selected);
    require_equal_ints(f, "out.status", r.status);
    if (f.has("out.weights_paper"))
      check_close(f, "out.weights_paper", moe::sparse_softmax_paper(r.kernel_weights, cfg.tau), tol.out);
  }
}
}  // namespace

TEST_CASE("parity sparse_softmax", "[parity][ttmm]") { run_sparse_softmax("sparse_softmax"); }
TEST_CASE("parity sparse_softmax_max50", "[parity][ttmm]") { run_sparse_softmax("sparse_softmax_max50"); }
TEST_CASE("parity sparse_softmax_none_kept", "[parity][ttmm]") { run_sparse_softmax("sparse_softmax_none_kept"); }
TEST_CASE("parity sparse_softmax_nan", "[parity][ttmm]") { run_sparse_softmax("sparse_softmax_nan"); }
TEST_CASE("parity sparse_softmax float", "[parity][ttmm]") { run_sparse_softmax<float>("sparse_softmax", kFloatTol); }
TEST_CASE("parity sparse_softmax_max50 float", "[parity][ttmm]") {
  run_sparse_softmax<float>("sparse_softmax_max50", kFloatTol);
}
TEST_CASE("parity sparse_softmax_none_kept float", "[parity][ttmm]") {
  run_sparse_softmax<float>("sparse_softmax_none_kept", kFloatTol);
}
TEST_CASE("parity sparse_softmax_nan float", "[parity][ttmm]") { run_sparse_softmax<float>("sparse_softmax_nan", kFloatTol); }

namespace {
template <class T>
void run_lora_merge(Tol tol) {
  Fixture f("lora_merge");
  auto x = f.get<2, T>("in.x");
  auto W = f.get<2, T>("param.weight");
  const auto wd = f.get<1>("in.weights").to_vector();
  const auto sd = f.get<1>("in.scalings").to_vector();
  const std::vector<T> w(wd.begin(), wd.end()), s(sd.begin(), sd.end());
  std::vector<Tensor<T, DynShape<2>>> A, B;
  for (std::size_t k = 0; k < w.size(); ++k) {
    A.push_back(f.get<2, T>("param.experts." + std::to_string(k) + ".lora_A.weight"));
    B.push_back(f.get<2, T>("param.experts." + std::to_string(k) + ".lora_B.weight"));
  }
  auto st = moe::stack_lora(A, B, w, s);
  auto dw = moe::merged_delta(st);
  check_close(f, "out.A_cat", st.A_cat, tol.exact);
  check_close(f, "out.B_cat", st.B_cat, tol.exact);
  check_close(f, "out.delta_w", dw, tol.exact);
  auto yu = moe::apply_stacked(x, W, st);
  Tensor<T, DynShape<2>> wm = W + dw;
  Tensor<T, DynShape<2>> ym = matmul<false, true>(x, wm);
  check_close(f, "out.y_unmerged", yu, tol.exact);
  check_close(f, "out.y_merged", ym, tol.exact);
  REQUIRE(max_rel_error(yu, ym) < tol.exact);  // dense and unmaterialised forms agree
}
}  // namespace

TEST_CASE("parity lora_merge", "[parity][ttmm]") { run_lora_merge<double>(kDoubleTol); }
TEST_CASE("parity lora_merge float", "[parity][ttmm]") { run_lora_merge<float>(kFloatTol); }

namespace {
void run_kmeans(const std::string& file) {
  Fixture f(file);
  auto e = f.get<2>("in.embeddings");
  const auto rule = f.meta("split") == "diameter" ? moe::SplitRule::Diameter : moe::SplitRule::Largest;
  auto r = moe::bisecting_kmeans(e, f.meta_int("num_clusters"), rule, int(f.meta_int("max_iter")));
  auto i1 = [](const std::vector<std::int64_t>& v) {
    return IndexTensor<DynShape<1>>::from_host(DynShape<1>(index_t(v.size())), v);
  };
  require_equal_ints(f, "out.assignments", i1(r.assignments));
  require_equal_ints(f, "out.sizes", i1(r.sizes));
  require_equal_ints(f, "out.split_order", i1(r.split_order));
  require_equal_ints(f, "out.lloyd_iterations", i1(r.lloyd_iterations));
  check_close(f, "out.centroids", r.centroids, 1e-9);
}
}  // namespace

TEST_CASE("parity bisecting_kmeans", "[parity][ttmm]") { run_kmeans("bisecting_kmeans"); }
TEST_CASE("parity bisecting_kmeans_largest", "[parity][ttmm]") { run_kmeans("bisecting_kmeans_largest"); }
