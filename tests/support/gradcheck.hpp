#pragma once
// Gradient-check harness for ttmoe ops (the test_gradcheck cases of tests/core, nn and models, and tests/moe).
//
// A case maps a list of double input tensors (any ranks, random shapes) to an output tensor of any
// shape. The harness turns the output into a scalar that is NOT a plain sum,
//     L = sum_all(out * U)      with U a fixed random "upstream" tensor of out's shape,
// so that every output element's gradient matters, runs autograd::backward under a Tape, and compares
// the gradient of every differentiable input with central finite differences in double,
//     dL/dx_i ~ (L(x + h e_i) - L(x - h e_i)) / 2h,
// element by element: |analytic - numeric| <= atol + rtol * |numeric|. The finite-difference loss is
// evaluated under NoGrad and contracted with U by a plain loop (not by the library).
//
// Kinks: a case declares where its function is not differentiable (Kink functions below: the
// distance of the drawn inputs to the nearest kink, e.g. |x - 0| for relu/abs, the smallest gap
// between two values for max/min/maximum/topk ties). Inputs are RE-DRAWN (fresh random values and
// shapes from the same seeded stream) until every declared kink is farther than 3h from every
// element, so a +-h step can never cross a kink; the number of re-draws is reported. (Re-drawing
// rather than nudging keeps the inputs' distribution simple and the rule uniform for any kink.)
//
// Shapes are drawn by each variant's shape function from a seeded generator (Rng), so a case runs
// at several random shapes; the seed is derived from the case name (and TTMOE_GRADCHECK_SEED if set,
// to explore other draws). Each result carries the max abs / rel errors; the failure message names
// the case, variant, draw, input, element and both values. The relative error is reported over
// elements whose gradient is at least 1e-3 in magnitude (below that it is abs-error noise).
//
// Registry: GRADCHECK_CASE("name") { return Case()...; } registers a case under a unique name and
// defines the Catch2 TEST_CASE "gradcheck/name" that runs it; registry() lists every case so that a
// coverage test can run them all and inspect the tape node names each case produced.
//
//   GRADCHECK_CASE("exp") {
//     return Case().covers("exp").range(-2, 2)
//         .variant("rank2", [](Rng& r) { return Shapes{{r.ext(1, 5), r.ext(1, 5)}}; },
//                  [](const Inputs& in) -> Output { return exp(in.get<2>(0)); });
//   }

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <ttmoe/ttmoe.hpp>

namespace ttmoe::gradcheck {

/// Deterministic generator (splitmix64): the same seed gives the same draws on every platform.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : s_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (s_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Uniform in [lo, hi).
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  /// Uniform integer in [lo, hi] (inclusive): a random extent.
  index_t ext(index_t lo, index_t hi) { return lo + static_cast<index_t>(next() % (hi - lo + 1)); }
  /// Uniform index in [0, n).
  std::int64_t index(index_t n) { return static_cast<std::int64_t>(next() % n); }

 private:
  std::uint64_t s_;
};

using Extents = std::vector<index_t>;
/// One Extents per input.
using Shapes = std::vector<Extents>;

inline std::string extents_str(const Extents& e) {
  std::string s = "[";
  for (std::size_t i = 0; i < e.size(); ++i) s += (i ? ", " : "") + std::to_string(e[i]);
  return s + "]";
}
inline index_t numel_of(const Extents& e) {
  index_t n = 1;
  for (auto x : e) n *= x;
  return n;
}

/// A random int64 index tensor of the given extents with values in [0, bound).
template <std::size_t R>
IndexTensor<DynShape<R>> random_indices(Rng& r, const std::array<index_t, R>& e, index_t bound) {
  std::vector<std::int64_t> v(extent_product(e, 0, R));
  for (auto& x : v) x = r.index(bound);
  return IndexTensor<DynShape<R>>::from_host(DynShape<R>::from_extents(e), v);
}

inline constexpr std::size_t kMaxRank = 6;

