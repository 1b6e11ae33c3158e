// TTMM at test time without reference libraries: the exact in-place merge and restore (bit-identical
// for F32 and BF16-valued weights, with the size of the restore patch reported), dense == unmerged
// == the explicit weight sum, expert selection (including the base-model and NaN cases) through the
// store, the LRU cache's byte bound, the automatic mode rule, and the merge with BF16 products
// (rounding, the GEMM against a double reference, where DenseMerge uses it and what it costs in
// precision).

#include <catch2/catch.hpp>

#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "parity.hpp"
#include "ttmm_test_util.hpp"
#include "ttmoe/ttmm/test_time_merge.hpp"

using namespace ttmoe;
using ttmm_test::ScratchDir;

namespace {

/// Every parameter of `m`, flattened, in visiting order.
std::vector<std::vector<float>> snapshot(models::LlamaForCausalLM<float>& m) {
  std::vector<std::vector<float>> out;
  for (auto& [name, lin] : models::adaptable_linears(m)) out.push_back(lin->weight.to_vector());
  return out;
}

bool bit_equal(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0) return false;
  return true;
}

/// Rounds every adaptable weight of `m` to the nearest BF16 value (kept in F32 storage).
void round_weights_to_bf16(models::LlamaForCausalLM<float>& m) {
  for (auto& [name, lin] : models::adaptable_linears(m)) {
    float* w = lin->weight.data();
    for (index_t i = 0; i < lin->weight.numel(); ++i) {
      std::uint32_t u;
      std::memcpy(&u, w + i, 4);
      u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
      std::memcpy(w + i, &u, 4);
    }
  }
}

IndexTensor<DynShape<2>> some_ids() {
  return IndexTensor<DynShape<2>>::from_host(DynShape<2>(2, 6), {1, 5, 9, 3, 7, 2, 4, 4, 8, 1, 0, 6});
}

}  // namespace

TEST_CASE("ttmm exact merge: restore is bit-identical for F32 and BF16-valued weights", "[ttmm][merge]") {
  const auto c = models::LlamaConfig::from_json(ttmm_test::tiny_llama_json());
  for (const bool bf16 : {false, true}) {
    models::LlamaForCausalLM<float> m(c, 3);
    if (bf16) round_weights_to_bf16(m);
    const auto before = snapshot(m);
    auto e0 = ttmm_test::random_expert(m, 11), e1 = ttmm_test::random_expert(m, 12);
    // These random experts move W by about its own size at weight 1. Scale 0.01 is the realistic
    // case (a trained LoRA changes W by a percent or so): few elements need the patch. Scale 30
    // makes delta dominate W, so rounding loses most of W's bits and the patch list carries them.
    for (const double scale : {0.01, 30.0}) {
      std::size_t patch = 0, elements = 0;
      {
        ttmm::DenseMerge<> merge(m, {{&e0, 0.6 * scale}, {&e1, 0.4 * scale}});
        CHECK(merge.module_count() == 14);
        CHECK_FALSE(bit_equal(snapshot(m), before));
        patch = merge.patch_entries();
        elements = merge.merged_elements();
      }  // the destructor restores
      INFO("bf16-valued " << bf16 << ", delta scale " << scale << ": patch " << patch << " of " << elements);
      CHECK(bit_equal(snapshot(m), before));
      if (scale < 1) CHECK(patch < elements / 10);
      else CHECK(patch > 0);  // the subtraction alone would not have restored
      WARN("exact restore patch: " << patch << " entries for " << elements << " weights (bf16-valued " << bf16
                                   << ", delta scale " << scale << ")");
    }
  }
}

