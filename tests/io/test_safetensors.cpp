// Tests for ttmoe::io safetensors reading and writing: dtype conversions against known bit
// patterns and a brute-force oracle, round trips of every dtype, hand-built files, the writer's
// byte layout, and one test per class of malformed file (typed kind + file named in the message).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ttmoe/io/safetensors.hpp"

namespace fs = std::filesystem;
using namespace ttmoe::io;

namespace {

// One scratch directory per test process (ctest runs cases in parallel processes), removed at exit.
// Not "ScratchDir": a unity build joins this file with the TTMM suites, which have ttmm_test::ScratchDir.
struct IoScratchDir {
  fs::path dir = fs::temp_directory_path() / ("ttmoe_io_test_" + std::to_string(::getpid()));
  IoScratchDir() { fs::create_directories(dir); }
  ~IoScratchDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

const fs::path& scratch() {
  static IoScratchDir s;
  return s.dir;
}

std::vector<std::byte> to_bytes(std::string_view s) {
  const auto b = std::as_bytes(std::span<const char>(s.data(), s.size()));
  return {b.begin(), b.end()};
}

void append_u64(std::vector<std::byte>& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xFFu));
}

// A file: declared header length (defaults to the header's real size), header, data bytes.
std::vector<std::byte> make_file(std::string_view header, const std::vector<std::uint8_t>& data = {},
                                 std::optional<std::uint64_t> declared = std::nullopt) {
  std::vector<std::byte> out;
  append_u64(out, declared.value_or(header.size()));
  for (char c : header) out.push_back(static_cast<std::byte>(c));
  for (std::uint8_t b : data) out.push_back(static_cast<std::byte>(b));
  return out;
}

fs::path write_bytes(const std::string& fname, const std::vector<std::byte>& bytes) {
  const fs::path p = scratch() / fname;
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(f.good());
  return p;
}

std::vector<std::byte> read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  const std::vector<char> c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto b = std::as_bytes(std::span<const char>(c));
  return {b.begin(), b.end()};
}

// Compares byte buffers without asking Catch to print std::byte (its printer for std::byte is
// only compiled into the shared Catch main when that is built as C++17 or later).
bool same_bytes(const std::vector<std::byte>& a, const std::vector<std::byte>& b) { return a == b; }

std::string kind_str(ErrorKind k) { return std::string(error_kind_name(k)); }

// Opens `bytes` from a file called `fname` and from memory; both must fail with `kind`, and the
// file's message must name the file. Returns the file's message for further checks.
std::string expect_open_error(const std::vector<std::byte>& bytes, ErrorKind kind, const std::string& fname) {
  const fs::path p = write_bytes(fname, bytes);
  std::string msg;
  try {
    SafetensorsFile f(p);
    FAIL("opened malformed file " << fname << " without error");
  } catch (const SafetensorsError& e) {
    msg = e.what();
    INFO(msg);
    CHECK(kind_str(e.kind()) == kind_str(kind));
    CHECK(e.path() == p.string());
    CHECK_THAT(msg, Catch::Contains(fname));
  }
  try {
    (void)SafetensorsFile::borrow_bytes(bytes, "memory-copy");
    FAIL("borrowed malformed bytes without error");
  } catch (const SafetensorsError& e) {
    INFO(e.what());
    CHECK(kind_str(e.kind()) == kind_str(kind));
    CHECK_THAT(std::string(e.what()), Catch::StartsWith("memory-copy: "));
  }
  return msg;
}

// Runs `fn`, which must throw SafetensorsError of `kind`; returns its message.
template <class Fn>
std::string expect_error(Fn&& fn, ErrorKind kind) {
  try {
    fn();
  } catch (const SafetensorsError& e) {
    INFO(e.what());
    CHECK(kind_str(e.kind()) == kind_str(kind));
    return e.what();
  }
  FAIL("expected SafetensorsError of kind " << kind_str(kind));
  return {};
}

bool same_bits(float a, float b) { return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b); }

// Reference decoders written from the formulas, independent of the library's bit tricks.
double f16_reference(std::uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 0x1F, m = h & 0x3FF;
  double v = 0;
  if (e == 31) v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  else if (e == 0) v = std::ldexp(m, -24);
  else v = std::ldexp(1024 + m, e - 25);
  return s ? -v : v;
}

double bf16_reference(std::uint16_t h) {
  const int s = h >> 15, e = (h >> 7) & 0xFF, m = h & 0x7F;
  double v = 0;
  if (e == 255) v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  else if (e == 0) v = std::ldexp(m, -133);
  else v = std::ldexp(128 + m, e - 134);
  return s ? -v : v;
}

// Brute-force round-to-nearest-even oracle: `grid` holds the non-negative finite values of a
// format in bit order, plus one more entry for the value where the next binade would start
// (standing in for infinity, which is where ties at the top round). Returns the bit pattern.
std::uint16_t nearest_even(const std::vector<double>& grid, std::uint16_t sign_bit, double x) {
  const double ax = std::fabs(x);
  const auto inf_bits = static_cast<std::uint16_t>(grid.size() - 1);
  std::uint16_t bits = 0;
  if (ax >= grid.back()) {
    bits = inf_bits;
  } else {
    const auto hi = static_cast<std::size_t>(std::upper_bound(grid.begin(), grid.end(), ax) - grid.begin());
    const std::size_t lo = hi - 1;
    const double dl = ax - grid[lo], dh = grid[hi] - ax;
    bits = static_cast<std::uint16_t>(dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi));
  }
  return static_cast<std::uint16_t>(bits | (std::signbit(x) ? sign_bit : 0));
}

std::vector<double> f16_grid() {
  std::vector<double> g;
  for (std::uint32_t b = 0; b < 0x7C00; ++b) g.push_back(f16_reference(static_cast<std::uint16_t>(b)));
  g.push_back(65536.0);
  return g;
}

