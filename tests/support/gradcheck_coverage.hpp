#pragma once
// Gradcheck COVERAGE, shared by every gradcheck executable: test_gradcheck (defined in tests/core;
// core, expr, ops, autograd, nn and models cases) and test_moe_gradcheck (tests/moe: the moe cases).
//
// At test time the library headers are parsed for every tape-node name an op can record: the name
// given to `record(...)` (ops/record.hpp) or to `Recorder::push(...)` (core, expr:
// `autograd::active_recorder()->push(...)`) or returned by the name() of a node pushed whole
// (`Recorder::push_node`), whether it is a string literal at the call
// (`record("matmul", ...)`, `record(Log ? "log_softmax" : "softmax", ...)`) or is forwarded through `const char* name`
// parameters, any number of functions deep (`max` -> `extremum(x, "max")` -> `reduce_along(x, name, ...)`,
// `layer_norm_rows(..., "grouped_layernorm")`, or a parameter's default). A name belongs to the gradcheck executable of
// the directory where it is spelled: include/ttmoe/moe/ -> test_moe_gradcheck, anything else (core,
// expr, ops, autograd, backend, nn, models, tta, io, top-level headers) -> test_gradcheck. Each
// executable's coverage test then checks, for the names it owns:
//   - the parsed names equal its list below (a new op must be listed, a removed one unlisted);
//   - every listed name is recorded by at least one of its registered cases (so a new recorded op
//     anywhere under include/ttmoe fails until a GRADCHECK_CASE exercises it);
//   - every node any of its cases records is a known name.
// A forwarded name the parser cannot resolve is reported as a failure, not skipped.

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "gradcheck.hpp"

namespace ttmoe::gradcheck::coverage {

/// The gradcheck executables and the differentiable node names each must cover.
enum class Suite { core, moe };

/// Tape nodes whose gradients test_gradcheck's cases must check (core ops, fused elementwise
/// expressions, the fused linear / attention / LayerNorm ops; the nn layers compose these).
inline const std::set<std::string> kCoreNodeNames = {
    "matmul",  "sum",   "max",     "min",     "variance", "logsumexp",    "softmax",           "log_softmax",
    "index_select", "gather", "scatter_add", "concat", "narrow", "permute", "topk", "slice", "reshape", "clone",
    "fused_elementwise", "linear", "linear_residual", "fused_mlp", "fused_qkv_attention", "causal_gqa_attention",
    "layer_norm", "parallel_tasks"};
/// Tape nodes recorded by include/ttmoe/moe/ code (test_moe_gradcheck's cases must check them).
inline const std::set<std::string> kMoeNodeNames = {"dispatch_rows", "gated_combine", "grouped_layernorm",
                                                    "normalized_rows_matmul"};
/// Recorded but never differentiated: argmax / argmin go through the same reduction as max / min
/// (ops/reduce.hpp), which records a node whose output (the values) the caller discards, so its VJP
/// never runs. Listed so that the parser's view stays exact.
inline const std::set<std::string> kNonDifferentiableNodeNames = {"argmax", "argmin"};

inline const std::set<std::string>& node_names(Suite s) { return s == Suite::core ? kCoreNodeNames : kMoeNodeNames; }
inline const char* suite_name(Suite s) { return s == Suite::core ? "test_gradcheck" : "test_moe_gradcheck"; }
/// The suite owning names spelled in include/ttmoe/<dir>/.
inline Suite owner_of(const std::string& dir) { return dir == "moe" ? Suite::moe : Suite::core; }

/// The repository root: TTMOE_SOURCE_DIR when the build defines it, else three levels above this
/// header (tests/support/gradcheck_coverage.hpp), which the compiler names by an absolute path.
inline std::filesystem::path source_dir() {
#ifdef TTMOE_SOURCE_DIR
  return std::filesystem::path(TTMOE_SOURCE_DIR);
#else
  return std::filesystem::path(__FILE__).lexically_normal().parent_path().parent_path().parent_path();
#endif
}

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p);
  if (!f) throw std::runtime_error("cannot read " + p.string());
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

