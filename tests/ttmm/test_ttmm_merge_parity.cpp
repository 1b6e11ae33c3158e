// TTMM merge parity with PEFT: three experts merged by ttmm::DenseMerge (and applied unmaterialised)
// give the logits of PEFT's add_weighted_adapter(combination_type="cat") + merge_and_unload on the same
// tiny random Llama (ttmm_merge_reference.py writes the fixture), and the model is restored exactly.

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "fixture.hpp"
#include "parity.hpp"
#include "ttmoe/models/llm.hpp"
#include "ttmoe/ttmm/exact_merge.hpp"

using namespace ttmoe;
namespace fs = std::filesystem;

TEST_CASE("ttmm merge parity: dense and unmaterialised == PEFT cat + merge_and_unload", "[ttmm][parity]") {
  const fs::path dir = fs::path(TTMOE_TEST_DATA_DIR) / "ttmm" / "ttmm_merge";
  if (!fs::exists(dir / "reference.safetensors"))
    FAIL("missing fixture " << dir << " (run the generate_ttmm_fixtures CTest step; needs TTMOE_REF_PYTHON with peft)");
  const test::Fixture ref("reference", "ttmm/ttmm_merge");
  auto m = models::load_llama<float>(dir / "base");
  std::vector<models::PeftAdapter<float>> experts;
  for (int k = 0; k < 3; ++k) experts.push_back(models::load_peft_adapter(dir / ("expert_" + std::to_string(k)), m));
  const auto w = ref.flat<double>("weights");
  REQUIRE(w.size() == experts.size());
  std::vector<models::WeightedAdapter<float>> ws;
  for (std::size_t k = 0; k < w.size(); ++k) ws.push_back({&experts[k], w[k]});
  const auto ids = ref.get<2, std::int64_t>("ids");
  const auto want = ref.get<3, float>("logits_merged");
  const auto base_want = ref.get<3, float>("logits_base");
  const auto before = m.forward(ids);
  CHECK(test::normwise_rel_error(before, base_want) < 1e-5);
  {
    ttmm::DenseMerge<> merge(m, ws);
    const double err = test::normwise_rel_error(m.forward(ids), want);
    INFO("dense merge vs PEFT: normwise relative error " << err);
    CHECK(err < 1e-5);
  }
  CHECK(m.forward(ids).to_vector() == before.to_vector());
  {
    models::AttachedAdapters<float> att(m, ws, models::LoraMode::unmerged);
    const double err = test::normwise_rel_error(m.forward(ids), want);
    INFO("unmaterialised vs PEFT: normwise relative error " << err);
    CHECK(err < 1e-5);
  }
}
