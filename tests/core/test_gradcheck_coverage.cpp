// The COVERAGE tests of test_gradcheck (see tests/support/gradcheck_coverage.hpp): every differentiable elementwise functor
// of expr/ops.hpp is declared by a case, every tape node recorded outside include/ttmoe/moe/ (core,
// expr, ops, autograd, nn, ...) is produced by a case of this executable, and the lists of functors
// and nodes match the library sources, parsed at test time.

#include <gradcheck.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <tuple>
#include <unistd.h>

#include "gradcheck_coverage.hpp"

using namespace ttmoe;
using namespace ttmoe::gradcheck;

namespace {
// Every elementwise functor in expr/ops.hpp, differentiable or not (the test below checks this list
// against the header itself, so a new functor cannot be forgotten here).
using AllFunctors = std::tuple<op::neg, op::exp, op::log, op::tanh, op::erf, op::sqrt, op::rsqrt, op::abs, op::square,
                               op::sigmoid, op::relu, op::gelu, op::gelu_tanh, op::silu, op::add, op::sub, op::mul,
                               op::div, op::pow, op::maximum, op::minimum, op::greater, op::greater_equal, op::less,
                               op::less_equal, op::equal, op::where, op::muladd>;

template <class... Op>
std::vector<std::pair<std::string, bool>> functor_list(std::tuple<Op...>*) {
  return {{Op::name, Op::differentiable}...};
}
}  // namespace

TEST_CASE("gradcheck coverage: every differentiable op has a case, every recorded node is known", "[gradcheck][coverage]") {
  std::set<std::string> differentiable_functors;
  for (const auto& [name, diff] : functor_list(static_cast<AllFunctors*>(nullptr)))
    if (diff) differentiable_functors.insert(name);
  REQUIRE(differentiable_functors.size() == 23);

  // Runs every case; each must pass, and together they must record every node of the core list.
  const auto results = coverage::check_cases_cover(coverage::Suite::core);

  std::set<std::string> declared;
  for (const auto& reg : registry()) {
    const Case c = reg.make();
    for (const auto& f : c.functors) {
      // A case declaring a functor must at least have recorded a fused elementwise node.
      INFO("case " << reg.name << " declares functor " << f);
      CHECK(results.at(reg.name).node_names.count("fused_elementwise") == 1);
      declared.insert(f);
    }
  }
  // Every differentiable functor is declared by some case...
  for (const auto& f : differentiable_functors) {
    INFO("elementwise functor without a gradcheck case: " << f);
    CHECK(declared.count(f) == 1);
  }
  // ... and declarations name real differentiable functors (no typos hiding a missing case).
  for (const auto& f : declared) {
    INFO("declared functor is not a differentiable op in expr/ops.hpp: " << f);
    CHECK(differentiable_functors.count(f) == 1);
  }
}

TEST_CASE("gradcheck coverage lists match the library sources", "[gradcheck][coverage]") {
  // The functor tuple above lists every functor struct of expr/ops.hpp.
  const std::string ops = coverage::read_text(coverage::source_dir() / "include/ttmoe/expr/ops.hpp");
  std::set<std::string> in_header;
  const std::regex functor(R"(\n\s*struct\s+(\w+)\s*\{)"), comparison(R"(\nTTMOE_COMPARISON\((\w+),)");
  for (std::sregex_iterator it(ops.begin(), ops.end(), functor), end; it != end; ++it)
    if ((*it)[1] != "NAME") in_header.insert((*it)[1]);  // NAME: the TTMOE_COMPARISON macro's own body
  for (std::sregex_iterator it(ops.begin(), ops.end(), comparison), end; it != end; ++it) in_header.insert((*it)[1]);
  std::set<std::string> listed;
  for (const auto& [name, diff] : functor_list(static_cast<AllFunctors*>(nullptr))) listed.insert(name);
  CHECK(in_header.size() >= 28);
  CHECK(in_header == listed);

  // Every node name recorded anywhere under include/ttmoe (literal or forwarded) is in the coverage
  // list of the executable that owns its directory, and every listed name is still recorded.
  coverage::check_lists_match_sources(coverage::Suite::core);
}

TEST_CASE("gradcheck coverage parser finds forwarded and ternary node names", "[gradcheck][coverage]") {
  // The parser must see names that are not a plain record("name", ...) literal, or the lists above
  // could silently miss an op: a ternary, a name forwarded through a parameter, its default value,
  // and a name spelled in moe/ for an op defined in ops/.
  const auto rec = coverage::recorded_node_names();
  for (const char* n : {"softmax", "log_softmax", "max", "min", "layer_norm", "clone", "fused_elementwise"}) {
    INFO(n);
    CHECK(rec.dirs.count(n) == 1);
  }
  REQUIRE(rec.dirs.count("grouped_layernorm") == 1);
  CHECK(rec.dirs.at("grouped_layernorm").count("moe") == 1);
  // Comments do not count: strip_comments blanks them but keeps literals and the length.
  const std::string src = "a(\"x\"); // record(\"ghost\", o, f)\n/* push(\"ghost2\") */ b(\"// not a comment\");";
  const std::string s = coverage::strip_comments(src);
  CHECK(s.size() == src.size());
  CHECK(s.find("ghost") == std::string::npos);
  CHECK(s.find("\"// not a comment\"") != std::string::npos);
  // call_args splits top-level arguments only.
  const std::string call = "f(a, g(b, c), [x, y](int q) { return q < 2; }, \"s, t\")";
  const auto args = coverage::call_args(call, 1);
  REQUIRE(args.size() == 4);
  CHECK(coverage::trim(args[1]) == "g(b, c)");
  CHECK(coverage::trim(args[3]) == "\"s, t\"");
}