/// The source with comments blanked out (string and character literals kept), same length.
inline std::string strip_comments(const std::string& s) {
  std::string o = s;
  enum { code, str, chr, line, block } st = code;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i], n = i + 1 < s.size() ? s[i + 1] : '\0';
    switch (st) {
      case code:
        if (c == '"') st = str;
        else if (c == '\'') st = chr;
        else if (c == '/' && n == '/') st = line, o[i] = ' ';
        else if (c == '/' && n == '*') st = block, o[i] = ' ';
        break;
      case str:
      case chr:
        if (c == '\\') ++i;
        else if ((st == str && c == '"') || (st == chr && c == '\'')) st = code;
        break;
      case line:
        if (c == '\n') st = code;
        else o[i] = ' ';
        break;
      case block:
        if (c == '*' && n == '/') o[i] = o[i + 1] = ' ', ++i, st = code;
        else if (c != '\n') o[i] = ' ';
        break;
    }
  }
  return o;
}

/// The top-level arguments of the call whose '(' is at `open` (balanced brackets, literals skipped),
/// or nothing when the parentheses do not close. With `angle`, <...> nests too (a parameter list:
/// `const Tensor<T, S, D>& x` is one parameter); a call's '<' may be a comparison, so not there.
inline std::vector<std::string> call_args(const std::string& s, std::size_t open, bool angle = false) {
  std::vector<std::string> args;
  int depth = 0;
  std::string cur;
  for (std::size_t i = open; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '"' || c == '\'') {  // copy the literal whole
      const std::size_t j0 = i;
      for (++i; i < s.size() && s[i] != c; ++i)
        if (s[i] == '\\') ++i;
      cur += s.substr(j0, i - j0 + 1);
      continue;
    }
    if (c == '(' || c == '[' || c == '{' || (angle && depth > 0 && c == '<')) {
      if (depth++ == 0) continue;
    } else if (c == ')' || c == ']' || c == '}' || (angle && depth > 1 && c == '>')) {
      if (--depth == 0) {
        args.push_back(cur);
        return args;
      }
    } else if (c == ',' && depth == 1) {
      args.push_back(cur);
      cur.clear();
      continue;
    }
    cur += c;
  }
  return {};
}

inline std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

/// Identifier-like string literals in an argument ("max", or both arms of a ternary).
inline std::vector<std::string> literal_names(const std::string& arg) {
  static const std::regex lit(R"re("(\w+)")re");
  std::vector<std::string> v;
  for (std::sregex_iterator it(arg.begin(), arg.end(), lit), end; it != end; ++it) v.push_back((*it)[1]);
  return v;
}

/// One header, comments stripped, with its directory under include/ttmoe ("." for top-level files).
struct Header {
  std::string rel, dir, text;
};

/// What the parser found: each node name with the directories that spell it, and any call it could
/// not resolve (each is a failure).
struct Recorded {
  std::map<std::string, std::set<std::string>> dirs;
  std::vector<std::pair<std::string, std::string>> problems;  // (directory, what)
  std::size_t direct = 0, forwarded = 0;  // call sites of each kind (sanity)
};

/// Every file under `root` (default: the library's include/ttmoe), comments stripped.
inline std::vector<Header> library_headers(std::filesystem::path root = source_dir() / "include" / "ttmoe") {
  if (!std::filesystem::is_directory(root)) throw std::runtime_error("no library headers under " + root.string());
  std::vector<Header> hs;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
    if (!e.is_regular_file()) continue;
    const auto rel = std::filesystem::relative(e.path(), root);
    const std::string dir = std::distance(rel.begin(), rel.end()) > 1 ? rel.begin()->string() : ".";
    hs.push_back({rel.generic_string(), dir, strip_comments(read_text(e.path()))});
  }
  std::sort(hs.begin(), hs.end(), [](const Header& a, const Header& b) { return a.rel < b.rel; });
  return hs;
}

