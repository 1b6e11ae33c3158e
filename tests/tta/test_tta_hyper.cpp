// Tests of the shared example harness's validation search and its JSON file
// (examples/common/tta_hyper.hpp): which candidates run, in which order, what is chosen, ties,
// and typed errors on malformed files.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../../examples/common/tta_hyper.hpp"

using tta_common::Hyper;

TEST_CASE("tta_hyper: the search runs the grid per method and keeps the best, ties to the paper value", "[tta_hyper]") {
  tta_common::SearchGrid grid;
  grid.lr_multipliers = {1, 10};
  grid.lambdas = {0.2, 0.5};
  grid.experts = {9, 3};
  grid.d_margins = {0.05, 0.4};
  std::vector<tta_common::Trial> trials;
  // Tent: flat (tie keeps 5e-4). EATA: d_margin 0.4 and lr 10x both help. MoETTA: lambda 0.5 helps.
  auto eval = [](const std::string& m, const Hyper& h) {
    if (m == "eata") return 0.5 + (h.d_margin > 0.1 ? 0.1 : 0.0) + (h.lr > 1e-3 ? 0.05 : 0.0);
    if (m == "moetta") return 0.5 + (h.lambda > 0.3 ? 0.02 : 0.0) - (h.experts == 3 ? 0.01 : 0.0);
    return 0.5;
  };
  const auto chosen = tta_common::search({"noadapt", "tent", "eata", "moetta"}, grid, eval, trials);
  CHECK(chosen.at("noadapt").lr == 0);
  CHECK(chosen.at("tent").lr == Approx(5e-4));
  CHECK(chosen.at("eata").d_margin == Approx(0.4));
  CHECK(chosen.at("eata").lr == Approx(6e-3));
  CHECK(chosen.at("moetta").lambda == Approx(0.5));
  CHECK(chosen.at("moetta").experts == 9);
  CHECK(chosen.at("moetta").lr == Approx(1e-3));
  // noadapt 1; tent 2; eata: 2 margins x 2 rates; moetta: lr 2, lambda 1, experts 1.
  CHECK(trials.size() == 1 + 2 + 4 + 4);
  CHECK(trials[3].method == "eata");
  CHECK(trials[3].hyper.d_margin == Approx(0.05));  // the margin and the rate form one grid
  CHECK(trials[4].hyper.d_margin == Approx(0.05));
  CHECK(trials[4].hyper.lr == Approx(6e-3));
  CHECK_THROWS_AS(tta_common::search({"bogus"}, grid, eval, trials), std::invalid_argument);
}

TEST_CASE("tta_hyper: the JSON file round-trips and malformed files name the field", "[tta_hyper]") {
  const auto dir = std::filesystem::temp_directory_path() / "ttmoe_tta_hyper_test";
  std::filesystem::create_directories(dir);
  const auto path = dir / "hyper.json";
  tta_common::HyperSet set = tta_common::paper_defaults();
  set["eata"].d_margin = 0.35;
  set["moetta"].experts = 3;
  tta_common::save_json(tta_common::to_json(set, {{"tent", set["tent"], 0.75}}, "note"), path);
  const auto back = tta_common::load(path);
  REQUIRE(back.size() == set.size());
  for (const auto& [m, h] : set) CHECK(back.at(m) == h);
  {
    std::ofstream f(path);
    f << R"({"chosen": {"tent": {"lr_at_batch_64": 1e-3, "margin": 0.4, "lambda": 0.2, "experts": 9}}})";
  }
  CHECK_THROWS_WITH(tta_common::load(path), Catch::Contains("hyper.json") && Catch::Contains("chosen.tent") &&
                                                Catch::Contains("d_margin"));
  {
    std::ofstream f(path);
    f << "{not json";
  }
  CHECK_THROWS_WITH(tta_common::load(path), Catch::Contains("hyper.json") && Catch::Contains("not JSON"));
  CHECK_THROWS_WITH(tta_common::load(dir / "missing.json"), Catch::Contains("missing.json"));
  std::filesystem::remove_all(dir);
}