TEST_CASE("ttmm merge: dense == unmaterialised == the explicit weight sum", "[ttmm][merge]") {
  const auto c = models::LlamaConfig::from_json(ttmm_test::tiny_llama_json());
  models::LlamaForCausalLM<float> m(c, 4);
  auto e0 = ttmm_test::random_expert(m, 21), e1 = ttmm_test::random_expert(m, 22), e2 = ttmm_test::random_expert(m, 23);
  const std::vector<models::WeightedAdapter<float>> ws{{&e0, 0.5}, {&e1, 0.3}, {&e2, 0.2}};
  const auto ids = some_ids();
  const auto base = m.forward(ids).to_vector();
  // The explicit sum: W + sum_k w_k s_k B_k A_k per module, computed here in double.
  std::vector<float> expected;
  {
    models::LlamaForCausalLM<float> ref(c, 4);
    for (auto& [name, lin] : models::adaptable_linears(ref)) {
      auto w = lin->weight.to_vector();
      const index_t out = lin->weight.extent(0), in = lin->weight.extent(1);
      for (const auto& wa : ws) {
        const auto& mod = wa.adapter->modules.at(name);
        const auto A = mod.lora_A.weight.to_vector(), B = mod.lora_B.weight.to_vector();
        const index_t r = mod.rank();
        for (index_t o = 0; o < out; ++o)
          for (index_t i = 0; i < in; ++i) {
            double acc = 0;
            for (index_t k = 0; k < r; ++k) acc += double(B[o * r + k]) * double(A[k * in + i]);
            w[o * in + i] += float(wa.weight * mod.scaling * acc);
          }
      }
      lin->weight = Tensor<float, DynShape<2>>::from_host(DynShape<2>(out, in), w);
    }
    expected = ref.forward(ids).to_vector();
  }
  auto rel = [](const std::vector<float>& a, const std::vector<float>& b) {
    double num = 0, den = 0;
    for (std::size_t i = 0; i < a.size(); ++i) num += (a[i] - b[i]) * double(a[i] - b[i]), den += double(b[i]) * b[i];
    return std::sqrt(num / den);
  };
  std::vector<float> dense, unmerged;
  {
    ttmm::DenseMerge<> merge(m, ws);
    dense = m.forward(ids).to_vector();
  }
  {
    models::AttachedAdapters<float> att(m, ws, models::LoraMode::unmerged);
    unmerged = m.forward(ids).to_vector();
  }
  CHECK(rel(base, expected) > 0.05);  // the experts matter
  CHECK(rel(dense, expected) < 1e-5);
  CHECK(rel(unmerged, expected) < 1e-5);
  CHECK(rel(dense, unmerged) < 1e-5);
  CHECK(m.forward(ids).to_vector() == base);
}