std::vector<double> bf16_grid() {
  std::vector<double> g;
  for (std::uint32_t b = 0; b < 0x7F80; ++b) g.push_back(bf16_reference(static_cast<std::uint16_t>(b)));
  g.push_back(std::ldexp(1.0, 128));
  return g;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// DType and conversions
// ---------------------------------------------------------------------------------------------

TEST_CASE("safetensors: dtype sizes names and parsing") {
  CHECK(dtype_size(DType::F32) == 4);
  CHECK(dtype_size(DType::F64) == 8);
  CHECK(dtype_size(DType::F16) == 2);
  CHECK(dtype_size(DType::BF16) == 2);
  CHECK(dtype_size(DType::I64) == 8);
  CHECK(dtype_size(DType::I32) == 4);
  CHECK(dtype_size(DType::U8) == 1);
  CHECK(dtype_size(DType::BOOL) == 1);
  for (DType d : kAllDTypes) {
    REQUIRE(parse_dtype(dtype_name(d)).has_value());
    CHECK(*parse_dtype(dtype_name(d)) == d);
  }
  CHECK(std::string(dtype_name(DType::BF16)) == "BF16");
  CHECK_FALSE(parse_dtype("f32").has_value());  // the format is case-sensitive
  CHECK_FALSE(parse_dtype("F8_E4M3").has_value());
  CHECK_FALSE(parse_dtype("").has_value());
  static_assert(dtype_size(DType::I64) == 8 && parse_dtype("U8") == DType::U8);
}

TEST_CASE("safetensors: F16 decodes known bit patterns") {
  CHECK(f16_to_float(0x3C00) == 1.0f);
  CHECK(f16_to_float(0xC100) == -2.5f);
  CHECK(f16_to_float(0x7BFF) == 65504.0f);
  CHECK(f16_to_float(0x0001) == std::ldexp(1.0f, -24));        // smallest subnormal
  CHECK(f16_to_float(0x03FF) == std::ldexp(1023.0f, -24));     // largest subnormal
  CHECK(f16_to_float(0x0400) == std::ldexp(1.0f, -14));        // smallest normal
  CHECK(f16_to_float(0x8001) == -std::ldexp(1.0f, -24));
  CHECK(f16_to_float(0x7C00) == std::numeric_limits<float>::infinity());
  CHECK(f16_to_float(0xFC00) == -std::numeric_limits<float>::infinity());
  CHECK(std::isnan(f16_to_float(0x7E00)));
  CHECK(std::isnan(f16_to_float(0x7C01)));  // signalling-NaN pattern must not decode as inf
  CHECK(std::isnan(f16_to_float(0xFE00)));
  CHECK(same_bits(f16_to_float(0x8000), -0.0f));
  CHECK(same_bits(f16_to_float(0x0000), 0.0f));
  static_assert(f16_to_float(0x3C00) == 1.0f);

  // Every pattern against the formula.
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const auto h = static_cast<std::uint16_t>(b);
    const double want = f16_reference(h);
    const float got = f16_to_float(h);
    if (std::isnan(want)) {
      REQUIRE(std::isnan(got));
    } else {
      REQUIRE(static_cast<double>(got) == want);
      REQUIRE(std::signbit(got) == std::signbit(want));
    }
  }
}

TEST_CASE("safetensors: F16 encodes with round-to-nearest-even") {
  CHECK(float_to_f16(1.0f) == 0x3C00);
  CHECK(float_to_f16(-2.5f) == 0xC100);
  CHECK(float_to_f16(65504.0f) == 0x7BFF);
  CHECK(float_to_f16(std::ldexp(1.0f, -24)) == 0x0001);
  CHECK(float_to_f16(std::numeric_limits<float>::infinity()) == 0x7C00);
  CHECK(float_to_f16(-std::numeric_limits<float>::infinity()) == 0xFC00);
  CHECK((float_to_f16(std::numeric_limits<float>::quiet_NaN()) & 0x7FFF) > 0x7C00);
  CHECK((float_to_f16(std::bit_cast<float>(0x7F800001u)) & 0x7FFF) > 0x7C00);  // tiny payload stays NaN
  CHECK(float_to_f16(-0.0f) == 0x8000);
  // Overflow: 65519 rounds down to 65504, the midpoint 65520 ties to even = inf.
  CHECK(float_to_f16(65519.0f) == 0x7BFF);
  CHECK(float_to_f16(65520.0f) == 0x7C00);
  CHECK(float_to_f16(1e9f) == 0x7C00);
  // Ties to even in the normal range: 1 + 2^-11 -> 1, 1 + 3*2^-11 -> 1 + 2^-9.
  CHECK(float_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);
  CHECK(float_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);
  // Subnormal rounding: half the smallest subnormal ties to 0; a bit more rounds up; 1.5 -> 2.
  CHECK(float_to_f16(std::ldexp(1.0f, -25)) == 0x0000);
  CHECK(float_to_f16(std::ldexp(1.0f, -25) * 1.0001f) == 0x0001);
  CHECK(float_to_f16(3 * std::ldexp(1.0f, -25)) == 0x0002);
  CHECK(float_to_f16(std::ldexp(1.0f, -30)) == 0x0000);
  CHECK(float_to_f16(-std::ldexp(1.0f, -30)) == 0x8000);
  // Largest subnormal + half a quantum rounds up into the smallest normal.
  CHECK(float_to_f16(std::ldexp(1023.5f, -24)) == 0x0400);
  // From double directly: double rounding through float would give 0x3C00 here.
  CHECK(double_to_f16(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)) == 0x3C01);
  static_assert(float_to_f16(1.0f) == 0x3C00);

  // Every finite half survives decode -> encode.
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const auto h = static_cast<std::uint16_t>(b);
    if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0) continue;
    REQUIRE(float_to_f16(f16_to_float(h)) == h);
    REQUIRE(double_to_f16(static_cast<double>(f16_to_float(h))) == h);
  }
}

TEST_CASE("safetensors: BF16 known bit patterns and rounding") {
  CHECK(bf16_to_float(0x3F80) == 1.0f);
  CHECK(bf16_to_float(0xC020) == -2.5f);
  CHECK(bf16_to_float(0x0001) == std::ldexp(1.0f, -133));  // smallest subnormal
  CHECK(bf16_to_float(0x7F7F) == std::ldexp(255.0f, 120));  // largest finite
  CHECK(bf16_to_float(0x7F80) == std::numeric_limits<float>::infinity());
  CHECK(bf16_to_float(0xFF80) == -std::numeric_limits<float>::infinity());
  CHECK(std::isnan(bf16_to_float(0x7FC0)));
  CHECK(std::isnan(bf16_to_float(0x7F81)));

  CHECK(float_to_bf16(1.0f) == 0x3F80);
  CHECK(float_to_bf16(-2.5f) == 0xC020);
  CHECK(float_to_bf16(std::ldexp(1.0f, -133)) == 0x0001);
  CHECK(float_to_bf16(std::ldexp(1.0f, -134)) == 0x0000);  // tie to even (zero)
  CHECK(float_to_bf16(std::ldexp(3.0f, -134)) == 0x0002);  // tie to even (two)
  CHECK(float_to_bf16(std::numeric_limits<float>::infinity()) == 0x7F80);
  CHECK((float_to_bf16(std::numeric_limits<float>::quiet_NaN()) & 0x7FFF) > 0x7F80);
  CHECK((float_to_bf16(std::bit_cast<float>(0x7F800001u)) & 0x7FFF) > 0x7F80);  // truncation would give inf
  CHECK(float_to_bf16(std::bit_cast<float>(0x3F808000u)) == 0x3F80);  // tie -> even
  CHECK(float_to_bf16(std::bit_cast<float>(0x3F818000u)) == 0x3F82);  // tie -> even (up)
  CHECK(float_to_bf16(std::bit_cast<float>(0x3F808001u)) == 0x3F81);  // above the tie
  CHECK(float_to_bf16(std::numeric_limits<float>::max()) == 0x7F80);  // rounds past the top: inf
  CHECK(float_to_bf16(std::bit_cast<float>(0x00000001u)) == 0x0000);  // float subnormal: far below
  static_assert(float_to_bf16(1.0f) == 0x3F80 && bf16_to_float(0x3F80) == 1.0f);

  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const auto h = static_cast<std::uint16_t>(b);
    const double want = bf16_reference(h);
    const float got = bf16_to_float(h);
    if (std::isnan(want)) {
      REQUIRE(std::isnan(got));
      continue;
    }
    REQUIRE(static_cast<double>(got) == want);
    REQUIRE(float_to_bf16(got) == h);
  }
}