/// Every call `fname(...)` / `fname<...>(...)` in the headers: (header, position of '(').
inline std::vector<std::pair<const Header*, std::size_t>> calls_of(const std::vector<Header>& hs, const std::string& fname) {
  std::vector<std::pair<const Header*, std::size_t>> out;
  const std::regex re("\\b" + fname + "\\b");
  for (const auto& h : hs)
    for (std::sregex_iterator it(h.text.begin(), h.text.end(), re), end; it != end; ++it) {
      std::size_t i = std::size_t(it->position() + it->length());
      while (i < h.text.size() && std::isspace(static_cast<unsigned char>(h.text[i]))) ++i;
      if (i < h.text.size() && h.text[i] == '<') {  // explicit template arguments
        int d = 0;
        for (; i < h.text.size(); ++i) {
          if (h.text[i] == '<') ++d;
          else if (h.text[i] == '>' && --d == 0) break;
          else if (h.text[i] == ';' || h.text[i] == '{') break;
        }
        ++i;
        while (i < h.text.size() && std::isspace(static_cast<unsigned char>(h.text[i]))) ++i;
      }
      if (i < h.text.size() && h.text[i] == '(') out.emplace_back(&h, i);
    }
  return out;
}

/// A node name forwarded through a `const char* <param>` parameter: used at `at` in header `h`.
struct ForwardedUse {
  const Header* h;
  std::size_t at;
  std::string param;
};

/// The function whose `const char* <param>` parameter the use refers to: its name and the position of
/// the '(' opening its parameter list; empty name when the parameter or the function cannot be found
/// (a problem is reported then).
inline std::pair<std::string, std::size_t> forwarding_function(const ForwardedUse& u, Recorded& r) {
  const std::string& text = u.h->text;
  const std::regex param("const\\s+char\\s*\\*\\s*" + u.param + "\\b");
  std::size_t ppos = std::string::npos;
  for (std::sregex_iterator p(text.begin(), text.begin() + std::ptrdiff_t(u.at), param), pe; p != pe; ++p)
    ppos = std::size_t(p->position());
  if (ppos == std::string::npos) {
    r.problems.emplace_back(u.h->dir, u.h->rel + ": recorded node name '" + u.param + "' is not a const char* parameter");
    return {};
  }
  // Walk back to the '(' opening that parameter list; the function name precedes it.
  int depth = 0;
  std::size_t popen = std::string::npos;
  for (std::size_t i = ppos; i-- > 0;) {
    const char c = text[i];
    if (c == ')') ++depth;
    else if (c == '(' && depth-- == 0) {
      popen = i;
      break;
    }
  }
  std::size_t e = popen;
  while (e != std::string::npos && e > 0 && std::isspace(static_cast<unsigned char>(text[e - 1]))) --e;
  std::size_t b = e;
  while (b != std::string::npos && b > 0 && (std::isalnum(static_cast<unsigned char>(text[b - 1])) || text[b - 1] == '_')) --b;
  if (popen == std::string::npos || b == e) {
    r.problems.emplace_back(u.h->dir, u.h->rel + ": cannot find the function that forwards node name '" + u.param + "'");
    return {};
  }
  return {text.substr(b, e - b), popen};
}