TEST_CASE("ttmm selection through a store: weights, base model, NaN fallback, cache and modes", "[ttmm][merge]") {
  const auto c = models::LlamaConfig::from_json(ttmm_test::tiny_llama_json());
  models::LlamaForCausalLM<float> m(c, 5);
  ScratchDir tmp("ttmm_select");
  constexpr index_t K = 4, d = 3;
  // Centroids: the unit axes e0, e1, e2 and -e0.
  const std::vector<float> cents{1, 0, 0, 0, 1, 0, 0, 0, 1, -1, 0, 0};
  ttmm_test::write_store(tmp.path, m, Tensor<float, DynShape<2>>::from_host(DynShape<2>(K, d), cents), {1, 1, 1, 1}, 40);
  const auto store = ttmm::ExpertStore::open(tmp.path, models::linear_shapes(m));

  SECTION("weights follow exp(-(1 - q.phi)/beta^2), thresholded and renormalised") {
    const float s = 1.f / std::sqrt(2.f);
    const std::vector<float> q{s, s, 0};
    const auto sel = ttmm::select_experts(q, store.centroids());
    // By hand in double: k_e = exp(-(1 - q.phi_e)/0.04), w = k / sum k, keep w > 0.01, renormalise.
    std::vector<double> k(K), w(K);
    double sum = 0;
    for (index_t e = 0; e < K; ++e) {
      double dot = 0;
      for (index_t j = 0; j < d; ++j) dot += double(q[j]) * cents[e * d + j];
      k[e] = std::exp(-(1 - dot) / 0.04);
      sum += k[e];
    }
    std::vector<index_t> kept;
    double kept_sum = 0;
    for (index_t e = 0; e < K; ++e)
      if (k[e] / sum > 0.01) kept.push_back(e), kept_sum += k[e];
    REQUIRE(sel.experts == kept);
    for (std::size_t i = 0; i < kept.size(); ++i) CHECK(sel.weights[i] == Approx(k[kept[i]] / kept_sum).epsilon(1e-6));
    CHECK(sel.status == moe::MergeStatus::Ok);
    moe::SparseSoftmaxConfig one;
    one.max_experts = 1;
    const auto top1 = ttmm::select_experts(q, store.centroids(), one);
    CHECK(top1.experts.size() == 1);
    CHECK(top1.weights == std::vector<double>{1.0});
  }
  SECTION("nothing above tau: the base model, unchanged") {
    ttmm::TestTimeMerger merger(m, store, 1 << 20);
    const auto before = snapshot(m);
    const float h = 1.f / std::sqrt(2.f);
    const std::vector<float> q{0, h, h};
    moe::SparseSoftmaxConfig high;
    high.tau = 0.6;  // e1 and e2 get about half of the mass each: nothing passes
    auto a = merger.activate(q, 100, ttmm::MergeMode::dense, high);
    CHECK(a.selection().base_model());
    CHECK(a.selection().status == moe::MergeStatus::BaseModel);
    CHECK(bit_equal(snapshot(m), before));
  }
  SECTION("a NaN query component: the nearest non-NaN expert alone") {
    // Centroid 0 is corrupt (NaN): its similarity is NaN, so every softmax weight is.
    auto bad = cents;
    bad[1] = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> q{0, 0.6f, 0.8f};
    const auto sel = ttmm::select_experts(q, Tensor<float, DynShape<2>>::from_host(DynShape<2>(K, d), bad));
    CHECK(sel.status == moe::MergeStatus::NanFallback);
    CHECK(sel.experts == std::vector<index_t>{2});  // similarities NaN, 0.6, 0.8, 0
    CHECK(sel.weights == std::vector<double>{1.0});
  }
  SECTION("the LRU cache keeps at most its byte capacity, evicting the least recently used") {
    const std::size_t one = ttmm::ExpertCache::size_of(store.load_expert(0));
    ttmm::ExpertCache cache(store, 2 * one + one / 2);
    cache.get(0);
    cache.get(1);
    cache.get(0);  // 1 is now the least recently used
    cache.get(2);
    CHECK(cache.size() == 2);
    CHECK(cache.contains(0));
    CHECK(cache.contains(2));
    CHECK_FALSE(cache.contains(1));
    CHECK(cache.bytes() <= cache.capacity());
    CHECK(cache.hits() == 1);
    CHECK(cache.misses() == 3);
  }
  SECTION("activate: dense and unmaterialised give the same logits and restore the model") {
    ttmm::TestTimeMerger merger(m, store, 1 << 24);
    const auto ids = some_ids();
    const auto base = m.forward(ids).to_vector();
    const float s = 1.f / std::sqrt(2.f);
    const std::vector<float> q{s, 0, s};
    std::vector<float> dense, unmerged;
    {
      auto a = merger.activate(q, 10, ttmm::MergeMode::dense);
      REQUIRE(a.selection().experts.size() == 2);
      CHECK(a.mode() == ttmm::MergeMode::dense);
      dense = m.forward(ids).to_vector();
    }
    CHECK(m.forward(ids).to_vector() == base);
    {
      auto a = merger.activate(q, 10, ttmm::MergeMode::unmaterialised);
      CHECK(a.mode() == ttmm::MergeMode::unmaterialised);
      unmerged = m.forward(ids).to_vector();
    }
    CHECK(m.forward(ids).to_vector() == base);
    CHECK(test::normwise_rel_error(Tensor<float, DynShape<1>>::from_host(DynShape<1>(index_t(dense.size())), dense),
                                   Tensor<float, DynShape<1>>::from_host(DynShape<1>(index_t(unmerged.size())), unmerged)) < 1e-5);
    CHECK(dense != base);
    CHECK(merger.cache().hits() == 2);  // the second activation found both experts cached
  }
}