TEST_CASE("safetensors: F16 and BF16 encoders match a brute-force nearest-even oracle") {
  const std::vector<double> g16 = f16_grid();
  const std::vector<double> gbf = bf16_grid();
  std::mt19937_64 rng(1234);

  // Exact midpoints between neighbours, and the doubles just either side of them: the inputs
  // where a wrong tie rule or double rounding shows.
  for (std::size_t k = 0; k + 1 < g16.size(); ++k) {
    const double mid = (g16[k] + g16[k + 1]) / 2;
    for (double x : {mid, std::nextafter(mid, 0.0), std::nextafter(mid, 1e300), -mid}) {
      REQUIRE(double_to_f16(x) == nearest_even(g16, 0x8000, x));
    }
  }
  for (std::size_t k = 0; k + 1 < gbf.size(); k += 7) {
    const double mid = (gbf[k] + gbf[k + 1]) / 2;
    for (double x : {mid, std::nextafter(mid, 0.0), std::nextafter(mid, 1e300), -mid}) {
      REQUIRE(double_to_bf16(x) == nearest_even(gbf, 0x8000, x));
    }
  }
  // Random float bit patterns (all magnitudes) and random floats in half's range.
  std::uniform_real_distribution<float> small(-70000.0f, 70000.0f);
  for (int i = 0; i < 200000; ++i) {
    float f = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
    if (std::isnan(f)) continue;
    INFO("float bits " << std::bit_cast<std::uint32_t>(f));
    REQUIRE(float_to_f16(f) == nearest_even(g16, 0x8000, f));
    REQUIRE(float_to_bf16(f) == nearest_even(gbf, 0x8000, f));
    f = small(rng) * std::ldexp(1.0f, -static_cast<int>(rng() % 40));
    REQUIRE(float_to_f16(f) == nearest_even(g16, 0x8000, f));
  }
}

TEST_CASE("safetensors: double to float narrowing is total and rounds to nearest even") {
  constexpr float fmax = std::numeric_limits<float>::max();
  const double dmax = fmax;
  CHECK(double_to_float(0.1) == 0.1f);
  CHECK(double_to_float(dmax) == fmax);
  CHECK(double_to_float(dmax + std::ldexp(1.0, 102)) == fmax);
  CHECK(double_to_float(std::nextafter(dmax + std::ldexp(1.0, 103), 0.0)) == fmax);
  CHECK(std::isinf(double_to_float(dmax + std::ldexp(1.0, 103))));  // tie goes to even (2^128)
  CHECK(double_to_float(1e300) == std::numeric_limits<float>::infinity());
  CHECK(double_to_float(-1e300) == -std::numeric_limits<float>::infinity());
  CHECK(double_to_float(-dmax - std::ldexp(1.0, 102)) == -fmax);
  CHECK(std::isnan(double_to_float(std::numeric_limits<double>::quiet_NaN())));
  CHECK(std::signbit(double_to_float(-std::numeric_limits<double>::quiet_NaN())));
  CHECK(double_to_float(std::ldexp(1.0, -160)) == 0.0f);
}

// ---------------------------------------------------------------------------------------------
// Round trips and layout
// ---------------------------------------------------------------------------------------------

