// BF16-resident LLM weights (issue #14): the BF16 kernel against a double reference, and a model
// loaded with WeightPrecision::bf16 against the same BF16 checkpoint converted to F32 (identical
// weight values, only the summation order differs), greedy tokens, LoRA on top, and the errors.

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <span>
#include <string>
#include <unistd.h>
#include <vector>

#include "parity.hpp"
#include "ttmoe/models/llm.hpp"

using namespace ttmoe;
using models::LlamaConfig;

namespace {

LlamaConfig tiny(bool qwen, bool tied) {
  nlohmann::json j{{"model_type", qwen ? "qwen2" : "llama"}, {"vocab_size", 50}, {"hidden_size", 32},
                   {"intermediate_size", 48}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
                   {"num_key_value_heads", 2}, {"max_position_embeddings", 64}, {"rms_norm_eps", 1e-5},
                   {"rope_theta", 10000.0}, {"hidden_act", "silu"}, {"tie_word_embeddings", tied}};
  return LlamaConfig::from_json(j);
}

std::vector<float> random_values(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

/// A temporary folder removed on scope exit.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag)
      : path(std::filesystem::temp_directory_path() / ("ttmoe_bf16_" + tag + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

}  // namespace

/// Checks y = x W^T + bias + residual from one of linear_bf16's kernels against a double reference
/// on the BF16-rounded weights (and, with `round_x`, x rounded to BF16 the same way: nearest even);
/// the bound scales with the sum of the products' magnitudes, so only the summation order may differ.
template <class Kernel>
void check_bf16_linear(Kernel kernel, index_t rows, index_t in, index_t out, bool round_x = false) {
  const auto w = random_values(out * in, in), x = random_values(rows * in, rows + 100);
  const auto bias = random_values(out, 7), res = random_values(rows * out, 8);
  const io::Bf16Matrix W = io::Bf16Matrix::from_floats(w.data(), out, in);
  const auto wq = W.to_floats();
  // Rounding is to nearest: within half a BF16 ulp (2^-8 relative, 8 significant bits). Checked
  // element by element, reported once (one assertion per element made these cases slow).
  std::size_t bad_w = 0;
  for (std::size_t i = 0; i < w.size(); ++i) bad_w += std::abs(wq[i] - w[i]) > std::abs(w[i]) * 0x1p-8f;
  CHECK(bad_w == 0);
  std::vector<float> xq(x);
  if (round_x)
    for (auto& v : xq) v = io::bf16_to_float(io::float_to_bf16(v));
  std::vector<float> y(rows * out);
  kernel(x.data(), rows, W, bias.data(), res.data(), y.data());
  // Without bias and residual too (the GEMM's store then adds nothing).
  std::vector<float> plain(rows * out);
  kernel(x.data(), rows, W, nullptr, nullptr, plain.data());
  // The worst excess over the bound, with where it is (a failure names the first worst output).
  double worst = -1;
  index_t worst_r = 0, worst_o = 0;
  for (index_t r = 0; r < rows; ++r)
    for (index_t o = 0; o < out; ++o) {
      double s = 0, mag = 0;
      for (index_t k = 0; k < in; ++k) {
        const double p = double(xq[r * in + k]) * wq[o * in + k];
        s += p;
        mag += std::abs(p);
      }
      const double full = s + bias[o] + res[r * out + o];
      const double full_mag = mag + std::abs(bias[o]) + std::abs(res[r * out + o]);
      const double e_full = std::abs(y[r * out + o] - full) - (1e-6 * full_mag + 1e-7);
      const double e_plain = std::abs(plain[r * out + o] - s) - (1e-6 * mag + 1e-7);
      const double excess = std::isnan(e_full) || std::isnan(e_plain) ? HUGE_VAL : std::max(e_full, e_plain);
      if (excess > worst) worst = excess, worst_r = r, worst_o = o;
    }
  INFO("in " << in << " rows " << rows << " out " << out << " worst at r " << worst_r << " o " << worst_o);
  CHECK(worst <= 0);
}

TEST_CASE("bf16 linear kernel: rows, odd widths, bias and residual against a double reference", "[llm][bf16]") {
  const std::size_t threads_before = cpu_backend::num_threads();
  // Widths: odd (scalar path), even with SIMD tails (half = 9, 35), several vectors; output counts
  // below, at and off the decode path's 4-row passes; 1 and 2 threads split the outputs. Row counts
  // stay below kPackedGemmMinRows, so linear_bf16 runs the dot-product kernel (checked below).
  for (std::size_t nt : {std::size_t(1), std::size_t(2)})
    for (index_t in : {index_t(1), index_t(7), index_t(18), index_t(32), index_t(70), index_t(530)})
      for (index_t rows : {index_t(1), index_t(3), index_t(9)})
        for (index_t out : {index_t(3), index_t(37), index_t(64)}) {
          cpu_backend::set_num_threads(nt);
          INFO("threads " << nt);
          check_bf16_linear(cpu_backend::linear_bf16, rows, in, out);
        }
  cpu_backend::set_num_threads(threads_before);
}

TEST_CASE("bf16 embedding table: rows widened, bad ids and a recording tape refused", "[llm][bf16]") {
  const index_t V = 6, dim = 5;
  const auto w = random_values(std::size_t(V * dim), 31);
  nn::Embedding<float> emb(V, dim, 1);
  emb.adopt_weight_bf16(io::Bf16Matrix::from_floats(w.data(), V, dim), "tok_emb");
  CHECK_FALSE(emb.weight.defined());
  const auto ids = IndexTensor<DynShape<2>>::from_host(DynShape<2>(1, 3), {4, 0, 4});
  const auto rows = emb(ids);
  REQUIRE(rows.extent(2) == dim);
  const auto got = rows.to_vector();
  const std::int64_t picked[] = {4, 0, 4};
  for (index_t t = 0; t < 3; ++t)
    for (index_t k = 0; k < dim; ++k)
      CHECK(got[std::size_t(t * dim + k)] == io::bf16_to_float(io::float_to_bf16(w[std::size_t(picked[t] * dim + k)])));
  CHECK_THROWS_AS(emb(IndexTensor<DynShape<1>>::from_host(DynShape<1>(1), {V})), ValueError);
  {
    autograd::Tape tape;
    try {
      (void)emb(ids);
      FAIL("recording a BF16-resident embedding must throw");
    } catch (const ValueError& e) {
      CHECK_THAT(e.what(), Catch::Contains("nn::Embedding tok_emb"));
      CHECK_THAT(e.what(), Catch::Contains("inference only"));
    }
    autograd::NoGrad ng;  // inside the tape's scope but not recording: the lookup runs
    CHECK(emb(ids).to_vector() == got);
  }
}

#if defined(TTMOE_PACKED_GEMM)
TEST_CASE("bf16 linear through the packed GEMM: widened panels, tails, blocks and the row threshold", "[llm][bf16]") {
  const std::size_t threads_before = cpu_backend::num_threads();
  const index_t nr = cpu_backend::packed::NR, nc = cpu_backend::packed::NC;
  // The GEMM kernel itself, at any row count (1 to past the tile's MR and the pool's row split):
  // depths odd (the scalar last k after the pair gathers) and even, below and past one k-block
  // (KC = 384) with a remainder; output counts that end in a partial vector and a partial sliver,
  // and a whole sliver.
  for (std::size_t nt : {std::size_t(1), std::size_t(2)})
    for (index_t in : {index_t(1), index_t(7), index_t(18), index_t(385), index_t(800)})
      for (index_t rows : {index_t(1), index_t(5), index_t(13), index_t(50)})
        for (index_t out : {index_t(3), nr - 1, nr, 2 * nr + 5}) {
          cpu_backend::set_num_threads(nt);
          INFO("threads " << nt);
          check_bf16_linear(cpu_backend::linear_bf16_packed, rows, in, out);
        }
  // A large W goes through gemm_column_split: at depth 16400, 2 NC + nr + 3 outputs are several
  // column units, the last ragged and ending in a narrow sliver; bias and residual move with each
  // unit. 260 rows at that depth pass kColumnSplitMaxA, so they go in two row blocks.
  cpu_backend::set_num_threads(2);
  const index_t deep = 16400, wide = 2 * nc + nr + 3;
  using cpu_backend::packed::WideTile;
  REQUIRE(cpu_backend::packed::splits_columns<WideTile, std::uint16_t>(7, wide, deep));
  REQUIRE(cpu_backend::packed::splits_columns<WideTile, std::uint16_t>(260, 64, deep));
  REQUIRE(260 * deep > cpu_backend::packed::kColumnSplitMaxA);
  check_bf16_linear(cpu_backend::linear_bf16_packed, 7, deep, wide);
  check_bf16_linear(cpu_backend::linear_bf16_packed, 260, deep, 64);
  cpu_backend::set_num_threads(threads_before);
}

TEST_CASE("packed GEMM: BF16 bits widened while packing give exactly the F32 GEMM on the widened values", "[llm][bf16]") {
  // The packing variant is the only difference, so the results must be bit-identical: B transposed
  // (a weight [N, K], as linear_bf16 uses it) and not ([K, N]), odd and even depths; the last case
  // goes through gemm_column_split with both (a ragged last unit, an odd depth's last k-block).
  const std::size_t threads_before = cpu_backend::num_threads();
  cpu_backend::set_num_threads(2);
  const index_t nc = cpu_backend::packed::NC, nr = cpu_backend::packed::NR;
  struct Case { index_t M, N, K; };
  for (const Case c : {Case{50, 2 * nr + 5, 385}, Case{13, nr - 1, 8}, Case{9, 2 * nc + nr + 3, 16399}})
    for (bool tb : {true, false}) {
      INFO("M " << c.M << " N " << c.N << " K " << c.K << " tb " << tb);
      const auto a = random_values(c.M * c.K, 21), b = random_values(c.N * c.K, 22);
      const io::Bf16Matrix B = io::Bf16Matrix::from_floats(b.data(), tb ? c.N : c.K, tb ? c.K : c.N);
      const auto widened = B.to_floats();
      const index_t ldb = tb ? c.K : c.N;
      std::vector<float> from_bits(c.M * c.N), from_floats(c.M * c.N);
      cpu_backend::packed::gemm(false, tb, c.M, c.N, c.K, 1.f, a.data(), c.K, B.bits, ldb, 0.f, from_bits.data(), c.N);
      cpu_backend::packed::gemm(false, tb, c.M, c.N, c.K, 1.f, a.data(), c.K, widened.data(), ldb, 0.f,
                                from_floats.data(), c.N);
      CHECK(from_bits == from_floats);
      // And both against a double reference (so neither is wrong in the same way).
      double worst = 0;
      for (index_t m = 0; m < c.M; ++m)
        for (index_t n = 0; n < c.N; ++n) {
          double s = 0, mag = 0;
          for (index_t k = 0; k < c.K; ++k) {
            const double p = double(a[m * c.K + k]) * widened[tb ? n * c.K + k : k * c.N + n];
            s += p, mag += std::abs(p);
          }
          worst = std::max(worst, std::abs(from_bits[m * c.N + n] - s) / (mag + 1e-30));
        }
      CHECK(worst <= 1e-6);
    }
  // The chooser either side of the threshold: the same inputs through linear_bf16 give exactly
  // what the kernel it should pick gives (the two kernels sum in different orders, so they differ
  // in the last bits, which is what tells them apart here).
  const index_t in = 530, out = 2 * nr + 5;
  for (index_t rows : {cpu_backend::kPackedGemmMinRows - 1, cpu_backend::kPackedGemmMinRows}) {
    const auto w = random_values(out * in, 11), x = random_values(rows * in, 12);
    const io::Bf16Matrix W = io::Bf16Matrix::from_floats(w.data(), out, in);
    std::vector<float> chosen(rows * out), dot(rows * out), gemm(rows * out);
    cpu_backend::linear_bf16(x.data(), rows, W, nullptr, nullptr, chosen.data());
    cpu_backend::linear_bf16_dot(x.data(), rows, W, nullptr, nullptr, dot.data());
    cpu_backend::linear_bf16_packed(x.data(), rows, W, nullptr, nullptr, gemm.data());
    INFO("rows " << rows);
    REQUIRE(dot != gemm);  // otherwise this check could not tell the kernels apart
    CHECK(chosen == (rows >= cpu_backend::kPackedGemmMinRows ? gemm : dot));
  }
  cpu_backend::set_num_threads(threads_before);
}
#endif

/// Marks a case skipped for CTest (tests/CMakeLists.txt gives every case SKIP_REGULAR_EXPRESSION
/// "TTMOE_SKIPPED:"; Catch2 2 has no SKIP) and says why; the case must return right after, asserting nothing.
void report_skipped(const char* why) { std::printf("TTMOE_SKIPPED: %s\n", why); }

TEST_CASE("AVX512-BF16 vdpbf16ps GEMM and GEMV: rounded x times BF16 W against a double reference, edge shapes, epilogue, threads",
          "[llm][bf16][avx512bf16]") {
#if defined(TTMOE_BF16DOT_GEMM)
  const std::size_t threads_before = cpu_backend::num_threads();
  const index_t mr = cpu_backend::packed::WideTile::MR, nr = cpu_backend::packed::WideTile::NR;
  // Depths below a pair (1), one pair, odd (the last pair's high half is 0), past a group of 8
  // pairs with a remainder, odd, and past one k-block (2 KCP values) odd; rows below, at and off the tile's
  // MR; outputs below a vector (1, 15), one vector, a sliver, 64 (the 6 x 64 tile), and ragged
  // units. The kernel is called directly, so small row counts run it too.
  // Two threads (one thread computes the same sums in the same order: checked bit for bit below).
  cpu_backend::set_num_threads(2);
  for (index_t in : {index_t(1), index_t(2), index_t(3), index_t(33), index_t(1601), 2 * cpu_backend::bf16dot::KCP + 53})
    for (index_t rows : {index_t(1), mr - 1, 2 * mr + 3})
      for (index_t out : {index_t(1), index_t(15), index_t(16), nr, index_t(64), 2 * cpu_backend::packed::kColumnUnit + 5})
        check_bf16_linear(cpu_backend::bf16dot::linear, rows, in, out, true);
  // The batch-1 GEMV: depths below, at and past one 32-value step (a masked tail), output counts
  // around 4-row passes.
  auto gemv = [](const float* x, index_t rows, const io::Bf16Matrix& w, const float* bias, const float* residual,
                 float* y) {
    REQUIRE(rows == 1);
    cpu_backend::bf16dot::gemv(x, w, bias, residual, y);
  };
  for (std::size_t nt : {std::size_t(1), std::size_t(2)})
    for (index_t in : {index_t(1), index_t(31), index_t(32), index_t(33), index_t(1601)})
      for (index_t out : {index_t(1), index_t(4), index_t(5), index_t(37)}) {
        cpu_backend::set_num_threads(nt);
        check_bf16_linear(gemv, 1, in, out, true);
      }
  // Every pass shape sums each row in the same order (two chains, even and odd steps), so 1, 2, 4
  // and 8 rows per pass, with or without a prefetch, give gemv_rows' bits, over a range that starts
  // and ends off a pass and a depth with a masked tail.
  {
    namespace bd = cpu_backend::bf16dot;
    const index_t n_out = 43, depth = 1601;
    const auto wv = random_values(n_out * depth, 51), xv = random_values(depth, 52), bv = random_values(n_out, 53);
    const io::Bf16Matrix Wg = io::Bf16Matrix::from_floats(wv.data(), n_out, depth);
    std::vector<std::uint16_t> xb(std::size_t((depth + bd::kGemvStep - 1) / bd::kGemvStep * bd::kGemvStep));
    bd::round_row(xv.data(), depth, xb.data());
    std::vector<float> want(n_out, -1.f);
    bd::gemv_rows(xb.data(), Wg, bv.data(), nullptr, want.data(), 3, 42);
    using Rows = void (*)(const std::uint16_t*, const io::Bf16Matrix&, const float*, const float*, float*, index_t, index_t);
    for (Rows f : {Rows(&bd::gemv_rows_by<1>), Rows(&bd::gemv_rows_by<2>), Rows(&bd::gemv_rows_by<4>), Rows(&bd::gemv_rows_by<8>),
                   Rows(&bd::gemv_rows_by<4, 1024>)}) {
      std::vector<float> got(n_out, -1.f);
      f(xb.data(), Wg, bv.data(), nullptr, got.data(), 3, 42);
      CHECK(got == want);
    }
    CHECK(want[2] == -1.f);  // rows outside [3, 42) untouched
    CHECK(want[42] == -1.f);
  }
  // 90 rows at depth 100000 pass kColumnSplitMaxA words of packed x (50000 pairs: 80 rows per
  // block) and go in two row blocks (bias and residual move with them).
  const index_t deep = 100000, rows = 90, out = 5;
  REQUIRE(rows * ((deep + 1) / 2) > cpu_backend::packed::kColumnSplitMaxA);
  cpu_backend::set_num_threads(2);
  check_bf16_linear(cpu_backend::bf16dot::linear, rows, deep, out, true);
  // Threads split the columns and each output is summed in the same order, so 1 and 2 threads give
  // identical results.
  const auto w = random_values(300 * 770, 41), x = random_values(97 * 770, 42), res = random_values(97 * 300, 43);
  const auto bias = random_values(300, 44);
  const io::Bf16Matrix W = io::Bf16Matrix::from_floats(w.data(), 300, 770);
  std::vector<float> one(97 * 300), two(97 * 300);
  cpu_backend::bf16dot::linear(x.data(), 97, W, bias.data(), res.data(), two.data());
  cpu_backend::set_num_threads(1);
  cpu_backend::bf16dot::linear(x.data(), 97, W, bias.data(), res.data(), one.data());
  CHECK(one == two);
  cpu_backend::set_num_threads(threads_before);
#else
  report_skipped("this build has no __AVX512BF16__ (the vdpbf16ps GEMM is not compiled)");
#endif
}

TEST_CASE("bf16 activations: linear_bf16 rounds x to BF16 either side of the GEMM threshold", "[llm][bf16]") {
  // Runs on every CPU. AVX512-BF16 builds run the vdpbf16ps GEMV at 1 row and the GEMM from
  // bf16dot::kMinRows; other row counts (and other CPUs at any row count) send the rounded x through
  // the exact kernels. Either way the result is the double reference on rounded x and W up to
  // summation order.
  const std::size_t threads_before = cpu_backend::num_threads();
  cpu_backend::set_num_threads(2);
  auto rounded = [](const float* x, index_t rows, io::Bf16Matrix w, const float* bias, const float* residual, float* y) {
    w.arithmetic = io::Bf16Arithmetic::bf16_activations;
    cpu_backend::linear_bf16(x, rows, w, bias, residual, y);
  };
#if defined(TTMOE_BF16DOT_GEMM)
  const index_t gemm_rows = cpu_backend::bf16dot::kMinRows;
#elif defined(TTMOE_PACKED_GEMM)
  const index_t gemm_rows = cpu_backend::kPackedGemmMinRows;
#else
  const index_t gemm_rows = 80;  // no GEMM in this build: any row count
#endif
  for (index_t rows : {index_t(1), index_t(2), gemm_rows - 1, gemm_rows, index_t(100)})
    for (index_t in : {index_t(7), index_t(530)}) check_bf16_linear(rounded, rows, in, 67, true);
  // The option is honoured: exact and rounded differ, and exact is the default.
  const index_t rows = 100, in = 530, out = 67;
  const auto w = random_values(out * in, 51), x = random_values(rows * in, 52);
  io::Bf16Matrix W = io::Bf16Matrix::from_floats(w.data(), out, in);
  CHECK(W.arithmetic == io::Bf16Arithmetic::exact);
  std::vector<float> exact(rows * out), fast(rows * out);
  cpu_backend::linear_bf16(x.data(), rows, W, nullptr, nullptr, exact.data());
  W.arithmetic = io::Bf16Arithmetic::bf16_activations;
  cpu_backend::linear_bf16(x.data(), rows, W, nullptr, nullptr, fast.data());
  CHECK(exact != fast);
  CHECK(models::parse_bf16_arithmetic("exact") == io::Bf16Arithmetic::exact);
  CHECK(models::parse_bf16_arithmetic("bf16") == io::Bf16Arithmetic::bf16_activations);
  CHECK_THROWS_AS(models::parse_bf16_arithmetic("fp8"), ValueError);
  cpu_backend::set_num_threads(threads_before);
}

TEST_CASE("bf16 batch-1 group: one parallel region gives each weight's linear_bf16 output bit for bit", "[llm][bf16]") {
  // The decode step's q | k | v and gate | up run as one group (cpu_backend::linear_bf16_gemv_group,
  // rows in items from a shared counter); each output must be exactly what the one-weight kernels
  // give at one row, whichever arithmetic, thread count, part sizes (not multiples of the 4-row
  // pass or of an item) and biases, and an odd width or mixed arithmetics must fall back to the
  // weights one by one.
  const std::size_t threads_before = cpu_backend::num_threads();
  using A = io::Bf16Arithmetic;
  for (std::size_t nt : {std::size_t(1), std::size_t(2)})
    for (index_t in : {index_t(7), index_t(64), index_t(530), index_t(8192)})  // 8192: several items per weight
      for (int mode = 0; mode < 3; ++mode) {  // exact, bf16, mixed (first exact, the rest bf16)
        cpu_backend::set_num_threads(nt);
        const std::array<index_t, 3> outs{37, 5, 70};
        const auto x = random_values(std::size_t(in), 90 + in);
        std::vector<io::Bf16Matrix> ws;
        std::vector<std::vector<float>> biases;
        for (std::size_t i = 0; i < outs.size(); ++i) {
          const auto w = random_values(std::size_t(outs[i] * in), 100 + i);
          ws.push_back(io::Bf16Matrix::from_floats(w.data(), outs[i], in));
          ws.back().arithmetic = mode == 0 || (mode == 2 && i == 0) ? A::exact : A::bf16_activations;
          biases.push_back(i == 1 ? std::vector<float>{} : random_values(std::size_t(outs[i]), 200 + i));
        }
        std::vector<std::vector<float>> got(outs.size()), want(outs.size());
        std::vector<cpu_backend::Bf16GemvPart> parts;
        for (std::size_t i = 0; i < outs.size(); ++i) {
          got[i].assign(std::size_t(outs[i]), -1.f);
          want[i].assign(std::size_t(outs[i]), -2.f);
          const float* b = biases[i].empty() ? nullptr : biases[i].data();
          // The one-weight kernels under their own static split (linear_bf16 itself now sends a
          // single row through the group).
          if (ws[i].arithmetic == A::exact) cpu_backend::linear_bf16_exact(x.data(), 1, ws[i], b, nullptr, want[i].data());
          else cpu_backend::linear_bf16_rounded(x.data(), 1, ws[i], b, nullptr, want[i].data());
          parts.push_back({&ws[i], b, got[i].data()});
        }
        cpu_backend::linear_bf16_gemv_group(x.data(), parts);
        INFO("threads " << nt << " in " << in << " mode " << mode);
        for (std::size_t i = 0; i < outs.size(); ++i) CHECK(got[i] == want[i]);
      }
  // The tensor entry point: one row grouped, three rows weight by weight, a wrong width named.
  cpu_backend::set_num_threads(2);
  const index_t in = 96;
  const auto w0 = random_values(std::size_t(40 * in), 301), w1 = random_values(std::size_t(24 * in), 302);
  const io::Bf16Matrix W0 = io::Bf16Matrix::from_floats(w0.data(), 40, in), W1 = io::Bf16Matrix::from_floats(w1.data(), 24, in);
  const Tensor<float, DynShape<1>> none;
  const auto bias = Tensor<float, DynShape<1>>::from_host(DynShape<1>(24), std::vector<float>(24, 0.5f));
  for (index_t rows : {index_t(1), index_t(3)}) {
    const auto xv = random_values(std::size_t(rows * in), 303);
    const auto x = Tensor<float, DynShape<3>>::from_host(DynShape<3>(1, rows, in), xv);
    const auto [y0, y1] = linear_bf16_group(x, std::array<const io::Bf16Matrix*, 2>{&W0, &W1},
                                            std::array<const Tensor<float, DynShape<1>>*, 2>{&none, &bias});
    CHECK((y0.extent(1) == rows && y0.extent(2) == 40 && y1.extent(1) == rows && y1.extent(2) == 24));
    CHECK(y0.to_vector() == linear_bf16(x, W0, none).to_vector());
    CHECK(y1.to_vector() == linear_bf16(x, W1, bias).to_vector());
  }
  const auto narrow_x = Tensor<float, DynShape<2>>::from_host(DynShape<2>(1, in - 2), random_values(std::size_t(in - 2), 304));
  CHECK_THROWS_AS(linear_bf16_group(narrow_x, std::array<const io::Bf16Matrix*, 1>{&W0},
                                    std::array<const Tensor<float, DynShape<1>>*, 1>{&none}),
                  ShapeError);
  cpu_backend::set_num_threads(threads_before);
}

TEST_CASE("bf16-resident llama with bf16 activations: logits within the activation rounding of the f32 model", "[llm][bf16]") {
  // Rounding an activation to BF16 (8 significant bits, nearest even) changes it by at most
  // u = 2^-9 relative, so each Linear's output moves by at most u sum |x w|: for inputs of mixed
  // sign, u times a few |y|. A decoder layer passes through 3 Linears in sequence on the attention
  // side and 2 on the MLP side (+ the head), and the residual stream adds rather than compounds, so
  // over 2 layers the logits may move by about (2 x 5 + 1) u ~ 0.021 of their scale in the worst
  // case; random errors partly cancel (measured 0.0011 and 0.0022 here, a tenth). The bound is that worst
  // case; the floor (> 1e-4) shows the option took effect (exact runs stay within 2e-6, above).
  for (bool tied : {false, true}) {
    INFO((tied ? "tied" : "untied"));
    TempDir dir(std::string("ra") + (tied ? "t" : "u"));
    models::LlamaForCausalLM<float> m(tiny(false, tied), 5);
    models::save_llama(m, dir.path, io::DType::BF16);
    auto f32 = models::load_llama<float>(dir.path);
    auto b16 = models::load_llama<float>(dir.path, models::WeightPrecision::bf16);
    CHECK(b16.model.layers[1].mlp.down_proj.weight_bf16.arithmetic == io::Bf16Arithmetic::exact);
    models::set_bf16_arithmetic(b16, io::Bf16Arithmetic::bf16_activations);
    CHECK(b16.model.layers[1].mlp.down_proj.weight_bf16.arithmetic == io::Bf16Arithmetic::bf16_activations);
    CHECK(b16.model.layers[0].self_attn.q_proj.weight_bf16.arithmetic == io::Bf16Arithmetic::bf16_activations);
    CHECK(b16.model.embed_tokens.weight_bf16.arithmetic == io::Bf16Arithmetic::bf16_activations);
    // 2 x 48 = 96 rows: past every GEMM threshold, so AVX512-BF16 builds run the vdpbf16ps GEMM.
    std::vector<std::int64_t> id_values(96);
    for (std::size_t i = 0; i < id_values.size(); ++i) id_values[i] = std::int64_t((i * 7 + 3) % 50);
#if defined(TTMOE_BF16DOT_GEMM)
    REQUIRE(index_t(id_values.size()) >= cpu_backend::bf16dot::kMinRows);
#endif
    const auto ids = IndexTensor<DynShape<2>>::from_host(DynShape<2>(2, 48), id_values);
    const double err = test::normwise_rel_error(b16.forward(ids), f32.forward(ids));
    INFO("normwise relative error " << err);
    CHECK(err <= (2 * 5 + 1) * 0x1p-9);
    CHECK(err > 1e-4);
  }
}

TEST_CASE("bf16-resident llama: logits, cache and greedy tokens equal the bf16 checkpoint in f32", "[llm][bf16]") {
  for (bool qwen : {false, true})
    for (bool tied : {false, true}) {
      INFO((qwen ? "qwen2" : "llama") << (tied ? " tied" : " untied"));
      TempDir dir(std::string(qwen ? "q" : "l") + (tied ? "t" : "u"));
      models::LlamaForCausalLM<float> m(tiny(qwen, tied), 5);
      models::save_llama(m, dir.path, io::DType::BF16);
      auto f32 = models::load_llama<float>(dir.path);
      auto b16 = models::load_llama<float>(dir.path, models::WeightPrecision::bf16);
      CHECK(b16.model.layers[1].mlp.down_proj.weight_bf16.defined());
      CHECK_FALSE(b16.model.layers[1].mlp.down_proj.weight.defined());  // the F32 copy is freed
      CHECK(b16.lm_head.weight_bf16.defined() == !tied);
      // The same weight values: BF16 -> F32 is exact, so only the summation order differs.
      CHECK(b16.model.layers[0].self_attn.q_proj.weight_bf16.to_floats() ==
            f32.model.layers[0].self_attn.q_proj.weight.to_vector());

      auto ids = IndexTensor<DynShape<2>>::from_host(DynShape<2>(2, 6), {1, 4, 9, 16, 25, 36, 3, 1, 4, 1, 5, 9});
      const auto want = f32.forward(ids);
      const double err = test::normwise_rel_error(b16.forward(ids), want);
      INFO("forward: normwise relative error " << err);
      CHECK(err <= 2e-6);
      auto cache = b16.make_cache(2, 8);
      const double cerr = test::normwise_rel_error(b16.logits(b16.forward_cached(ids, cache)), want);
      CHECK(cerr <= 2e-6);

      models::GenerationOptions greedy;
      greedy.max_new_tokens = 32;
      const std::vector<std::vector<std::int64_t>> prompts{{1, 2, 3}, {7, 8}};
      const auto g32 = models::generate(f32, prompts, greedy), g16 = models::generate(b16, prompts, greedy);
      REQUIRE(g16.tokens[0].size() == 32);
      CHECK(g16.tokens == g32.tokens);
    }
}

TEST_CASE("bf16-resident llama: unmerged LoRA on top, merged LoRA and training are clear errors", "[llm][bf16][peft]") {
  TempDir dir("lora");
  models::LlamaForCausalLM<float> m(tiny(false, false), 9);
  models::save_llama(m, dir.path, io::DType::BF16);
  auto f32 = models::load_llama<float>(dir.path);
  auto b16 = models::load_llama<float>(dir.path, models::WeightPrecision::bf16);
  models::LoraAdapterConfig cfg;
  cfg.r = 3;
  cfg.lora_alpha = 5;
  cfg.target_modules = {"q_proj", "v_proj", "o_proj", "gate_proj", "down_proj"};
  auto a = models::make_lora_adapter(f32, cfg, 1);
  std::uint64_t seed = 20;
  for (auto& [name, mod] : a.modules)
    for (auto* f : {&mod.lora_A, &mod.lora_B})
      f->weight = Tensor<float, DynShape<2>>::from_host(
          DynShape<2>(f->weight.extent(0), f->weight.extent(1)),
          random_values(std::size_t(f->weight.numel()), ++seed));
  auto ids = IndexTensor<DynShape<2>>::from_host(DynShape<2>(1, 7), {3, 1, 4, 1, 5, 9, 2});
  const auto base = b16.forward(ids).to_vector();
  {
    models::AttachedAdapters<float> want_on(f32, {{&a, 0.8}}, models::LoraMode::unmerged);
    models::AttachedAdapters<float> on(b16, {{&a, 0.8}}, models::LoraMode::unmerged);
    const auto want = f32.forward(ids);
    CHECK(test::normwise_rel_error(want, b16.forward(ids)) <= 2e-6);
    CHECK(b16.forward(ids).to_vector() != base);  // the adapters matter
  }
  CHECK(b16.forward(ids).to_vector() == base);  // removal restores the model bit for bit

  try {
    models::AttachedAdapters<float> merged(b16, {{&a, 0.8}}, models::LoraMode::merged);
    FAIL("merging into a BF16-resident weight must throw");
  } catch (const ValueError& e) {
    CHECK_THAT(e.what(), Catch::Contains("keeps its weight as BF16"));
  }
  CHECK(b16.forward(ids).to_vector() == base);  // the refused attachment changed nothing

  try {
    autograd::Tape tape;
    (void)b16.forward(ids);
    FAIL("recording a BF16-resident model must throw");
  } catch (const ValueError& e) {
    // The embedding lookup is the model's first step, so its table is the layer named.
    CHECK_THAT(e.what(), Catch::Contains("nn::Embedding model.embed_tokens"));
    CHECK_THAT(e.what(), Catch::Contains("inference only"));
  }
  {
    const auto x = Tensor<float, DynShape<2>>::from_host(DynShape<2>(2, 32), random_values(64, 77));
    autograd::Tape tape;
    try {
      (void)b16.model.layers[0].self_attn.q_proj(x);
      FAIL("recording a BF16-resident linear must throw");
    } catch (const ValueError& e) {
      CHECK_THAT(e.what(), Catch::Contains("nn::Linear model.layers.0.self_attn.q_proj"));
      CHECK_THAT(e.what(), Catch::Contains("inference only"));
    }
  }
  CHECK_THROWS_WITH(models::make_lora_adapter(b16, cfg, 1), Catch::Contains("keeps its weight as BF16"));
  CHECK_THROWS_WITH(models::parse_weight_precision("fp8"), Catch::Contains("'fp8'"));
  CHECK(models::parse_weight_precision("bf16") == models::WeightPrecision::bf16);
}

TEST_CASE("bf16 load maps a bf16 file without copies, other dtypes and bad files are handled", "[llm][bf16]") {
  for (bool tied : {false, true}) {
    INFO((tied ? "tied" : "untied"));
    TempDir dir(tied ? "zt" : "zu");
    models::LlamaForCausalLM<float> m(tiny(false, tied), 11);
    models::save_llama(m, dir.path, io::DType::BF16);
    auto b16 = models::load_llama<float>(dir.path, models::WeightPrecision::bf16);
    // Every matrix is a view sharing ONE owner (the mapped file), not a converted vector each.
    const auto& owner = b16.model.embed_tokens.weight_bf16.owner;
    REQUIRE(owner != nullptr);
    CHECK_FALSE(b16.model.embed_tokens.weight.defined());  // no F32 table, tied head included
    for (const auto& l : b16.model.layers)
      for (const auto* lin : {&l.self_attn.q_proj, &l.self_attn.k_proj, &l.self_attn.v_proj, &l.self_attn.o_proj,
                              &l.mlp.gate_proj, &l.mlp.up_proj, &l.mlp.down_proj}) {
        CHECK(lin->weight_bf16.owner == owner);
        CHECK_FALSE(lin->weight.defined());
      }
    if (!tied) CHECK(b16.lm_head.weight_bf16.owner == owner);
    // The views sit inside the file at distinct places: the embedding is not the q_proj.
    CHECK(b16.model.embed_tokens.weight_bf16.bits != b16.model.layers[0].self_attn.q_proj.weight_bf16.bits);

    // Tied BF16 head (the embedding bits) against the F32 model rounded the same way.
    auto f32 = models::load_llama<float>(dir.path);
    auto ids = IndexTensor<DynShape<2>>::from_host(DynShape<2>(1, 5), {2, 7, 1, 8, 2});
    CHECK(test::normwise_rel_error(b16.forward(ids), f32.forward(ids)) <= 2e-6);
    CHECK(b16.model.embed_tokens.weight_bf16.to_floats() == f32.model.embed_tokens.weight.to_vector());
  }
  {
    // An F32 file is rounded to BF16, one owned copy per matrix.
    TempDir dir("zf");
    models::LlamaForCausalLM<float> m(tiny(true, true), 12);
    models::save_llama(m, dir.path, io::DType::F32);
    auto b16 = models::load_llama<float>(dir.path, models::WeightPrecision::bf16);
    const auto& q = b16.model.layers[0].self_attn.q_proj.weight_bf16;
    CHECK(q.owner != b16.model.layers[0].self_attn.k_proj.weight_bf16.owner);
    const auto want = m.model.layers[0].self_attn.q_proj.weight.to_vector();
    const auto got = q.to_floats();
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == io::bf16_to_float(io::float_to_bf16(want[i])));
    auto ids = IndexTensor<DynShape<2>>::from_host(DynShape<2>(1, 4), {3, 1, 4, 1});
    CHECK(test::normwise_rel_error(b16.forward(ids), m.forward(ids)) <= 2e-2);  // BF16 rounding of the weights
  }
  {
    // A config that disagrees with the file: one error naming every mis-shaped matrix.
    TempDir dir("zbad");
    models::LlamaForCausalLM<float> m(tiny(false, false), 13);
    models::save_llama(m, dir.path, io::DType::BF16);
    auto c = tiny(false, false);
    c.intermediate_size = 40;
    std::ofstream(dir.path / "config.json") << c.to_json().dump();
    try {
      (void)models::load_llama<float>(dir.path, models::WeightPrecision::bf16);
      FAIL("a mis-shaped checkpoint must throw");
    } catch (const nn::CheckpointError& e) {
      CHECK_THAT(e.what(), Catch::Contains("model.layers.0.mlp.gate_proj.weight"));
      CHECK_THAT(e.what(), Catch::Contains("model.layers.1.mlp.down_proj.weight"));
    }
  }
  {
    // Both kinds of fault at once, a missing matrix and faults in what load_state reads (a missing
    // and a mis-shaped norm, a tensor no parameter has): ONE error lists all four (issue 14).
    TempDir dir("zboth");
    models::LlamaForCausalLM<float> m(tiny(false, false), 14);
    models::save_llama(m, dir.path, io::DType::BF16);
    const auto file = dir.path / "model.safetensors";
    io::SafetensorsWriter w;
    {
      const io::SafetensorsFile src(file);
      for (const auto& key : src.names()) {
        if (key == "model.layers.1.mlp.up_proj.weight" || key == "model.norm.weight") continue;
        const io::TensorInfo& t = src.info(key);
        if (key == "model.layers.0.input_layernorm.weight") {
          const std::vector<float> short_norm(31, 1.f);
          w.add(key, std::span<const float>(short_norm), {31});
        } else {
          w.add(key, t.dtype, t.shape, t.bytes.data());
        }
      }
      const std::vector<float> extra(4, 0.f);
      w.add("model.extra.weight", std::span<const float>(extra), {4});
    }
    w.write(file);
    try {
      (void)models::load_llama<float>(dir.path, models::WeightPrecision::bf16);
      FAIL("a checkpoint with both kinds of fault must throw");
    } catch (const nn::CheckpointError& e) {
      const auto& p = e.problems();
      CHECK(p.size() == 4);
      auto listed = [&](const std::string& what, const std::string& key) {
        return std::any_of(p.begin(), p.end(), [&](const std::string& l) {
          return l.find(what) != std::string::npos && l.find("'" + key + "'") != std::string::npos;
        });
      };
      CHECK(listed("missing key", "model.layers.1.mlp.up_proj.weight"));
      CHECK(listed("missing key", "model.norm.weight"));
      CHECK(listed("shape mismatch", "model.layers.0.input_layernorm.weight"));
      CHECK(listed("unexpected key", "model.extra.weight"));
    }
  }
}

TEST_CASE("bf16 load frees its own transient pool blocks and keeps the ones cached before it", "[llm][bf16]") {
  // Layers big enough for the host pool (F32 matrices of 256 KiB and more), so the load's transient
  // F32 weights go through it.
  auto c = tiny(false, true);
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 64;
  c.num_hidden_layers = 1;
  TempDir dir("zpool");
  {
    models::LlamaForCausalLM<float> m(c, 15);
    models::save_llama(m, dir.path, io::DType::BF16);
  }
  auto& pool = cpu::memory_pool();
  pool.release_cached();  // start from an empty cache: what is cached below is ours
  // A block freed elsewhere (4 MiB, a size class no layer weight of this model uses), cached for
  // its owner's next step.
  const index_t held = index_t(1) << 20;
  void* block = nullptr;
  {
    Tensor<float, DynShape<1>> t{DynShape<1>(held)};
    block = t.data();
  }
  const auto before = pool.stats();
  REQUIRE(before.cached_bytes() >= std::size_t(held) * sizeof(float));
  auto b16 = models::load_llama<float>(dir.path, models::WeightPrecision::bf16);
  const auto after = pool.stats();
  CHECK(after.raw_allocations > before.raw_allocations);  // the load did use the pool
  CHECK(after.cached_bytes() == before.cached_bytes());   // and gave back exactly what it added
  // The block cached before the load is still there: the next tensor of its size reuses it, with no
  // new raw allocation.
  Tensor<float, DynShape<1>> again{DynShape<1>(held)};
  CHECK(again.data() == block);
  CHECK(pool.stats().raw_allocations == after.raw_allocations);
}

TEST_CASE("bf16 weights copied into huge pages: the same bits across chunks, the mapping still readable", "[llm][bf16]") {
  // 40 MiB of BF16 in a file: more than one of copy_to_huge_pages' 32 MiB chunks, and past the 2 MiB
  // from which the copy asks for huge pages.
  TempDir dir("hp");
  std::filesystem::create_directories(dir.path);
  const index_t rows = 640, cols = 32768;
  std::vector<std::uint16_t> bits(std::size_t(rows * cols));
  std::mt19937 rng(21);
  for (auto& b : bits) b = std::uint16_t(rng());
  const auto file = dir.path / "w.bin";
  {
    std::ofstream out(file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bits.data()), std::streamsize(bits.size() * 2));
  }
  auto mapped = std::make_shared<io::detail::MappedFile>(file);
  auto view = io::Bf16Matrix::view(mapped, reinterpret_cast<const std::uint16_t*>(mapped->bytes().data()), rows, cols);
  view.arithmetic = io::Bf16Arithmetic::bf16_activations;
  for (bool release : {false, true}) {
    INFO("release_source " << release);
    const auto copy = io::copy_to_huge_pages(view, release);
    CHECK(copy.bits != view.bits);
    CHECK(copy.owner != view.owner);
    CHECK(copy.rows == rows);
    CHECK(copy.cols == cols);
    CHECK(copy.arithmetic == io::Bf16Arithmetic::bf16_activations);
    CHECK(std::equal(bits.begin(), bits.end(), copy.bits));
    // Released pages come back from the file, unchanged.
    CHECK(std::equal(bits.begin(), bits.end(), view.bits));
  }
  CHECK_FALSE(io::copy_to_huge_pages(io::Bf16Matrix{}).defined());  // nothing to copy
}

TEST_CASE("bf16 load into huge pages: own storage, bit-identical logits and tokens to the mapped load", "[llm][bf16]") {
  CHECK(models::parse_bf16_storage("mapped") == models::Bf16Storage::mapped);
  CHECK(models::parse_bf16_storage("huge_pages") == models::Bf16Storage::huge_pages);
  CHECK_THROWS_AS(models::parse_bf16_storage("huge"), ValueError);
  for (bool tied : {false, true}) {
    INFO((tied ? "tied" : "untied"));
    TempDir dir(tied ? "ht" : "hu");
    models::LlamaForCausalLM<float> m(tiny(false, tied), 17);
    models::save_llama(m, dir.path, io::DType::BF16);
    auto mapped = models::load_llama<float>(dir.path, models::WeightPrecision::bf16);
    auto copied = models::load_llama<float>(dir.path, models::WeightPrecision::bf16, models::Bf16Storage::huge_pages);
    // Every matrix is its own copy: no view into the mapping is left, and the values are the file's.
    auto same_copy = [&](const io::Bf16Matrix& a, const io::Bf16Matrix& b) {
      CHECK(b.defined());
      CHECK(b.owner != a.owner);
      CHECK(b.bits != a.bits);
      CHECK(b.to_floats() == a.to_floats());
    };
    same_copy(mapped.model.embed_tokens.weight_bf16, copied.model.embed_tokens.weight_bf16);
    if (!tied) same_copy(mapped.lm_head.weight_bf16, copied.lm_head.weight_bf16);
    for (std::size_t i = 0; i < mapped.model.layers.size(); ++i) {
      const auto& a = mapped.model.layers[i];
      const auto& b = copied.model.layers[i];
      same_copy(a.self_attn.q_proj.weight_bf16, b.self_attn.q_proj.weight_bf16);
      same_copy(a.self_attn.k_proj.weight_bf16, b.self_attn.k_proj.weight_bf16);
      same_copy(a.self_attn.v_proj.weight_bf16, b.self_attn.v_proj.weight_bf16);
      same_copy(a.self_attn.o_proj.weight_bf16, b.self_attn.o_proj.weight_bf16);
      same_copy(a.mlp.gate_proj.weight_bf16, b.mlp.gate_proj.weight_bf16);
      same_copy(a.mlp.up_proj.weight_bf16, b.mlp.up_proj.weight_bf16);
      same_copy(a.mlp.down_proj.weight_bf16, b.mlp.down_proj.weight_bf16);
    }
    // The same kernels on the same bits: logits bit for bit, prefill and decode, both arithmetics.
    for (auto arithmetic : {io::Bf16Arithmetic::exact, io::Bf16Arithmetic::bf16_activations}) {
      models::set_bf16_arithmetic(mapped, arithmetic);
      models::set_bf16_arithmetic(copied, arithmetic);
      auto ids = IndexTensor<DynShape<2>>::from_host(DynShape<2>(2, 5), {2, 7, 1, 8, 2, 8, 1, 8, 2, 8});
      CHECK(copied.forward(ids).to_vector() == mapped.forward(ids).to_vector());
      auto ca = mapped.make_cache(2, 8), cb = copied.make_cache(2, 8);
      CHECK(copied.logits(copied.forward_cached(ids, cb)).to_vector() == mapped.logits(mapped.forward_cached(ids, ca)).to_vector());
      auto one = IndexTensor<DynShape<2>>::from_host(DynShape<2>(2, 1), {3, 4});
      CHECK(copied.logits(copied.forward_cached(one, cb)).to_vector() == mapped.logits(mapped.forward_cached(one, ca)).to_vector());
      models::GenerationOptions greedy;
      greedy.max_new_tokens = 16;
      const std::vector<std::vector<std::int64_t>> prompts{{1, 2, 3}, {7, 8}};
      CHECK(models::generate(copied, prompts, greedy).tokens == models::generate(mapped, prompts, greedy).tokens);
    }
  }
  {
    // Caller bytes (not a file's mapping): copied, never released, so the source still holds the
    // checkpoint afterwards (releasing anonymous pages would have zeroed them).
    TempDir dir("hb");
    models::LlamaForCausalLM<float> m(tiny(false, false), 19);
    models::save_llama(m, dir.path, io::DType::BF16);
    const auto file = dir.path / "model.safetensors";
    std::vector<std::byte> bytes(std::filesystem::file_size(file));
    std::ifstream(file, std::ios::binary).read(reinterpret_cast<char*>(bytes.data()), std::streamsize(bytes.size()));
    const auto mapped_src = std::make_shared<const io::SafetensorsFile>(file);
    const auto bytes_src = std::make_shared<const io::SafetensorsFile>(io::SafetensorsFile::from_bytes(std::span<const std::byte>(bytes)));
    CHECK(mapped_src->is_mapped());
    CHECK_FALSE(bytes_src->is_mapped());
    const auto config = models::LlamaConfig::load(dir.path / "config.json");
    auto a = models::load_llama_bf16_mapped(config, mapped_src);
    auto b = models::load_llama_bf16_mapped(config, bytes_src, models::Bf16Storage::huge_pages);
    const auto& key = "model.layers.1.mlp.down_proj.weight";
    const auto& src_bytes = bytes_src->info(key).bytes;
    const auto& file_bytes = mapped_src->info(key).bytes;
    REQUIRE(src_bytes.size() == file_bytes.size());
    CHECK(std::equal(src_bytes.begin(), src_bytes.end(), file_bytes.begin()));
    auto ids = IndexTensor<DynShape<2>>::from_host(DynShape<2>(1, 4), {5, 3, 5, 9});
    CHECK(b.forward(ids).to_vector() == a.forward(ids).to_vector());
  }
  {
    // A truncated file is still a typed error naming it (the header promises bytes the file lacks).
    TempDir dir("htr");
    models::LlamaForCausalLM<float> m(tiny(false, false), 18);
    models::save_llama(m, dir.path, io::DType::BF16);
    const auto file = dir.path / "model.safetensors";
    std::filesystem::resize_file(file, std::filesystem::file_size(file) - 64);
    CHECK_THROWS_AS(models::load_llama<float>(dir.path, models::WeightPrecision::bf16, models::Bf16Storage::huge_pages),
                    io::SafetensorsError);
  }
}

TEST_CASE("bf16 many-row group: one vdpbf16ps job gives each weight's linear_bf16 output bit for bit", "[llm][bf16]") {
  // Prefill's q | k | v and gate | up: from bf16dot::kMinRows rows with bf16 arithmetic, the weights
  // that read the same x run as ONE column-split job (x packed once, units of all their columns from
  // one counter). Every output element is summed in the same order as a weight's own call, so the
  // outputs must be identical, whatever the thread count, ragged column units, bias and residual,
  // row blocks (kColumnSplitMaxA) and parts whose tile shapes differ (those run one by one).
  const std::size_t threads_before = cpu_backend::num_threads();
  using A = io::Bf16Arithmetic;
#if defined(TTMOE_BF16DOT_GEMM)
  namespace bd = cpu_backend::bf16dot;
  struct Case {
    index_t rows, in;
    std::vector<index_t> outs;
  };
  // 6 x 64 tiles for all (128, 64, 320) past one k-block, 8 x 48 for all with ragged units (261, 15, 2 units + 5),
  // the two shapes mixed (48, 64: one by one), and a depth that takes two row blocks.
  const index_t unit = bd::kUnitColumns;
  const std::vector<Case> cases{{19, 2 * bd::KCP + 53, {128, 64, 320}}, {97, 770, {261, 15, 2 * unit + 5}},
                                {40, 33, {48, 64}},         {90, 100000, {5, 7}}};
  REQUIRE(index_t(90) * 50000 > cpu_backend::packed::kColumnSplitMaxA);
  for (std::size_t nt : {std::size_t(1), std::size_t(2)})
    for (const Case& c : cases) {
      cpu_backend::set_num_threads(nt);
      const auto x = random_values(std::size_t(c.rows * c.in), 400 + c.in);
      std::vector<io::Bf16Matrix> ws;
      std::vector<std::vector<float>> biases, res, got, want;
      for (std::size_t i = 0; i < c.outs.size(); ++i) {
        const auto w = random_values(std::size_t(c.outs[i] * c.in), 410 + i);
        ws.push_back(io::Bf16Matrix::from_floats(w.data(), c.outs[i], c.in));
        biases.push_back(i == 1 ? std::vector<float>{} : random_values(std::size_t(c.outs[i]), 420 + i));
        res.push_back(i == 0 ? std::vector<float>{} : random_values(std::size_t(c.rows * c.outs[i]), 430 + i));
        got.emplace_back(std::size_t(c.rows * c.outs[i]), -1.f);
        want.emplace_back(std::size_t(c.rows * c.outs[i]), -2.f);
      }
      std::vector<bd::Part> parts;
      for (std::size_t i = 0; i < c.outs.size(); ++i) {
        const float* b = biases[i].empty() ? nullptr : biases[i].data();
        const float* r = res[i].empty() ? nullptr : res[i].data();
        bd::linear(x.data(), c.rows, ws[i], b, r, want[i].data());
        parts.push_back({&ws[i], b, r, got[i].data()});
      }
      bd::linear_group(x.data(), c.rows, c.in, parts);
      INFO("threads " << nt << " rows " << c.rows << " in " << c.in);
      for (std::size_t i = 0; i < c.outs.size(); ++i) CHECK(got[i] == want[i]);
    }
  // The grouped output against the double reference too (the second part of an 8 x 48 group).
  cpu_backend::set_num_threads(2);
  check_bf16_linear(
      [](const float* x, index_t rows, const io::Bf16Matrix& w, const float* bias, const float* residual, float* y) {
        const auto other = random_values(std::size_t(96 * w.cols), 440);
        const io::Bf16Matrix first = io::Bf16Matrix::from_floats(other.data(), 96, w.cols);
        std::vector<float> y0(std::size_t(rows * 96));
        const std::array<bd::Part, 2> parts{bd::Part{&first, nullptr, nullptr, y0.data()}, bd::Part{&w, bias, residual, y}};
        REQUIRE(bd::groups(parts, w.cols));
        bd::linear_group(x, rows, w.cols, parts);
      },
      37, 1601, 192, true);
#endif
  // The tensor entry point (every CPU): bf16 arithmetic at and past the GEMM threshold, exact, and
  // mixed arithmetics, each output equal to linear_bf16 on its own; a wrong width is named.
  cpu_backend::set_num_threads(2);
  const index_t in = 96;
  const auto w0 = random_values(std::size_t(128 * in), 501), w1 = random_values(std::size_t(64 * in), 502);
  io::Bf16Matrix W0 = io::Bf16Matrix::from_floats(w0.data(), 128, in), W1 = io::Bf16Matrix::from_floats(w1.data(), 64, in);
  const Tensor<float, DynShape<1>> none;
  const auto bias = Tensor<float, DynShape<1>>::from_host(DynShape<1>(64), random_values(64, 503));
  for (int mode = 0; mode < 3; ++mode) {  // bf16, exact, mixed
    W0.arithmetic = mode == 1 ? A::exact : A::bf16_activations;
    W1.arithmetic = mode == 0 ? A::bf16_activations : A::exact;
    for (index_t rows : {index_t(16), index_t(45)}) {
      const auto x = Tensor<float, DynShape<3>>::from_host(DynShape<3>(1, rows, in), random_values(std::size_t(rows * in), 504));
      const auto [y0, y1] = linear_bf16_group(x, std::array<const io::Bf16Matrix*, 2>{&W0, &W1},
                                              std::array<const Tensor<float, DynShape<1>>*, 2>{&none, &bias});
      INFO("mode " << mode << " rows " << rows);
      CHECK((y0.extent(1) == rows && y0.extent(2) == 128 && y1.extent(1) == rows && y1.extent(2) == 64));
      CHECK(y0.to_vector() == linear_bf16(x, W0, none).to_vector());
      CHECK(y1.to_vector() == linear_bf16(x, W1, bias).to_vector());
    }
  }
  const auto narrow_x = Tensor<float, DynShape<2>>::from_host(DynShape<2>(20, in - 2), random_values(std::size_t(20 * (in - 2)), 505));
  CHECK_THROWS_AS(linear_bf16_group(narrow_x, std::array<const io::Bf16Matrix*, 2>{&W0, &W1},
                                    std::array<const Tensor<float, DynShape<1>>*, 2>{&none, &none}),
                  ShapeError);
  cpu_backend::set_num_threads(threads_before);
}

TEST_CASE("llama prefill keeping some rows: kept hidden states, logits, cache and greedy tokens equal the full prefill",
          "[llm][bf16][cache]") {
  // forward_cached(ids, cache, keep) runs the last layer past its attention on the kept rows only.
  // With as many kept rows as the GEMMs' thresholds (kPackedGemmMinRows, bf16dot::kMinRows) the same
  // kernels run on the same rows, so the kept rows' hidden states are bit for bit the full step's; with
  // one row per prompt (what generate() keeps) the last layer's products take the few-row kernels,
  // whose summation order differs, so there the check is a tolerance plus equal greedy tokens.
  TempDir dir("keep");
  models::LlamaForCausalLM<float> f32(tiny(false, false), 23);
  models::save_llama(f32, dir.path, io::DType::BF16);
  auto b16 = models::load_llama<float>(dir.path, models::WeightPrecision::bf16);
  const index_t B = 2, t = 48, dim = f32.config.hidden_size;
  std::vector<std::int64_t> id_values(std::size_t(B * t));
  for (std::size_t i = 0; i < id_values.size(); ++i) id_values[i] = std::int64_t((i * 11 + 5) % 50);
  const auto ids = IndexTensor<DynShape<2>>::from_host(DynShape<2>(B, t), id_values);
  // 84 rows from both sequences, out of order, one repeated; and each sequence's last row.
  std::vector<std::int64_t> many;
  for (std::int64_t r = 95; r >= 16; --r) many.push_back(r);
  for (std::int64_t r : {0, 3, 9, 3}) many.push_back(r);
#if defined(TTMOE_PACKED_GEMM)
  REQUIRE(index_t(many.size()) >= cpu_backend::kPackedGemmMinRows);
#endif
#if defined(TTMOE_BF16DOT_GEMM)
  REQUIRE(index_t(many.size()) >= cpu_backend::bf16dot::kMinRows);
#endif
  std::vector<std::int64_t> last{t - 1, 2 * t - 1};
  struct Case {
    const char* name;
    models::LlamaForCausalLM<float>* m;
    io::Bf16Arithmetic arithmetic;
    double tol;  // normwise, for the one-row-per-prompt keep
  };
  for (const Case& k : {Case{"f32", &f32, io::Bf16Arithmetic::exact, 2e-6},
                        Case{"bf16 exact", &b16, io::Bf16Arithmetic::exact, 2e-6},
                        Case{"bf16 activations", &b16, io::Bf16Arithmetic::bf16_activations, 1e-3}}) {
    INFO(k.name);
    auto& m = *k.m;
    models::set_bf16_arithmetic(m, k.arithmetic);
    auto full_cache = m.make_cache(B, 64);
    const auto full = m.forward_cached(ids, full_cache).reshape(DynShape<2>(B * t, dim));
    auto rows_of = [&](const std::vector<std::int64_t>& r) {
      return index_select(full, IndexTensor<DynShape<1>>::from_host(DynShape<1>(index_t(r.size())), r));
    };
    for (const auto* keep : {&many, &last}) {
      auto cache = m.make_cache(B, 64);
      const auto kept = m.forward_cached(ids, cache, IndexTensor<DynShape<1>>::from_host(DynShape<1>(index_t(keep->size())), *keep));
      REQUIRE(kept.extent(0) == index_t(keep->size()));
      REQUIRE(kept.extent(1) == dim);
      // The cache holds every row's keys and values either way, bit for bit, and the same lengths.
      CHECK(cache.lengths == full_cache.lengths);
      CHECK(cache.k.to_vector() == full_cache.k.to_vector());
      CHECK(cache.v.to_vector() == full_cache.v.to_vector());
      const auto want = rows_of(*keep);
      if (keep == &many) {
        CHECK(kept.to_vector() == want.to_vector());
        CHECK(m.logits(kept).to_vector() == m.logits(want).to_vector());
      } else {
        const double err = test::normwise_rel_error(m.logits(kept), m.logits(want));
        INFO("last rows: normwise relative error of the logits " << err);
        CHECK(err <= k.tol);
      }
    }
    // generate() keeps each prompt's last row; its greedy tokens equal a decode after the full prefill.
    const std::vector<std::vector<std::int64_t>> prompts{{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20},
                                                         {7, 8, 9}};
    models::GenerationOptions greedy;
    greedy.max_new_tokens = 12;
    const auto got = models::generate(m, prompts, greedy);
    std::vector<std::vector<std::int64_t>> want_tokens(2);
    {
      std::vector<std::int64_t> padded(40, 0);
      std::copy(prompts[0].begin(), prompts[0].end(), padded.begin());
      std::copy(prompts[1].begin(), prompts[1].end(), padded.begin() + 20);
      auto cache = m.make_cache(2, 40);
      const auto h = m.forward_cached(IndexTensor<DynShape<2>>::from_host(DynShape<2>(2, 20), padded), cache);
      cache.lengths = {20, 3};
      auto logits = m.logits(index_select(h.reshape(DynShape<2>(40, dim)),
                                          IndexTensor<DynShape<1>>::from_host(DynShape<1>(2), std::vector<std::int64_t>{19, 22})));
      for (index_t s = 0; s < greedy.max_new_tokens; ++s) {
        const auto z = logits.to_vector();
        std::vector<std::int64_t> next(2);
        for (std::size_t b = 0; b < 2; ++b) {
          const auto row = z.begin() + std::ptrdiff_t(b * 50);
          next[b] = std::max_element(row, row + 50) - row;
          want_tokens[b].push_back(next[b]);
        }
        logits = m.logits(m.forward_cached(IndexTensor<DynShape<2>>::from_host(DynShape<2>(2, 1), next), cache).reshape(DynShape<2>(2, dim)));
      }
    }
    CHECK(got.tokens == want_tokens);
  }
  // No kept rows: the cache is filled all the same and nothing else is computed.
  for (auto* m : {&f32, &b16}) {
    auto full_cache = m->make_cache(B, 64), cache = m->make_cache(B, 64);
    (void)m->forward_cached(ids, full_cache);
    const auto none = m->forward_cached(ids, cache, IndexTensor<DynShape<1>>::from_host(DynShape<1>(0), std::vector<std::int64_t>{}));
    CHECK(none.extent(0) == 0);
    CHECK(none.extent(1) == dim);
    CHECK(cache.lengths == full_cache.lengths);
    CHECK(cache.k.to_vector() == full_cache.k.to_vector());
    CHECK(cache.v.to_vector() == full_cache.v.to_vector());
  }
  // A kept row outside the step is a clear error, and the cache is left as it was.
  auto cache = f32.make_cache(B, 64);
  CHECK_THROWS_AS(f32.forward_cached(ids, cache, IndexTensor<DynShape<1>>::from_host(DynShape<1>(1), std::vector<std::int64_t>{B * t})),
                  ValueError);
  CHECK_THROWS_AS(f32.forward_cached(ids, cache, IndexTensor<DynShape<1>>::from_host(DynShape<1>(1), std::vector<std::int64_t>{-1})),
                  ValueError);
  CHECK(cache.lengths == std::vector<index_t>{0, 0});
}