TEST_CASE("ttmm automatic mode: dense for long requests, unmaterialised for short ones", "[ttmm][merge]") {
  const models::LinearShapes shapes{{"a", {2048, 2048}}, {"b", {8192, 2048}}};
  const ttmm::MergeCosts costs{1e11, 1e10};  // 100 GFLOP/s GEMM, 10 GB/s low-rank streaming
  // dense = 4 R (2048^2 + 8192 * 2048) / 1e11; per token = R (4096 + 10240) 4 / 1e10: break-even ~ 146 tokens.
  CHECK(ttmm::choose_merge_mode(shapes, 640, 100, costs) == ttmm::MergeMode::unmaterialised);
  CHECK(ttmm::choose_merge_mode(shapes, 640, 1000, costs) == ttmm::MergeMode::dense);
  const auto e = ttmm::estimate_merge_costs(shapes, 640, 100, costs);
  CHECK(e.dense_s == Approx(4.0 * 640 * (2048.0 * 2048 + 8192.0 * 2048) / 1e11));
  CHECK(e.unmaterialised_s == Approx(100.0 * 640 * (4096 + 10240) * 4 / 1e10));
  // BF16 products at 4x the F32 rate move the break-even from ~146 to ~37 tokens; without a measured
  // BF16 rate (0) the F32 one prices them.
  const ttmm::MergeCosts with_bf16{1e11, 1e10, 4e11};
  CHECK(ttmm::choose_merge_mode(shapes, 640, 40, with_bf16, false, true) == ttmm::MergeMode::dense);
  CHECK(ttmm::choose_merge_mode(shapes, 640, 30, with_bf16, false, true) == ttmm::MergeMode::unmaterialised);
  CHECK(ttmm::choose_merge_mode(shapes, 640, 100, costs, false, true) == ttmm::MergeMode::unmaterialised);
  const auto& measured = ttmm::calibrate_merge_costs();
  CHECK(measured.gemm_flops_per_second > 1e8);
  CHECK(measured.gemm_bf16_flops_per_second > 1e8);
  CHECK(measured.lowrank_bytes_per_second > 1e7);
  CHECK(&ttmm::calibrate_merge_costs() == &measured);  // cached
}

namespace {

/// Overwrites the last 4 bytes of `file` in place (same inode and size) and moves its mtime on, as
/// an editor or a careless `cp` over the checkpoint would.
void rewrite_tail_in_place(const std::filesystem::path& file) {
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-4, std::ios::end);
    const char junk[4] = {0x11, 0x22, 0x33, 0x44};
    f.write(junk, 4);
  }
  std::filesystem::last_write_time(file, std::filesystem::last_write_time(file) + std::chrono::seconds(5));
}

/// A random tiny Llama saved as `dtype` into `dir` (replacing what was there), loaded back, and the
/// mapping of its checkpoint that mapped restores copy from.
std::pair<models::LlamaForCausalLM<float>, std::shared_ptr<const ttmm::MappedBaseWeights>> saved_and_mapped(
    const std::filesystem::path& dir, io::DType dtype, std::uint64_t seed) {
  std::filesystem::remove_all(dir);
  {
    models::LlamaForCausalLM<float> src(models::LlamaConfig::from_json(ttmm_test::tiny_llama_json()), seed);
    models::save_llama(src, dir, dtype);
  }
  auto m = models::load_llama<float>(dir);
  auto origin = ttmm::MappedBaseWeights::open_model_folder(dir);
  REQUIRE(origin != nullptr);
  return {std::move(m), std::move(origin)};
}

}  // namespace

TEST_CASE("ttmm mapped restore: bit-identical from F32 and BF16 checkpoints, no patch, no second GEMM", "[ttmm][merge]") {
  ScratchDir tmp("ttmm_mapped_restore");
  for (const io::DType dtype : {io::DType::F32, io::DType::BF16}) {
    INFO("checkpoint " << io::dtype_name(dtype));
    auto [m, origin] = saved_and_mapped(tmp.path / "base", dtype, 5);
    const auto before = snapshot(m);
    auto e0 = ttmm_test::random_expert(m, 31), e1 = ttmm_test::random_expert(m, 32);
    const std::vector<models::WeightedAdapter<float>> ws{{&e0, 0.6}, {&e1, 0.4}};
    const auto ids = some_ids();
    std::vector<float> by_patch, by_mapping;
    {
      ttmm::DenseMerge<> merge(m, ws);
      by_patch = m.forward(ids).to_vector();
    }
    REQUIRE(bit_equal(snapshot(m), before));
    {
      ttmm::DenseMerge<> merge(m, ws, origin);
      CHECK(merge.mapped_modules() == 14);
      CHECK(merge.patch_entries() == 0);
      CHECK_FALSE(bit_equal(snapshot(m), before));
      by_mapping = m.forward(ids).to_vector();
      merge.restore();
      CHECK(bit_equal(snapshot(m), before));
    }
    // Accumulating inside the GEMM rounds once less than delta-then-add: same model to F32 noise.
    double num = 0, den = 0;
    for (std::size_t i = 0; i < by_patch.size(); ++i)
      num += double(by_patch[i] - by_mapping[i]) * (by_patch[i] - by_mapping[i]), den += double(by_patch[i]) * by_patch[i];
    CHECK(std::sqrt(num / den) < 1e-5);
  }
}