TEST_CASE("safetensors: round trip of every dtype through a file") {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> f32 = {1.0f, -2.5f, 0.1f, -0.0f, inf, -inf, std::ldexp(1.0f, -140), 3.4e38f};
  const std::vector<double> f64 = {1.0, -2.5, 0.1, 1e300, -1e-300, std::numeric_limits<double>::infinity()};
  const std::vector<float> f16 = {1.0f, -2.5f, 65504.0f, std::ldexp(1.0f, -24), 0.1f, 1e6f, -inf};
  const std::vector<double> f16d = {1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40), -0.333};
  const std::vector<float> bf16 = {1.0f, -2.5f, 0.1f, 3.0e38f, std::ldexp(1.0f, -133), -inf};
  const std::vector<std::int64_t> i64 = {0, -1, std::numeric_limits<std::int64_t>::min(),
                                         std::numeric_limits<std::int64_t>::max(), 42, -42};
  const std::vector<std::int32_t> i32 = {0, -1, std::numeric_limits<std::int32_t>::min(),
                                         std::numeric_limits<std::int32_t>::max()};
  const std::vector<std::uint8_t> u8 = {0, 1, 127, 128, 255, 7};
  const bool bools[] = {true, false, false, true, true};
  const std::vector<float> nan_vals = {std::numeric_limits<float>::quiet_NaN(),
                                       -std::numeric_limits<float>::quiet_NaN()};

  SafetensorsWriter w;
  w.add("f32", std::span<const float>(f32), {2, 4});
  w.add("f64", std::span<const double>(f64), {3, 2});
  w.add("f16", std::span<const float>(f16), {7}, DType::F16);
  w.add("f16_from_double", std::span<const double>(f16d), {2}, DType::F16);
  w.add("bf16", std::span<const float>(bf16), {6}, DType::BF16);
  w.add("bf16_from_double", std::span<const double>(f64), {6}, DType::BF16);
  w.add("f64_from_float", std::span<const float>(f32), {8}, DType::F64);
  w.add("f32_from_double", std::span<const double>(f64), {6}, DType::F32);
  w.add("i64", std::span<const std::int64_t>(i64), {6});
  w.add("i32", std::span<const std::int32_t>(i32), {2, 2});
  w.add("u8", std::span<const std::uint8_t>(u8), {6, 1});
  w.add("bool", std::span<const bool>(bools), {5});
  w.add("i64_as_i32", std::span<const std::int64_t>(std::vector<std::int64_t>{5, -6}), {2}, DType::I32);
  w.add("nan16", std::span<const float>(nan_vals), {2}, DType::F16);
  w.add("nanbf", std::span<const float>(nan_vals), {2}, DType::BF16);
  w.add("empty", std::span<const float>(), {0, 3});
  const std::vector<float> scalar = {7.5f};
  w.add("scalar", std::span<const float>(scalar), {});
  const fs::path p = scratch() / "roundtrip.safetensors";
  w.write(p);

  const SafetensorsFile f(p);
  CHECK(f.size() == 17);
  CHECK(f.info("f32").shape == std::vector<std::int64_t>{2, 4});
  CHECK(f.info("f16").dtype == DType::F16);
  CHECK(f.info("bool").dtype == DType::BOOL);

  const auto r32 = f.read<float>("f32");
  for (std::size_t i = 0; i < f32.size(); ++i) CHECK(same_bits(r32[i], f32[i]));
  const auto r32d = f.read<double>("f32");
  for (std::size_t i = 0; i < f32.size(); ++i) CHECK(r32d[i] == static_cast<double>(f32[i]));
  CHECK(f.read<double>("f64") == f64);
  const auto r64f = f.read<float>("f64");
  for (std::size_t i = 0; i < f64.size(); ++i) CHECK(same_bits(r64f[i], double_to_float(f64[i])));
  CHECK(f.read<float>("f32_from_double") == r64f);
  const auto r16 = f.read<float>("f16");
  for (std::size_t i = 0; i < f16.size(); ++i) CHECK(same_bits(r16[i], f16_to_float(float_to_f16(f16[i]))));
  CHECK(r16[0] == 1.0f);
  CHECK(r16[1] == -2.5f);
  CHECK(r16[2] == 65504.0f);
  CHECK(r16[3] == std::ldexp(1.0f, -24));
  CHECK(r16[5] == inf);  // 1e6 overflows half
  CHECK(f.read<double>("f16_from_double")[0] == 1.0 + std::ldexp(1.0, -10));
  const auto rbf = f.read<float>("bf16");
  for (std::size_t i = 0; i < bf16.size(); ++i) CHECK(same_bits(rbf[i], bf16_to_float(float_to_bf16(bf16[i]))));
  CHECK(rbf[4] == std::ldexp(1.0f, -133));
  const auto rbfd = f.read<double>("bf16_from_double");
  for (std::size_t i = 0; i < f64.size(); ++i) CHECK(rbfd[i] == static_cast<double>(bf16_to_float(double_to_bf16(f64[i]))));
  const auto r64ff = f.read<double>("f64_from_float");
  for (std::size_t i = 0; i < f32.size(); ++i) CHECK(r64ff[i] == static_cast<double>(f32[i]));
  CHECK(f.read<std::int64_t>("i64") == i64);
  CHECK(f.read<std::int32_t>("i32") == i32);
  CHECK(f.read<std::int64_t>("i32") == std::vector<std::int64_t>(i32.begin(), i32.end()));
  CHECK(f.read<std::uint8_t>("u8") == u8);
  CHECK(f.read<int>("i64_as_i32") == std::vector<int>{5, -6});
  bool rb[5] = {};
  f.read_as<bool>("bool", rb);
  CHECK(std::equal(std::begin(rb), std::end(rb), std::begin(bools)));
  CHECK(f.read<std::uint8_t>("bool") == std::vector<std::uint8_t>{1, 0, 0, 1, 1});
  for (const char* n : {"nan16", "nanbf"}) {
    const auto rn = f.read<float>(n);
    CHECK(std::isnan(rn[0]));
    CHECK(std::isnan(rn[1]));
    CHECK(std::signbit(rn[1]));
  }
  CHECK(f.info("empty").numel() == 0);
  CHECK(f.read<float>("empty").empty());
  CHECK(f.info("scalar").shape.empty());
  CHECK(f.read<float>("scalar") == std::vector<float>{7.5f});

  // Same bytes from memory, owned and borrowed.
  const auto bytes = read_bytes(p);
  CHECK(same_bytes(bytes, w.to_bytes()));
  const auto owned = SafetensorsFile::from_bytes(std::span<const std::byte>(bytes), "copy");
  CHECK(owned.read<std::int64_t>("i64") == i64);
  const auto borrowed = SafetensorsFile::borrow_bytes(bytes, "view");
  CHECK(borrowed.read<double>("f64") == f64);
  CHECK(borrowed.info("f64").bytes.data() >= bytes.data());
  CHECK(borrowed.info("f64").bytes.data() < bytes.data() + bytes.size());
}

TEST_CASE("safetensors: metadata round trip") {
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  w.set_metadata("note", "ünïcödé \"quoted\" \\ back");
  w.set_metadata("empty", "");
  w.set_metadata("format", "ttmoe");  // replaces
  const std::vector<float> v = {1, 2};
  w.add("x", std::span<const float>(v), {2});
  const fs::path p = scratch() / "meta.safetensors";
  w.write(p);
  const SafetensorsFile f(p);
  const std::map<std::string, std::string> want = {
      {"format", "ttmoe"}, {"note", "ünïcödé \"quoted\" \\ back"}, {"empty", ""}};
  CHECK(f.metadata() == want);
  CHECK(f.names() == std::vector<std::string>{"x"});

  SafetensorsWriter none;
  none.add("x", std::span<const float>(v), {2});
  CHECK(SafetensorsFile::from_bytes(none.to_bytes()).metadata().empty());
}

TEST_CASE("safetensors: reader accepts a hand-built file") {
  // Built byte by byte, independent of the writer: padding spaces, a header length that leaves
  // the data section unaligned, a hole, an empty tensor, a scalar and metadata; keys not in
  // offset order.
  std::string header =
      R"({"b":{"dtype":"F16","shape":[2],"data_offsets":[9,13]},)"
      R"("__metadata__":{"k":"v"},)"
      R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("s":{"dtype":"U8","shape":[],"data_offsets":[13,14]},)"
      R"("empty":{"dtype":"I32","shape":[0,4],"data_offsets":[13,13]}})";
  while ((8 + header.size()) % 4 != 1) header += ' ';  // data starts 1 byte past a 4-byte boundary
  const std::vector<std::uint8_t> data = {
      0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x20, 0xC0,  // a: 1.0f, -2.5f
      0xAA,                                            // hole (allowed)
      0x00, 0x3C, 0x00, 0xC1,                          // b: F16 1.0, -2.5
      0x07,                                            // s: 7
      0xEE, 0xEE};                                     // trailing bytes after the last tensor
  const auto bytes = make_file(header, data);
  const fs::path p = write_bytes("handmade.safetensors", bytes);
  const SafetensorsFile f(p);

  CHECK(f.path() == p.string());
  CHECK(f.header_size() == header.size());
  CHECK(f.names() == std::vector<std::string>{"a", "b", "empty", "s"});  // by offset, ties by end
  CHECK(f.contains("a"));
  CHECK_FALSE(f.contains("__metadata__"));
  CHECK_FALSE(f.contains("c"));
  CHECK(f.metadata() == std::map<std::string, std::string>{{"k", "v"}});
  const TensorInfo& a = f.info("a");
  CHECK(a.dtype == DType::F32);
  CHECK(a.shape == std::vector<std::int64_t>{2});
  CHECK(a.begin == 0);
  CHECK(a.end == 8);
  CHECK(a.bytes.size() == 8);
  CHECK(reinterpret_cast<std::uintptr_t>(a.bytes.data()) % 4 != 0);  // really unaligned in the mapping
  CHECK(f.read<float>("a") == std::vector<float>{1.0f, -2.5f});
  CHECK(f.read<double>("b") == std::vector<double>{1.0, -2.5});
  CHECK(f.read<int>("s") == std::vector<int>{7});
  CHECK(f.info("s").numel() == 1);
  CHECK(f.read<std::int32_t>("empty").empty());
  std::vector<float> dst(2);
  f.read_into<float>("a", {2}, dst);
  CHECK(dst == std::vector<float>{1.0f, -2.5f});
}