namespace detail {
template <class Seq>
struct leaf_variant;
template <std::size_t... R>
struct leaf_variant<std::index_sequence<R...>> {
  using type = std::variant<Tensor<double, DynShape<R>>...>;
};
using Leaf = leaf_variant<std::make_index_sequence<kMaxRank + 1>>::type;

template <std::size_t R>
Leaf make_leaf_r(const Extents& e, const std::vector<double>& v, bool grad) {
  std::array<index_t, R> a{};
  // A rank-0 std::array has a null begin(): copying into it, even nothing, is memmove(nullptr, ...)
  // as far as GCC's -Wnonnull can see.
  if constexpr (R > 0) std::copy(e.begin(), e.end(), a.begin());
  auto t = Tensor<double, DynShape<R>>::from_host(DynShape<R>::from_extents(a, "gradcheck input"), v);
  if (grad) t.set_requires_grad();
  return Leaf(std::in_place_index<R>, std::move(t));
}
template <std::size_t... R>
Leaf make_leaf(const Extents& e, const std::vector<double>& v, bool grad, std::index_sequence<R...>) {
  Leaf out;
  const bool found = ((e.size() == R ? (out = make_leaf_r<R>(e, v, grad), true) : false) || ...);
  if (!found) throw ValueError("gradcheck: input rank " + std::to_string(e.size()) + " above kMaxRank");
  return out;
}
}  // namespace detail

/// The inputs handed to a case's function: leaf tensors of double, typed by rank.
class Inputs {
 public:
  Inputs(std::vector<detail::Leaf> leaves, Shapes ext, std::uint64_t seed)
      : leaves_(std::move(leaves)), ext_(std::move(ext)), seed_(seed) {}

  /// Input i as a rank-R dynamic tensor (the leaf itself: gradients reach the harness).
  template <std::size_t R>
  Tensor<double, DynShape<R>> get(std::size_t i) const {
    const auto* t = std::get_if<R>(&leaves_.at(i));
    if (!t)
      throw ValueError("gradcheck: input " + std::to_string(i) + " has rank " + std::to_string(ext_[i].size()) +
                       ", requested rank " + std::to_string(R));
    return *t;
  }
  /// Input i re-typed as shape type S (static extents checked; shares the leaf's gradient).
  template <ShapeType S>
  Tensor<double, S> get_as(std::size_t i) const {
    return get<S::rank>(i).template as<S>("gradcheck input");
  }
  const Extents& extents(std::size_t i) const { return ext_.at(i); }
  index_t extent(std::size_t i, std::size_t d) const { return ext_.at(i).at(d); }
  std::size_t size() const { return leaves_.size(); }
  /// A generator for auxiliary data (index tensors...): the same stream on every call within one
  /// draw, so finite differences see the same indices as the backward pass.
  Rng rng(std::uint64_t salt = 0) const { return Rng(seed_ ^ (salt * 0x9e3779b97f4a7c15ULL)); }

 private:
  std::vector<detail::Leaf> leaves_;
  Shapes ext_;
  std::uint64_t seed_;
};

/// A case's output: any double tensor or lazy expression (evaluated inside the case, so recorded).
class Output {
 public:
  template <ShapeType S>
  Output(const Tensor<double, S, cpu>& t)  // NOLINT: implicit on purpose
      : values_(t.to_vector()) {
    const auto e = t.extents();  // one array: begin() and end() must come from the same object
    extents_.assign(e.begin(), e.end());
    contract_ = [t](const std::vector<double>& u) {
      auto up = Tensor<double, S, cpu>::from_host(t.shape(), u);
      return sum_all(t * up);
    };
  }
  template <LazyExpression E>
  Output(const E& e) : Output(eval(e)) {}  // NOLINT

  const Extents& extents() const { return extents_; }
  const std::vector<double>& values() const { return values_; }
  /// sum_all(out * upstream), recorded on the active tape.
  Tensor<double, Shape<>> contract(const std::vector<double>& upstream) const { return contract_(upstream); }

 private:
  Extents extents_;
  std::vector<double> values_;
  std::function<Tensor<double, Shape<>>(const std::vector<double>&)> contract_;
};