TEST_CASE("ttmm mapped restore: a checkpoint changed on disk is never trusted", "[ttmm][merge]") {
  const auto c = models::LlamaConfig::from_json(ttmm_test::tiny_llama_json());
  ScratchDir tmp("ttmm_mapped_changed");
  const auto file = tmp.path / "base" / "model.safetensors";
  auto fresh = [&] { return saved_and_mapped(tmp.path / "base", io::DType::F32, 6); };
  SECTION("rewritten in place before the merge: the merge falls back to GEMM + patch") {
    auto [m, origin] = fresh();
    auto e0 = ttmm_test::random_expert(m, 41);
    const auto before = snapshot(m);
    rewrite_tail_in_place(file);
    CHECK_FALSE(origin->unchanged());
    {
      ttmm::DenseMerge<> merge(m, {{&e0, 1.0}}, origin);
      CHECK(merge.mapped_modules() == 0);
    }
    CHECK(bit_equal(snapshot(m), before));
  }
  SECTION("rewritten in place after the merge: restore refuses and leaves the weights merged") {
    auto [m, origin] = fresh();
    auto e0 = ttmm_test::random_expert(m, 42);
    const auto before = snapshot(m);
    ttmm::DenseMerge<> merge(m, {{&e0, 1.0}}, origin);
    CHECK(merge.mapped_modules() == 14);
    const auto merged = snapshot(m);
    rewrite_tail_in_place(file);
    CHECK_THROWS_AS(merge.restore(), ValueError);
    CHECK(bit_equal(snapshot(m), merged));
    CHECK_FALSE(bit_equal(snapshot(m), before));
  }
  SECTION("a merge nested over another merge does not restore past it") {
    auto [m, origin] = fresh();
    auto e0 = ttmm_test::random_expert(m, 44), e1 = ttmm_test::random_expert(m, 45);
    const auto before = snapshot(m);
    {
      ttmm::DenseMerge<> outer(m, {{&e0, 1.0}}, origin);
      CHECK(outer.mapped_modules() == 14);
      const auto merged_once = snapshot(m);
      {
        ttmm::DenseMerge<> inner(m, {{&e1, 1.0}}, origin);
        CHECK(inner.mapped_modules() == 0);  // W is no longer the file's: GEMM + patch
      }
      CHECK(bit_equal(snapshot(m), merged_once));
    }
    CHECK(bit_equal(snapshot(m), before));
  }
  SECTION("replaced by rename after the merge: the mapping keeps the old file, restore is exact") {
    auto [m, origin] = fresh();
    auto e0 = ttmm_test::random_expert(m, 43);
    const auto before = snapshot(m);
    {
      ttmm::DenseMerge<> merge(m, {{&e0, 1.0}}, origin);
      {
        models::LlamaForCausalLM<float> other(c, 99);
        models::save_llama(other, tmp.path / "other");
      }
      std::filesystem::rename(tmp.path / "other" / "model.safetensors", file);
      CHECK(origin->unchanged());
      merge.restore();
    }
    CHECK(bit_equal(snapshot(m), before));
  }
}