TEST_CASE("safetensors: writer output parses independently with nlohmann") {
  SafetensorsWriter w;
  const std::vector<std::uint8_t> u8 = {1, 2, 3};
  const std::vector<float> f = {1.5f, -2.0f};
  const std::vector<double> d = {0.25};
  const std::vector<std::int32_t> i = {-7, 9, 11};
  w.add("bytes", std::span<const std::uint8_t>(u8), {3});
  w.add("half", std::span<const float>(f), {2}, DType::F16);
  w.add("float", std::span<const float>(f), {1, 2});
  w.add("double", std::span<const double>(d), {1});
  w.add("ints", std::span<const std::int32_t>(i), {3});
  w.set_metadata("format", "pt");
  const std::vector<std::byte> out = w.to_bytes();

  REQUIRE(out.size() >= 8);
  std::uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = (n << 8) | std::to_integer<std::uint64_t>(out[static_cast<std::size_t>(k)]);
  CHECK(n % 8 == 0);  // so the data section starts 8-aligned
  REQUIRE(8 + n <= out.size());
  const std::string header(reinterpret_cast<const char*>(out.data() + 8), static_cast<std::size_t>(n));
  const auto close = header.find_last_of('}');
  REQUIRE(close != std::string::npos);
  CHECK(header.find_first_not_of(' ', close + 1) == std::string::npos);  // only space padding
  const nlohmann::json j = nlohmann::json::parse(header);
  REQUIRE(j.is_object());
  CHECK(j.at("__metadata__") == nlohmann::json{{"format", "pt"}});
  CHECK(j.at("half").at("dtype") == "F16");
  CHECK(j.at("float").at("shape") == nlohmann::json::array({1, 2}));

  // Contiguous data (no holes, as the reference reader demands) and natural alignment of every
  // tensor in the file, which the writer gets by laying out larger elements first.
  const std::size_t data_size = out.size() - 8 - static_cast<std::size_t>(n);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (const auto& [name, e] : j.items()) {
    if (name == "__metadata__") continue;
    const auto b = e.at("data_offsets")[0].get<std::uint64_t>();
    const auto en = e.at("data_offsets")[1].get<std::uint64_t>();
    ranges.emplace_back(b, en);
    const auto size = dtype_size(*parse_dtype(e.at("dtype").get<std::string>()));
    INFO(name);
    CHECK((8 + n + b) % size == 0);
  }
  std::sort(ranges.begin(), ranges.end());
  std::uint64_t at = 0;
  for (const auto& [b, en] : ranges) {
    CHECK(b == at);
    at = en;
  }
  CHECK(at == data_size);
  // The double's bytes, read independently.
  const auto db = j.at("double").at("data_offsets")[0].get<std::size_t>();
  double got = 0;
  std::memcpy(&got, out.data() + 8 + n + db, 8);
  CHECK(got == 0.25);
}

TEST_CASE("safetensors: writer writes atomically and reports Io errors naming the path") {
  const std::vector<float> v = {1, 2, 3};
  SafetensorsWriter w;
  w.add("v", std::span<const float>(v), {3});
  const fs::path p = scratch() / "atomic.safetensors";
  {
    std::ofstream old(p);
    old << "old contents";
  }
  w.write(p);
  CHECK_FALSE(fs::exists(p.string() + ".tmp"));
  CHECK(SafetensorsFile(p).read<float>("v") == v);
  CHECK(same_bytes(read_bytes(p), w.to_bytes()));

  const fs::path bad = scratch() / "no-such-dir" / "out.safetensors";
  const std::string msg = expect_error([&] { w.write(bad); }, ErrorKind::Io);
  CHECK_THAT(msg, Catch::StartsWith(bad.string() + ": "));
  CHECK_FALSE(fs::exists(bad));

  // Renaming over a directory fails after the temporary was written: it must be cleaned up.
  const fs::path dir_target = scratch() / "is-a-dir.safetensors";
  fs::create_directories(dir_target / "child");
  const std::string msg2 = expect_error([&] { w.write(dir_target); }, ErrorKind::Io);
  CHECK_THAT(msg2, Catch::Contains("is-a-dir.safetensors"));
  CHECK_FALSE(fs::exists(dir_target.string() + ".tmp"));
}

TEST_CASE("safetensors: writer rejects duplicate names and bad input") {
  SafetensorsWriter w;
  const std::vector<float> v = {1, 2};
  w.add("x", std::span<const float>(v), {2});
  CHECK_THAT(expect_error([&] { w.add("x", std::span<const float>(v), {2}); }, ErrorKind::DuplicateName),
             Catch::Contains("'x'"));
  expect_error([&] { w.add("y", std::span<const float>(v), {3}); }, ErrorKind::ShapeMismatch);
  expect_error([&] { w.add("y", std::span<const float>(v), {-2}); }, ErrorKind::BadShape);
  expect_error([&] { w.add("y", std::span<const float>(v), {2}, DType::I32); }, ErrorKind::DTypeMismatch);
  expect_error([&] { w.add("y", std::span<const std::int32_t>(std::vector<std::int32_t>{1}), {1}, DType::F32); },
               ErrorKind::DTypeMismatch);
  expect_error([&] { w.add("y", std::span<const std::int64_t>(std::vector<std::int64_t>{1, 300}), {2}, DType::U8); },
               ErrorKind::OutOfRange);
  expect_error([&] { w.add("y", std::span<const std::int32_t>(std::vector<std::int32_t>{2}), {1}, DType::BOOL); },
               ErrorKind::OutOfRange);
  expect_error([&] { w.add("y", std::span<const std::int64_t>(std::vector<std::int64_t>{1ll << 40}), {1}, DType::I32); },
               ErrorKind::OutOfRange);
  expect_error([&] { w.add("y", DType::F32, {4}, nullptr); }, ErrorKind::SizeMismatch);
  expect_error([&] { w.add("__metadata__", std::span<const float>(v), {2}); }, ErrorKind::InvalidHeader);
  expect_error([&] { w.add("bad\xff", std::span<const float>(v), {2}); }, ErrorKind::InvalidUtf8);
  expect_error([&] { w.set_metadata("k", "\xc0\x80"); }, ErrorKind::InvalidUtf8);
  // Failed adds leave nothing behind, so the name is still free and the file still valid.
  CHECK(w.size() == 1);
  CHECK_FALSE(w.contains("y"));
  const std::uint8_t raw[] = {0x00, 0x3C};
  w.add("y", DType::F16, {1}, raw);
  w.add("z", DType::F16, {0}, nullptr);
  const auto f = SafetensorsFile::from_bytes(w.to_bytes());
  CHECK(f.read<float>("y") == std::vector<float>{1.0f});
  CHECK(f.names().size() == 3);
}