/// Everything about one draw a kink function may read.
struct Draw {
  const Shapes& extents;
  const std::vector<std::vector<double>>& values;
};
/// Distance from the drawn inputs to the nearest point where the case's function is not
/// differentiable; the harness re-draws until it exceeds 3h.
using Kink = std::function<double(const Draw&)>;

/// Kink at `point` for every element of input i (relu and abs at 0).
inline Kink kink_at(std::size_t input, double point) {
  return [=](const Draw& d) {
    double m = std::numeric_limits<double>::infinity();
    if (input < d.values.size())  // variants with fewer inputs skip the kink
      for (double x : d.values[input]) m = std::min(m, std::abs(x - point));
    return m;
  };
}
/// Kinks at ties between any two values of the listed inputs (max/min reductions, topk, maximum,
/// minimum): the smallest gap between two of their values.
inline Kink ties_between(std::vector<std::size_t> inputs) {
  return [inputs](const Draw& d) {
    std::vector<double> all;
    for (auto i : inputs)
      if (i < d.values.size()) all.insert(all.end(), d.values[i].begin(), d.values[i].end());
    std::sort(all.begin(), all.end());
    double m = std::numeric_limits<double>::infinity();
    for (std::size_t k = 1; k < all.size(); ++k) m = std::min(m, all[k] - all[k - 1]);
    return m;
  };
}
/// Ties within one input.
inline Kink ties_within(std::size_t input) { return ties_between({input}); }

/// One way of calling the op: a shape generator and the function under test.
struct Variant {
  std::string label;
  std::function<Shapes(Rng&)> shapes;
  std::function<Output(const Inputs&)> f;
};

/// A gradcheck case: variants plus input ranges, kinks and tolerances.
struct Case {
  std::vector<Variant> variants;
  std::vector<std::string> functors;  // elementwise functors (op::X::name) this case covers
  double lo = -2, hi = 2;
  std::map<std::size_t, std::pair<double, double>> ranges;
  std::set<std::size_t> masks, constants;
  std::vector<Kink> kinks;
  double h = 1e-6, atol = 1e-6, rtol = 1e-5;
  int draws = 3;
  int max_attempts = 1000;
  std::uint64_t seed = 0;

  /// Declares that this case exercises elementwise functor `name` (op::X::name).
  Case& covers(std::string name) {
    functors.push_back(std::move(name));
    return *this;
  }
  /// Value range of every input (default [-2, 2)).
  Case& range(double l, double u) {
    lo = l;
    hi = u;
    return *this;
  }
  /// Value range of input i (e.g. positive for log, sqrt, rsqrt, a pow base, a divisor).
  Case& range_of(std::size_t i, double l, double u) {
    ranges[i] = {l, u};
    return *this;
  }
  /// Input i holds random 0/1 values and gets no gradient (where's mask).
  Case& mask_input(std::size_t i) {
    masks.insert(i);
    constants.insert(i);
    return *this;
  }
  /// Input i gets no gradient (a frozen operand).
  Case& constant_input(std::size_t i) {
    constants.insert(i);
    return *this;
  }
  Case& kink(Kink k) {
    kinks.push_back(std::move(k));
    return *this;
  }
  Case& step(double step_h) {
    h = step_h;
    return *this;
  }
  Case& tolerance(double abs_tol, double rel_tol) {
    atol = abs_tol;
    rtol = rel_tol;
    return *this;
  }
  /// Random draws (shapes and values) per variant (default 3).
  Case& repeat(int n) {
    draws = n;
    return *this;
  }
  Case& with_seed(std::uint64_t s) {
    seed = s;
    return *this;
  }
  Case& variant(std::string label, std::function<Shapes(Rng&)> shapes, std::function<Output(const Inputs&)> f) {
    variants.push_back({std::move(label), std::move(shapes), std::move(f)});
    return *this;
  }
};

/// What running a case found.
struct Result {
  bool ok = true;
  std::string message;               // first failure (with context), empty when ok
  double max_abs_err = 0;            // over every checked element
  double max_rel_err = 0;            // |a - n| / max(|a|, |n|), over elements with max(|a|, |n|) >= 1e-3
  std::size_t checked = 0;           // gradient elements compared
  int redraws = 0;                   // draws rejected for lying within 3h of a kink
  std::set<std::string> node_names;  // tape node names the case's functions recorded
};