TEST_CASE("ttmm BF16 merge GEMM: W + rounded factors' product with F32 sums, at awkward shapes", "[ttmm][merge]") {
  // {out, in, R}: odd R (a half-filled last pair), columns past the tile widths, R = 800 (two
  // k-blocks of the BF16 kernel, so the residual W joins the first only), a rank-1 product.
  const std::vector<std::array<index_t, 3>> shapes{{37, 50, 19}, {64, 130, 33}, {9, 1000, 800}, {50, 8, 1}, {130, 70, 64}};
  std::mt19937_64 rng(11);
  std::normal_distribution<float> n(0.f, 1.f);
  auto random = [&](index_t a, index_t b) {
    std::vector<float> v(std::size_t(a * b));
    for (auto& x : v) x = n(rng);
    return Tensor<float, DynShape<2>>::from_host(DynShape<2>(a, b), v);
  };
  auto widen = [](float x) { return double(io::bf16_to_float(io::float_to_bf16(x))); };
  for (const auto& [out, in, r] : shapes) {
    INFO("out " << out << ", in " << in << ", R " << r);
    auto W = random(out, in);
    const moe::StackedLoRA<float, cpu> f{random(r, in), random(out, r)};
    const auto w0 = W.to_vector(), a = f.A_cat.to_vector(), b = f.B_cat.to_vector();
    ttmm::add_merged_delta_bf16(W, f);
    const auto got = W.to_vector();
    double worst = 0, err_rounded = 0, err_unrounded = 0;
    for (index_t o = 0; o < out; ++o)
      for (index_t j = 0; j < in; ++j) {
        double want = w0[o * in + j], plain = want, scale = std::abs(want);
        for (index_t k = 0; k < r; ++k) {
          const double t = widen(b[o * r + k]) * widen(a[k * in + j]);
          want += t, scale += std::abs(t), plain += double(b[o * r + k]) * a[k * in + j];
        }
        const double g = got[o * in + j];
        worst = std::max(worst, std::abs(g - want) / scale);
        err_rounded += (g - want) * (g - want), err_unrounded += (g - plain) * (g - plain);
      }
    CHECK(worst < 1e-5);                          // F32 sums of exact products
    CHECK(err_rounded * 100 < err_unrounded);     // the factors really were rounded
  }
  Tensor<float, DynShape<2>> W(DynShape<2>(4, 5));
  const moe::StackedLoRA<float, cpu> wrong{random(3, 6), random(4, 3)};
  CHECK_THROWS_AS(ttmm::add_merged_delta_bf16(W, wrong), ShapeError);
}

TEST_CASE("ttmm dense merge with BF16 products: BF16 checkpoints only, within their precision, exact restore", "[ttmm][merge]") {
  ScratchDir tmp("ttmm_bf16_merge");
  for (const io::DType dtype : {io::DType::F32, io::DType::BF16}) {
    INFO("checkpoint " << io::dtype_name(dtype));
    auto [m, origin] = saved_and_mapped(tmp.path / "base", dtype, 7);
    const auto before = snapshot(m);
    // Deltas of a few percent of W, as trained LoRA experts make (checked below).
    auto e0 = ttmm_test::random_expert(m, 41), e1 = ttmm_test::random_expert(m, 42);
    const std::vector<models::WeightedAdapter<float>> ws{{&e0, 0.003}, {&e1, 0.002}};
    std::vector<std::vector<float>> f32, bf16;
    {
      ttmm::DenseMerge<> merge(m, ws, origin);
      CHECK(merge.bf16_modules() == 0);
      f32 = snapshot(m);
    }
    REQUIRE(bit_equal(snapshot(m), before));
    {
      ttmm::DenseMerge<> merge(m, ws, origin, ttmm::MergeArithmetic::bf16_products);
      CHECK(merge.bf16_modules() == (dtype == io::DType::BF16 ? 14u : 0u));
      bf16 = snapshot(m);
    }
    CHECK(bit_equal(snapshot(m), before));
    if (dtype == io::DType::F32) {
      CHECK(bit_equal(bf16, f32));  // F32 weights keep the F32 merge
      continue;
    }
    // Against the F32 merge, the BF16 products move the merged weights by less than storing them
    // in the checkpoint's own precision would.
    double moved = 0, stored = 0, delta = 0, w = 0;
    for (std::size_t i = 0; i < f32.size(); ++i)
      for (std::size_t j = 0; j < f32[i].size(); ++j) {
        const double x = f32[i][j];
        moved += (bf16[i][j] - x) * (bf16[i][j] - x);
        stored += (io::round_to_bf16(f32[i][j]) - x) * (io::round_to_bf16(f32[i][j]) - x);
        delta += (x - before[i][j]) * (x - before[i][j]), w += double(before[i][j]) * before[i][j];
      }
    INFO("delta / W " << std::sqrt(delta / w) << ", BF16 products moved W by " << std::sqrt(moved / w)
                      << ", rounding the merged W to BF16 by " << std::sqrt(stored / w));
    CHECK(delta < 0.05 * 0.05 * w);
    CHECK(moved > 0);
    CHECK(moved * 100 < stored);  // norms: 10x
  }
}