TEST_CASE("gradcheck coverage parser flags a new op in a fake header tree", "[gradcheck][coverage]") {
  // A throw-away include/ttmoe with a new op in moe/, a forwarded name with a default, a literal
  // call and a name forwarded through two functions in ops/, a commented-out record, and a call the parser cannot resolve in nn/: the parser
  // must find the new names in their directories, and the lists must then be reported incomplete
  // for the owning executable (this is what makes a new recorded op without a case fail).
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("ttmoe_gc_parser_" + std::to_string(::getpid()));
  fs::remove_all(root);
  auto write = [&](const std::string& rel, const std::string& text) {
    fs::create_directories((root / rel).parent_path());
    std::ofstream(root / rel) << text;
  };
  write("ops/fake.hpp",
        "template <class T>\n"
        "Tensor<T, S, D> fake_rows(const Tensor<T, S, D>& x, index_t n, const char* name = \"fake_default\") {\n"
        "  if (should_record(x)) record(name, out, [=](const T* g) { use(g, n); });\n"
        "  return out;\n"
        "}\n"
        "inline auto twice(const X& x) { return fake_rows(x, 2, \"fake_forwarded\"); }\n"
        "inline auto once(const X& x) { return fake_rows(x, 1); }\n"
        // Two levels of forwarding (a shared frame handing on its caller's name, as reduce_along does).
        "inline auto frame(const X& x, const char* tag) { return fake_rows(x, 4, tag); }\n"
        "inline auto deep(const X& x) { return frame(x, \"fake_two_levels\"); }\n");
  write("moe/new_op.hpp",
        "// record(\"ghost_in_a_comment\", out, f)\n"
        "void new_op() { record(\"new_moe_op\", y, [=, a = f(1, 2)](const T* go) { go; }); }\n"
        "void queue_user() { tasks_.push(job); }\n");
  write("nn/bad.hpp", "inline auto bad(const X& x, const char* label) { return fake_rows(x, 3, label); }\n");
  const auto rec = coverage::recorded_node_names(root);
  fs::remove_all(root);

  REQUIRE(rec.dirs.count("new_moe_op") == 1);
  CHECK(rec.dirs.at("new_moe_op") == std::set<std::string>{"moe"});
  REQUIRE(rec.dirs.count("fake_default") == 1);
  CHECK(rec.dirs.at("fake_default") == std::set<std::string>{"ops"});
  REQUIRE(rec.dirs.count("fake_forwarded") == 1);
  REQUIRE(rec.dirs.count("fake_two_levels") == 1);
  CHECK(rec.dirs.at("fake_two_levels") == std::set<std::string>{"ops"});
  CHECK(rec.dirs.count("ghost_in_a_comment") == 0);
  CHECK(rec.dirs.size() == 4);
  REQUIRE(rec.problems.size() == 1);  // nn/bad.hpp hands on a parameter nobody calls with a name: reported
  CHECK(rec.problems[0].first == "nn");
  CHECK_THAT(rec.problems[0].second, Catch::Contains("nn/bad.hpp") && Catch::Contains("label"));

  // The moe executable's list lacks new_moe_op (and its own names are "no longer recorded" here);
  // the core list lacks the ops/ names, and the unresolvable nn/ call is the core executable's.
  auto joined = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& m : v) s += m + "\n";
    return s;
  };
  const std::string moe = joined(coverage::list_mismatches(rec, coverage::Suite::moe));
  CHECK_THAT(moe, Catch::Contains("'new_moe_op' is recorded in include/ttmoe/moe/") &&
                      Catch::Contains("test_moe_gradcheck") && Catch::Contains("'grouped_layernorm'"));
  const std::string core = joined(coverage::list_mismatches(rec, coverage::Suite::core));
  CHECK_THAT(core, Catch::Contains("'fake_default'") && Catch::Contains("'fake_forwarded'") &&
                       Catch::Contains("nn/bad.hpp") && !Catch::Contains("new_moe_op"));
  // The real headers give no mismatch for either executable.
  const auto real = coverage::recorded_node_names();
  CHECK(coverage::list_mismatches(real, coverage::Suite::core).empty());
  CHECK(coverage::list_mismatches(real, coverage::Suite::moe).empty());
}