namespace detail {
inline std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}
inline std::uint64_t env_seed() {
  const char* e = std::getenv("TTMOE_GRADCHECK_SEED");
  return e ? std::strtoull(e, nullptr, 10) : 0;
}
inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  long double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += static_cast<long double>(a[i]) * b[i];
  return static_cast<double>(s);
}
}  // namespace detail

/// Runs every variant of a case `draws` times; never throws (exceptions become failures).
inline Result run_case(const std::string& name, const Case& c) {
  Result res;
  const std::uint64_t base = (c.seed ? c.seed : detail::fnv1a(name)) ^ detail::env_seed();
  auto fail = [&](const std::string& where, const std::string& what) {
    if (res.ok) res.message = where + ": " + what;
    res.ok = false;
  };
  for (std::size_t vi = 0; vi < c.variants.size(); ++vi) {
    const Variant& v = c.variants[vi];
    for (int d = 0; d < c.draws; ++d) {
      const std::string where = "case '" + name + "' variant '" + v.label + "' draw " + std::to_string(d);
      try {
        Rng rng(base + 0x1000 * (vi + 1) + d);
        // --- draw shapes and values, re-drawing while an element lies within 3h of a kink
        Shapes ext;
        std::vector<std::vector<double>> vals;
        int attempt = 0;
        for (;; ++attempt) {
          if (attempt == c.max_attempts)
            throw ValueError("no draw away from the declared kinks in " + std::to_string(attempt) + " attempts");
          ext = v.shapes(rng);
          vals.assign(ext.size(), {});
          for (std::size_t i = 0; i < ext.size(); ++i) {
            auto r = c.ranges.count(i) ? c.ranges.at(i) : std::pair{c.lo, c.hi};
            vals[i].resize(numel_of(ext[i]));
            for (auto& x : vals[i]) x = c.masks.count(i) ? double(rng.next() & 1) : rng.uniform(r.first, r.second);
          }
          double margin = std::numeric_limits<double>::infinity();
          for (const auto& k : c.kinks) margin = std::min(margin, k(Draw{ext, vals}));
          if (margin > 3 * c.h) break;
        }
        res.redraws += attempt;

        std::vector<detail::Leaf> leaves;
        std::vector<bool> grad(ext.size());
        for (std::size_t i = 0; i < ext.size(); ++i) {
          grad[i] = !c.constants.count(i);
          leaves.push_back(detail::make_leaf(ext[i], vals[i], grad[i], std::make_index_sequence<kMaxRank + 1>{}));
        }
        const std::uint64_t aux_seed = rng.next();
        Inputs in(leaves, ext, aux_seed);

        // --- analytic gradients through the tape
        std::vector<double> upstream;
        {
          autograd::Tape tape;
          Output out = v.f(in);
          const auto names = tape.node_names();
          res.node_names.insert(names.begin(), names.end());
          upstream.resize(out.values().size());
          for (auto& u : upstream) u = rng.uniform(-1, 1);
          auto loss = out.contract(upstream);
          const double direct = detail::dot(out.values(), upstream);
          if (std::abs(loss.item() - direct) > 1e-9 * (1 + std::abs(direct)))
            fail(where, "sum_all(out * upstream) = " + std::to_string(loss.item()) + " but the loop gives " +
                            std::to_string(direct));
          autograd::backward(tape, loss);
          if (tape.size() != 0) fail(where, "the tape still holds " + std::to_string(tape.size()) + " nodes after backward");
        }
        std::vector<std::vector<double>> analytic(ext.size());
        for (std::size_t i = 0; i < ext.size(); ++i) {
          if (!grad[i]) continue;
          analytic[i] = std::visit(
              [](const auto& t) {
                auto g = t.grad();
                return g.defined() ? g.to_vector() : std::vector<double>();
              },
              leaves[i]);
          if (analytic[i].empty()) analytic[i].assign(vals[i].size(), 0.0);  // no gradient reached it: zeros
        }

        // --- central finite differences, f evaluated under NoGrad
        autograd::NoGrad ng;
        for (std::size_t i = 0; i < ext.size(); ++i) {
          if (!grad[i]) continue;
          double* p = std::visit([](const auto& t) { return t.data(); }, leaves[i]);
          for (std::size_t j = 0; j < vals[i].size(); ++j) {
            const double x0 = p[j];
            p[j] = x0 + c.h;
            const double lp = detail::dot(v.f(in).values(), upstream);
            p[j] = x0 - c.h;
            const double lm = detail::dot(v.f(in).values(), upstream);
            p[j] = x0;
            const double num = (lp - lm) / (2 * c.h), an = analytic[i][j];
            const double err = std::abs(an - num);
            ++res.checked;
            res.max_abs_err = std::max(res.max_abs_err, std::isnan(err) ? INFINITY : err);
            const double scale = std::max(std::abs(an), std::abs(num));
            if (scale >= 1e-3) res.max_rel_err = std::max(res.max_rel_err, err / scale);
            if (!(err <= c.atol + c.rtol * std::abs(num))) {
              std::ostringstream os;
              os.precision(10);
              os << "input " << i << " " << extents_str(ext[i]) << " element " << j << " (x = " << x0
                 << "): autograd " << an << " vs finite difference " << num << " (|diff| " << err << ", atol "
                 << c.atol << ", rtol " << c.rtol << ", h " << c.h << ")";
              fail(where, os.str());
            }
          }
        }
      } catch (const std::exception& e) {
        fail(where, std::string("exception: ") + e.what());
      }
    }
  }
  if (!res.ok) {
    std::ostringstream os;
    os << res.message << " [max abs err " << res.max_abs_err << ", max rel err " << res.max_rel_err << " over "
       << res.checked << " elements]";
    res.message = os.str();
  }
  return res;
}