TEST_CASE("safetensors: files are movable and keep their data valid") {
  SafetensorsWriter w;
  const std::vector<double> v = {1, 2, 3, 4};
  w.add("v", std::span<const double>(v), {2, 2});
  const fs::path p = scratch() / "move.safetensors";
  w.write(p);

  SafetensorsFile a(p);
  SafetensorsFile b(std::move(a));
  CHECK(b.read<double>("v") == v);
  SafetensorsFile c = SafetensorsFile::from_bytes(w.to_bytes(), "owned");
  c = std::move(b);  // unmaps nothing that is still in use; c now holds the mapping
  CHECK(c.read<double>("v") == v);
  CHECK(c.path() == p.string());
  std::vector<SafetensorsFile> many;
  for (int i = 0; i < 10; ++i) many.push_back(SafetensorsFile::from_bytes(w.to_bytes()));
  for (const auto& m : many) CHECK(m.read<double>("v") == v);
}

TEST_CASE("safetensors: asking for huge pages keeps a mapped file's values and leaves caller bytes alone") {
  // 6 MiB of floats, so the mapping spans whole 2 MiB regions the kernel may map with one entry each.
  std::vector<float> v(std::size_t(3) << 19);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = float(i % 1000) * 0.5f - float(i / 1000);
  SafetensorsWriter w;
  w.add("v", std::span<const float>(v), {std::int64_t(v.size())});
  const fs::path p = scratch() / "huge.safetensors";
  w.write(p);
  const SafetensorsFile f(p);
  REQUIRE(f.is_mapped());
  f.advise_huge_pages();  // before the first read, as the BF16 loader calls it
  detail::prefault_read(f.info("v").bytes);
  CHECK(f.read<float>("v") == v);
  const SafetensorsFile twin(p);
  twin.advise_huge_pages();  // a second mapping of the same file: still the same values
  CHECK(twin.read<float>("v") == v);
  const auto owned = SafetensorsFile::from_bytes(w.to_bytes(), "owned");
  CHECK_FALSE(owned.is_mapped());
  owned.advise_huge_pages();  // no mapping: nothing to advise
  CHECK(owned.read<float>("v") == v);
}

// ---------------------------------------------------------------------------------------------
// Malformed files: one case per class; each asserts the kind and that the message names the file
// ---------------------------------------------------------------------------------------------

namespace {
const std::string kGoodHeader = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
const std::vector<std::uint8_t> kGoodData = {0, 0, 0x80, 0x3F, 0, 0, 0, 0x40};
}  // namespace

TEST_CASE("safetensors: malformed - truncated file") {
  // Shorter than the length prefix.
  expect_open_error(to_bytes("abc"), ErrorKind::Truncated, "tiny.safetensors");
  expect_open_error({}, ErrorKind::Truncated, "empty.safetensors");
  // A valid file cut inside its data section (an interrupted download).
  auto bytes = make_file(kGoodHeader, kGoodData);
  REQUIRE_NOTHROW(SafetensorsFile::borrow_bytes(bytes));
  bytes.erase(bytes.end() - 3, bytes.end());  // (erase, not resize: g++ -O1 -fsanitize misreads resize)
  const std::string msg = expect_open_error(bytes, ErrorKind::Truncated, "cut.safetensors");
  CHECK_THAT(msg, Catch::Contains("'w'"));
}

TEST_CASE("safetensors: malformed - header length beyond file") {
  const std::string msg =
      expect_open_error(make_file(kGoodHeader, kGoodData, kGoodHeader.size() + 100), ErrorKind::HeaderTooLarge,
                        "longheader.safetensors");
  CHECK_THAT(msg, Catch::Contains(std::to_string(kGoodHeader.size() + 100)));
  expect_open_error(make_file("{}", {}, std::uint64_t{1} << 62), ErrorKind::HeaderTooLarge, "huge.safetensors");
  // A file cut inside its header.
  auto bytes = make_file(kGoodHeader, kGoodData);
  bytes.erase(bytes.begin() + 20, bytes.end());
  expect_open_error(bytes, ErrorKind::HeaderTooLarge, "cutheader.safetensors");
}

TEST_CASE("safetensors: malformed - header length below 2") {
  expect_open_error(make_file("", {}), ErrorKind::HeaderTooSmall, "len0.safetensors");
  expect_open_error(make_file("{", {}), ErrorKind::HeaderTooSmall, "len1.safetensors");
  // Two bytes is the minimal valid header: "{}".
  CHECK(SafetensorsFile::borrow_bytes(make_file("{}")).size() == 0);
}

TEST_CASE("safetensors: malformed - invalid JSON") {
  expect_open_error(make_file(R"({"w":{"dtype":"F32",)"), ErrorKind::InvalidJson, "cutjson.safetensors");
  expect_open_error(make_file(R"({w: 1})"), ErrorKind::InvalidJson, "unquoted.safetensors");
  expect_open_error(make_file("{}  x"), ErrorKind::InvalidJson, "trailing.safetensors");
  expect_open_error(make_file(std::string("{}\0\0", 4)), ErrorKind::InvalidJson, "nulpad.safetensors");
  const std::string msg = expect_open_error(make_file("{} {}"), ErrorKind::InvalidJson, "twodocs.safetensors");
  CHECK_THAT(msg, Catch::Contains("not valid JSON"));
  CHECK_THAT(msg, Catch::Contains("line 1"));
}

TEST_CASE("safetensors: malformed - non-UTF-8 bytes in header") {
  const std::string msg =
      expect_open_error(make_file("{\"w\xff\":1}"), ErrorKind::InvalidUtf8, "badutf8.safetensors");
  CHECK_THAT(msg, Catch::Contains("0xFF"));
  CHECK_THAT(msg, Catch::Contains("offset 3"));
  expect_open_error(make_file("{\"\xc0\xaf\":1}"), ErrorKind::InvalidUtf8, "overlong.safetensors");
  expect_open_error(make_file("{\"\xed\xa0\x80\":1}"), ErrorKind::InvalidUtf8, "surrogate.safetensors");
  expect_open_error(make_file("{\"\xf4\x90\x80\x80\":1}"), ErrorKind::InvalidUtf8, "toobig.safetensors");
  expect_open_error(make_file("{\"\xe2\x82\":1}"), ErrorKind::InvalidUtf8, "cutseq.safetensors");
  // Valid multi-byte names are fine.
  const std::string ok = "{\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}";
  const auto bytes = make_file(ok, {5});
  CHECK(SafetensorsFile::borrow_bytes(bytes).contains("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"));
}