/// Parses the headers under `root` (default: the library's) for recorded node names (see the file comment).
/// Forwarding is followed through any number of functions: a call that hands on its own
/// `const char*` parameter (`max` -> `extremum(x, "max")` -> `reduce_along(x, name, ...)` -> `record(name, ...)`)
/// is resolved at the calls of its caller in turn.
inline Recorded recorded_node_names(std::filesystem::path root = source_dir() / "include" / "ttmoe") {
  const auto hs = library_headers(root);
  Recorded r;
  // record(name, out, vjp) and tape->push(name, meta, vjp): three arguments (other push()es have one).
  const std::regex call(R"re((?:^|[^\w.>:])(?:autograd::|ttmoe::)?(record)\s*\(|->\s*(push)\s*\()re");
  static const std::regex ident(R"(^\w+$)");
  std::vector<ForwardedUse> pending;
  for (const auto& h : hs) {
    for (std::sregex_iterator it(h.text.begin(), h.text.end(), call), end; it != end; ++it) {
      const std::size_t open = std::size_t(it->position() + it->length() - 1);
      const auto args = call_args(h.text, open);
      if (args.size() != 3) continue;
      const std::string first = trim(args[0]);
      const auto lits = literal_names(first);
      if (!lits.empty()) {
        ++r.direct;
        for (const auto& n : lits) r.dirs[n].insert(h.dir);
        continue;
      }
      if (first.rfind("const char", 0) == 0) continue;  // the declaration of record / push itself
      if (!std::regex_match(first, ident)) {
        r.problems.emplace_back(h.dir, h.rel + ": a recorded node name that is neither a literal nor a parameter: " + first);
        continue;
      }
      pending.push_back({&h, open, first});
    }
  }
  // Nodes pushed whole (Recorder::push_node) name themselves: `const char* name() const noexcept
  // override { return "parallel_tasks"; }` (ops/parallel_tasks.hpp).
  static const std::regex own_name(R"re(const\s+char\s*\*\s*name\s*\(\s*\)\s*const\s+noexcept\s+override\s*\{\s*return\s+"(\w+)"\s*;)re");
  for (const auto& h : hs)
    for (std::sregex_iterator it(h.text.begin(), h.text.end(), own_name), end; it != end; ++it) {
      ++r.direct;
      r.dirs[(*it)[1]].insert(h.dir);
    }
  // Forwarded names: find the function owning the parameter, then that argument at every call of it
  // (or its default); a call handing on a parameter of its own queues that function in turn.
  std::set<std::pair<std::string, std::string>> forwarders_done;  // (function, parameter)
  while (!pending.empty()) {
    const ForwardedUse u = pending.back();
    pending.pop_back();
    const auto [fname, popen] = forwarding_function(u, r);
    if (fname.empty() || !forwarders_done.insert({fname, u.param}).second) continue;
    ++r.forwarded;
    const std::regex param("const\\s+char\\s*\\*\\s*" + u.param + "\\b");
    const auto def_args = call_args(u.h->text, popen, true);
    std::size_t index = def_args.size();
    for (std::size_t i = 0; i < def_args.size(); ++i)
      if (std::regex_search(def_args[i], param)) index = i;
    if (index == def_args.size()) {
      r.problems.emplace_back(u.h->dir, u.h->rel + ": cannot place parameter '" + u.param + "' of " + fname);
      continue;
    }
    std::size_t resolved = 0;
    for (const auto& [ch, cpos] : calls_of(hs, fname)) {
      // A declaration (the definition or a forward declaration) gives the parameter's default.
      const auto d = call_args(ch->text, cpos, true);
      const bool declaration = d.size() > index && d[index].find("const char") != std::string::npos;
      const auto a = declaration ? d : call_args(ch->text, cpos);
      if (a.size() <= index) continue;  // the call relies on the default argument
      const std::string arg = trim(a[index]);
      const auto names = literal_names(arg);
      for (const auto& n : names) r.dirs[n].insert(ch->dir);
      resolved += names.size();
      if (!names.empty() || declaration || fname == "record") continue;  // record's callers are parsed above
      if (std::regex_match(arg, ident)) {
        pending.push_back({ch, cpos, arg});  // handed on from the caller's own parameter: follow it
        ++resolved;
      } else {
        r.problems.emplace_back(ch->dir, ch->rel + ": " + fname + "(...) passes node name '" + arg +
                                             "' that is neither a string literal nor a parameter; extend "
                                             "tests/support/gradcheck_coverage.hpp");
      }
    }
    if (resolved == 0 && fname != "record")
      r.problems.emplace_back(u.h->dir, u.h->rel + ": no node name found for the calls of " + fname + " (parameter '" +
                                            u.param + "')");
  }
  return r;
}