/// A registered case: its unique name and a function building it.
struct Registered {
  std::string name;
  Case (*make)();
};
/// Every case registered with GRADCHECK_CASE in this executable, in registration order.
inline std::vector<Registered>& registry() {
  static std::vector<Registered> r;
  return r;
}
inline bool register_case(const char* name, Case (*make)()) {
  registry().push_back({name, make});
  return true;
}
/// Runs the registered case `name` and reports through Catch2 (the max errors are always shown).
inline void check_case(const std::string& name) {
  const auto& reg = registry();
  auto it = std::find_if(reg.begin(), reg.end(), [&](const Registered& r) { return r.name == name; });
  REQUIRE(it != reg.end());
  const Case c = it->make();
  REQUIRE(!c.variants.empty());
  const Result r = run_case(name, c);
  INFO("max abs err " << r.max_abs_err << ", max rel err " << r.max_rel_err << ", " << r.checked
                      << " elements, " << r.redraws << " kink re-draws");
  if (!r.ok) FAIL_CHECK(r.message);
  CHECK(r.checked > 0);
  CHECK(!r.node_names.empty());
}

}  // namespace ttmoe::gradcheck

#define TTMOE_GC_CAT2(a, b) a##b
#define TTMOE_GC_CAT(a, b) TTMOE_GC_CAT2(a, b)
#define TTMOE_GC_CASE_IMPL(NAME, ID)                                                                  \
  static ::ttmoe::gradcheck::Case ID();                                                               \
  static const bool TTMOE_GC_CAT(ID, _registered) = ::ttmoe::gradcheck::register_case(NAME, &ID);   \
  TEST_CASE("gradcheck/" NAME, "[gradcheck]") { ::ttmoe::gradcheck::check_case(NAME); }              \
  static ::ttmoe::gradcheck::Case ID()
/// GRADCHECK_CASE("unique name") { return Case()...; }: registers the case and defines its TEST_CASE.
#define GRADCHECK_CASE(NAME) TTMOE_GC_CASE_IMPL(NAME, TTMOE_GC_CAT(ttmoe_gradcheck_case_, __COUNTER__))