TEST_CASE("safetensors: malformed - header is not an object") {
  expect_open_error(make_file("[1, 2]"), ErrorKind::InvalidHeader, "array.safetensors");
  expect_open_error(make_file("42"), ErrorKind::InvalidHeader, "number.safetensors");
  expect_open_error(make_file(R"("str")"), ErrorKind::InvalidHeader, "string.safetensors");
  const std::string msg = expect_open_error(make_file(R"({"w": [1]})"), ErrorKind::InvalidHeader,
                                            "entryarray.safetensors");
  CHECK_THAT(msg, Catch::Contains("'w'"));
}

TEST_CASE("safetensors: malformed - unknown dtype") {
  const std::string msg = expect_open_error(
      make_file(R"({"w":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", {0, 0}), ErrorKind::UnknownDType,
      "dtype.safetensors");
  CHECK_THAT(msg, Catch::Contains("F8_E4M3"));
  CHECK_THAT(msg, Catch::Contains("'w'"));
  expect_open_error(make_file(R"({"w":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", {0, 0, 0, 0}),
                    ErrorKind::UnknownDType, "dtypenum.safetensors");
}

TEST_CASE("safetensors: malformed - negative or non-integer shape") {
  const std::string msg = expect_open_error(
      make_file(R"({"w":{"dtype":"F32","shape":[2,-1],"data_offsets":[0,8]}})", kGoodData), ErrorKind::BadShape,
      "negshape.safetensors");
  CHECK_THAT(msg, Catch::Contains("-1"));
  expect_open_error(make_file(R"({"w":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", kGoodData),
                    ErrorKind::BadShape, "floatshape.safetensors");
  expect_open_error(make_file(R"({"w":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}})", kGoodData),
                    ErrorKind::BadShape, "strshape.safetensors");
  expect_open_error(make_file(R"({"w":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", kGoodData),
                    ErrorKind::BadShape, "scalarshape.safetensors");
  expect_open_error(
      make_file(R"({"w":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,8]}})", kGoodData),
      ErrorKind::BadShape, "hugedim.safetensors");
  expect_open_error(
      make_file(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", kGoodData),
      ErrorKind::BadShape, "overflow.safetensors");
  // A zero dimension makes the product 0 even after huge ones.
  const auto ok = make_file(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}})");
  CHECK(SafetensorsFile::borrow_bytes(ok).info("w").numel() == 0);
}

TEST_CASE("safetensors: malformed - offsets reversed") {
  const std::string msg = expect_open_error(
      make_file(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", kGoodData), ErrorKind::BadOffsets,
      "reversed.safetensors");
  CHECK_THAT(msg, Catch::Contains("reversed"));
  expect_open_error(make_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", kGoodData),
                    ErrorKind::BadOffsets, "oneoffset.safetensors");
  expect_open_error(make_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", kGoodData),
                    ErrorKind::BadOffsets, "negoffset.safetensors");
  expect_open_error(make_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":"0,8"}})", kGoodData),
                    ErrorKind::BadOffsets, "stroffset.safetensors");
}

TEST_CASE("safetensors: malformed - offsets past data end") {
  const std::string msg = expect_open_error(
      make_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", kGoodData), ErrorKind::Truncated,
      "pastend.safetensors");
  CHECK_THAT(msg, Catch::Contains("8-byte data section"));
  expect_open_error(
      make_file(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[99,99]}})", kGoodData), ErrorKind::Truncated,
      "emptypastend.safetensors");
}

TEST_CASE("safetensors: malformed - overlapping tensors") {
  const std::string msg = expect_open_error(
      make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                R"("b":{"dtype":"U8","shape":[2],"data_offsets":[7,9]}})",
                {0, 0, 0, 0, 0, 0, 0, 0, 0}),
      ErrorKind::OverlappingOffsets, "overlap.safetensors");
  CHECK_THAT(msg, Catch::Contains("'a' [0, 8)"));
  CHECK_THAT(msg, Catch::Contains("'b' [7, 9)"));
  // Overlap with a non-neighbour: c sits inside a, after b starts.
  expect_open_error(make_file(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]},)"
                              R"("c":{"dtype":"U8","shape":[1],"data_offsets":[5,6]}})",
                              kGoodData),
                    ErrorKind::OverlappingOffsets, "overlap2.safetensors");
  // Identical ranges overlap too; empty ranges never do.
  expect_open_error(make_file(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                              R"("b":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})",
                              kGoodData),
                    ErrorKind::OverlappingOffsets, "same.safetensors");
  const auto ok = make_file(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                            R"("b":{"dtype":"U8","shape":[0],"data_offsets":[1,1]}})",
                            kGoodData);
  CHECK(SafetensorsFile::borrow_bytes(ok).size() == 2);
}

TEST_CASE("safetensors: malformed - byte size does not match shape") {
  const std::vector<std::uint8_t> data(12, 0);
  const std::string msg = expect_open_error(
      make_file(R"({"blocks.0.norm1.weight":{"dtype":"F32","shape":[768],"data_offsets":[0,12]}})", data),
      ErrorKind::SizeMismatch, "model.safetensors");
  CHECK_THAT(msg, Catch::EndsWith("model.safetensors: tensor 'blocks.0.norm1.weight' data_offsets [0, 12) do not "
                                  "match shape [768] of F32 (3072 bytes)"));
}

TEST_CASE("safetensors: malformed - duplicate names and other structural errors") {
  const std::string msg = expect_open_error(
      make_file(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                R"("w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                kGoodData),
      ErrorKind::DuplicateName, "dupname.safetensors");
  CHECK_THAT(msg, Catch::Contains("'w'"));
  expect_open_error(make_file(R"({"w":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}})", kGoodData),
                    ErrorKind::DuplicateName, "dupkey.safetensors");
  expect_open_error(make_file(R"({"w":{"shape":[1],"data_offsets":[0,1]}})", kGoodData), ErrorKind::InvalidHeader,
                    "nodtype.safetensors");
  expect_open_error(make_file(R"({"w":{"dtype":"U8","data_offsets":[0,1]}})", kGoodData), ErrorKind::InvalidHeader,
                    "noshape.safetensors");
  expect_open_error(make_file(R"({"w":{"dtype":"U8","shape":[1]}})", kGoodData), ErrorKind::InvalidHeader,
                    "nooffsets.safetensors");
  expect_open_error(make_file(R"({"__metadata__":{"k":1}})"), ErrorKind::InvalidHeader, "metanum.safetensors");
  expect_open_error(make_file(R"({"__metadata__":["k"]})"), ErrorKind::InvalidHeader, "metaarray.safetensors");
  std::string deep(200, '[');
  deep = R"({"__metadata__":)" + deep + std::string(200, ']') + "}";
  expect_open_error(make_file(deep), ErrorKind::InvalidJson, "deep.safetensors");
}