/// What is wrong with suite `s`'s list given the parsed headers, one message each (empty when fine):
/// a name spelled in a directory that `s` owns but missing from the list (a new op: list it, then
/// add a case that records it), a listed name no longer spelled there, and calls in those
/// directories that defeated the parser.
inline std::vector<std::string> list_mismatches(const Recorded& rec, Suite s) {
  std::vector<std::string> out;
  for (const auto& [dir, what] : rec.problems)
    if (owner_of(dir) == s) out.push_back(what);
  for (const auto& [name, dirs] : rec.dirs) {
    if (kNonDifferentiableNodeNames.count(name)) continue;
    for (const auto& d : dirs)
      if (owner_of(d) == s && !node_names(s).count(name)) {
        out.push_back("node '" + name + "' is recorded in include/ttmoe/" + d + "/ but is not in the coverage list of " +
                      suite_name(s) + " (tests/support/gradcheck_coverage.hpp): add it there and add a GRADCHECK_CASE that " +
                      "records it to " + suite_name(s));
        break;
      }
  }
  for (const auto& name : node_names(s)) {
    bool spelled = false;
    if (auto it = rec.dirs.find(name); it != rec.dirs.end())
      for (const auto& d : it->second) spelled = spelled || owner_of(d) == s;
    if (!spelled)
      out.push_back(std::string("coverage list of ") + suite_name(s) + " names '" + name +
                    "', which its headers no longer record");
  }
  if (s == Suite::core)
    for (const auto& name : kNonDifferentiableNodeNames)
      if (!rec.dirs.count(name))
        out.push_back("non-differentiable node '" + name + "' is no longer recorded: drop it from the list");
  return out;
}

/// Checks suite `s`'s list against the library headers, parsed now (see list_mismatches).
inline void check_lists_match_sources(Suite s) {
  const Recorded rec = recorded_node_names();
  // Sanity: the parser still sees the op families (a broken parser must not pass vacuously).
  CHECK(rec.direct >= 15);
  CHECK(rec.forwarded >= 2);
  CHECK(rec.dirs.size() >= 20);
  for (const auto& m : list_mismatches(rec, s)) {
    INFO(m);
    CHECK(false);  // NOLINT: the message above is the failure
  }
}

/// Runs every case registered in this executable, requires each to pass and to record something, and
/// checks that the cases record every node name of suite `s` and only known names. Returns the
/// results by case name; TTMOE_GRADCHECK_REPORT=1 prints each case's max errors.
inline std::map<std::string, Result> check_cases_cover(Suite s) {
  std::set<std::string> observed;
  std::map<std::string, Result> results;
  for (const auto& reg : registry()) {
    const Case c = reg.make();
    const Result r = run_case(reg.name, c);
    INFO("case " << reg.name << ": " << r.message);
    CHECK(r.ok);
    CHECK(!r.node_names.empty());
    observed.insert(r.node_names.begin(), r.node_names.end());
    results.emplace(reg.name, r);
  }
  CHECK(!results.empty());
  for (const auto& n : node_names(s)) {
    INFO("tape node never produced by a gradcheck case of " << suite_name(s) << ": " << n);
    CHECK(observed.count(n) == 1);
  }
  for (const auto& n : observed) {
    INFO("node recorded by a case but unknown to the coverage lists (tests/support/gradcheck_coverage.hpp): " << n);
    CHECK((kCoreNodeNames.count(n) + kMoeNodeNames.count(n) + kNonDifferentiableNodeNames.count(n)) == 1);
  }
  if (std::getenv("TTMOE_GRADCHECK_REPORT")) {
    double worst_abs = 0, worst_rel = 0;
    for (const auto& [name, r] : results) {
      std::printf("%-48s max abs %.3e  max rel %.3e  elements %6zu  kink re-draws %d\n", name.c_str(), r.max_abs_err,
                  r.max_rel_err, r.checked, r.redraws);
      worst_abs = std::max(worst_abs, r.max_abs_err);
      worst_rel = std::max(worst_rel, r.max_rel_err);
    }
    std::printf("%zu cases in %s: largest max abs %.3e, largest max rel %.3e\n", results.size(), suite_name(s), worst_abs,
                worst_rel);
  }
  return results;
}

}  // namespace ttmoe::gradcheck::coverage