// ---------------------------------------------------------------------------------------------
// Read-time errors
// ---------------------------------------------------------------------------------------------

namespace {
SafetensorsFile small_file(const std::string& fname) {
  SafetensorsWriter w;
  const std::vector<float> v(6, 1.0f);
  const std::vector<std::int64_t> ints = {1, 300, -1};
  const std::vector<std::uint8_t> u8 = {0, 200};
  const bool b[] = {true, false};
  w.add("blocks.0.weight", std::span<const float>(v), {2, 3});
  w.add("ints", std::span<const std::int64_t>(ints), {3});
  w.add("bytes", std::span<const std::uint8_t>(u8), {2});
  w.add("flags", std::span<const bool>(b), {2});
  const fs::path p = scratch() / fname;
  w.write(p);
  return SafetensorsFile(p);
}
}  // namespace

TEST_CASE("safetensors: missing tensor names the tensor and the file") {
  const SafetensorsFile f = small_file("missing.safetensors");
  std::vector<float> dst(6);
  for (auto fn : std::vector<std::function<void()>>{
           [&] { (void)f.info("blocks.1.weight"); },
           [&] { f.read_as<float>("blocks.1.weight", dst); },
           [&] { f.read_into<float>("blocks.1.weight", {2, 3}, dst); },
       }) {
    const std::string msg = expect_error(fn, ErrorKind::MissingTensor);
    CHECK_THAT(msg, Catch::Contains("missing.safetensors"));
    CHECK_THAT(msg, Catch::Contains("'blocks.1.weight'"));
    CHECK_THAT(msg, Catch::Contains("'blocks.0.weight'"));  // lists what the file has
  }
}

TEST_CASE("safetensors: dtype mismatch on read") {
  const SafetensorsFile f = small_file("dtype_read.safetensors");
  std::vector<float> fl(3);
  std::vector<std::int64_t> in(6);
  std::string msg = expect_error([&] { f.read_as<float>("ints", fl); }, ErrorKind::DTypeMismatch);
  CHECK_THAT(msg, Catch::Contains("dtype_read.safetensors"));
  CHECK_THAT(msg, Catch::Contains("'ints' is I64"));
  msg = expect_error([&] { f.read_as<std::int64_t>("blocks.0.weight", in); }, ErrorKind::DTypeMismatch);
  CHECK_THAT(msg, Catch::Contains("F32"));
  expect_error([&] { (void)f.read<double>("flags"); }, ErrorKind::DTypeMismatch);
}

TEST_CASE("safetensors: shape mismatch on read") {
  const SafetensorsFile f = small_file("shape_read.safetensors");
  std::vector<float> dst(6);
  f.read_into<float>("blocks.0.weight", {2, 3}, dst);
  CHECK(dst == std::vector<float>(6, 1.0f));
  std::string msg = expect_error([&] { f.read_into<float>("blocks.0.weight", {3, 2}, dst); }, ErrorKind::ShapeMismatch);
  CHECK_THAT(msg, Catch::Contains("shape_read.safetensors"));
  CHECK_THAT(msg, Catch::Contains("[2, 3]"));
  CHECK_THAT(msg, Catch::Contains("[3, 2]"));
  std::vector<float> small(5);
  msg = expect_error([&] { f.read_as<float>("blocks.0.weight", small); }, ErrorKind::ShapeMismatch);
  CHECK_THAT(msg, Catch::Contains("5 elements"));
  // Shape matches but the destination is the wrong size.
  expect_error([&] { f.read_into<float>("blocks.0.weight", {2, 3}, small); }, ErrorKind::ShapeMismatch);
}

TEST_CASE("safetensors: integer reads are range checked") {
  const SafetensorsFile f = small_file("ranges.safetensors");
  CHECK(f.read<std::int64_t>("ints") == std::vector<std::int64_t>{1, 300, -1});
  CHECK(f.read<std::int16_t>("ints") == std::vector<std::int16_t>{1, 300, -1});
  std::string msg = expect_error([&] { (void)f.read<std::uint8_t>("ints"); }, ErrorKind::OutOfRange);
  CHECK_THAT(msg, Catch::Contains("element 1"));
  CHECK_THAT(msg, Catch::Contains("300"));
  CHECK_THAT(msg, Catch::Contains("uint8"));
  expect_error([&] { (void)f.read<std::uint32_t>("ints"); }, ErrorKind::OutOfRange);
  bool b[3];
  expect_error([&] { f.read_as<bool>("ints", b); }, ErrorKind::OutOfRange);
  expect_error([&] { (void)f.read<std::int8_t>("bytes"); }, ErrorKind::OutOfRange);
  CHECK(f.read<std::uint64_t>("bytes") == std::vector<std::uint64_t>{0, 200});
  bool flags[2];
  f.read_as<bool>("flags", flags);
  CHECK(flags[0]);
  CHECK_FALSE(flags[1]);
}

TEST_CASE("safetensors: non-0/1 BOOL bytes read as true") {
  const auto bytes = make_file(R"({"b":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", {0, 1, 0x80});
  const auto f = SafetensorsFile::borrow_bytes(bytes);
  bool b[3];
  f.read_as<bool>("b", b);
  CHECK_FALSE(b[0]);
  CHECK(b[1]);
  CHECK(b[2]);
}

TEST_CASE("safetensors: open errors name the path") {
  const fs::path missing = scratch() / "does-not-exist.safetensors";
  std::string msg = expect_error([&] { SafetensorsFile f(missing); }, ErrorKind::Io);
  CHECK_THAT(msg, Catch::StartsWith(missing.string() + ": "));
  msg = expect_error([&] { SafetensorsFile f(scratch()); }, ErrorKind::Io);
  CHECK_THAT(msg, Catch::Contains("not a regular file"));
}

TEST_CASE("safetensors: convenience call forms") {
  // Plain containers and braced shapes, without spelling out spans.
  const std::vector<float> v = {1, 2, 3, 4, 5, 6};
  const std::vector<std::int64_t> idx = {3, 1};
  const std::array<double, 2> arr = {0.5, 0.25};
  SafetensorsWriter w;
  w.add("v", v, {2, 3});
  w.add("v16", v, {6}, DType::F16);
  w.add("idx", idx, {2});
  w.add("arr", arr, {2});
  const fs::path p = scratch() / "forms.safetensors";
  w.write(p.string());                 // std::string path
  const SafetensorsFile f(p.string());  // std::string opens the path
  std::vector<float> out(6);
  f.read_into<float>("v", {2, 3}, out);
  CHECK(out == v);
  f.read_as<float>("v16", out);
  CHECK(out == v);
  CHECK(f.read<std::int64_t>("idx") == idx);
  std::array<double, 2> back{};
  f.read_as<double>("arr", back);
  CHECK(back == arr);
  const SafetensorsFile g(p.c_str());  // and so does a C string
  CHECK(g.names() == f.names());
}
