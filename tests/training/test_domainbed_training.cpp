// Tests of the DomainBed training driver (training/domainbed.hpp) on a tiny synthetic DomainBed folder
// of real PNGs written here: the records it writes, resume after an interruption ending on the
// uninterrupted run's weights bit for bit, both model-selection rules on hand-made records, the
// results-file round trip, DomainBed's table format, and typed errors for bad input.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "ttmoe/ttmoe.hpp"  // the CPU backend, before the device-generic headers

#include "../../examples/common/domainbed_table.hpp"
#include "../data/temp_dir.hpp"
#include "ttmoe/data/domainbed.hpp"
#include "ttmoe/io/image.hpp"
#include "ttmoe/models/gmoe.hpp"
#include "ttmoe/models/gmoe_checkpoint.hpp"
#include "ttmoe/training/domainbed.hpp"
#include "ttmoe/training/model_selection.hpp"

using namespace ttmoe;
using Model = models::GMoEVisionTransformer<float>;

namespace {

/// ROOT/toy/<domain>/<class>/<n>.png: 3 domains, 2 classes, `per_class` 8x8 RGB images each; class 0 dark,
/// class 1 bright, each domain tinted its own colour, so the task is learnable and the domains differ.
std::filesystem::path write_toy_set(const std::filesystem::path& root, int per_class = 6) {
  const std::vector<std::string> domains{"d_blue", "d_green", "d_red"};
  for (std::size_t d = 0; d < domains.size(); ++d)
    for (int c = 0; c < 2; ++c)
      for (int i = 0; i < per_class; ++i) {
        io::Image im = io::make_image(8, 8, 3, 0.0f);
        for (int y = 0; y < 8; ++y)
          for (int x = 0; x < 8; ++x)
            for (int k = 0; k < 3; ++k)
              im.at(y, x, k) = std::min(1.0f, (c ? 0.6f : 0.1f) + (std::size_t(k) == d ? 0.3f : 0.0f) + 0.02f * float((x + y + i) % 5));
        const auto p = root / "toy" / domains[d] / ("class" + std::to_string(c)) / (std::to_string(i) + ".png");
        std::filesystem::create_directories(p.parent_path());
        io::save_png(im, p);
      }
  return root;
}

models::GMoEConfig toy_config(index_t experts = 4) {
  auto c = models::gmoe_test_tiny(8, 4, 16, 4, 2);  // MoE in blocks 0 and 2
  c.num_experts = experts;
  return c;
}

training::DomainBedTrainOptions toy_options(const std::filesystem::path& run_dir, std::size_t steps = 7) {
  training::DomainBedTrainOptions o;
  o.test_env = 1;
  o.trial_seed = 0;
  o.seed = 5;
  o.hparams = {1e-3, 1e-4, steps};
  o.per_domain = 4;
  o.checkpoint_every = 3;
  o.augment.size = 8;
  o.eval.size = 8;
  o.eval_batch = 5;
  o.run_dir = run_dir;
  return o;
}

std::vector<float> flat(Model& m) {
  std::vector<float> out;
  for (auto& p : nn::named_parameters<float>(m))
    for (float v : p.flat.to_vector()) out.push_back(v);
  return out;
}

training::CheckpointRecord rec(std::int64_t step, std::vector<double> in, std::vector<double> out, std::int64_t test_env = 0) {
  return {step, test_env, 0, 0.5, std::move(in), std::move(out)};
}

}  // namespace

TEST_CASE("domainbed driver: records at DomainBed's points, written as JSONL, model trained", "[domainbed_train]") {
  TempDir tmp;
  const auto ds = data::scan_domainbed(write_toy_set(tmp.path), "toy");
  Model m(toy_config(), 3);
  const auto before = flat(m);
  std::vector<std::size_t> progress_steps;
  auto o = toy_options(tmp.path / "run");
  o.progress = [&](const training::StepReport& r) { progress_steps.push_back(r.step); };
  const auto run = training::train_domainbed(m, ds, o);
  REQUIRE(run.records.size() == 3);  // step index 0, 3 and the last, 6
  CHECK(run.records[0].step == 0);
  CHECK(run.records[1].step == 3);
  CHECK(run.records[2].step == 6);
  CHECK(progress_steps.size() == 7);
  for (const auto& r : run.records) {
    CHECK(r.test_env == 1);
    REQUIRE(r.in_acc.size() == 3);
    for (std::size_t e = 0; e < 3; ++e) {
      CHECK(r.in_acc[e] >= 0.0);
      CHECK(r.in_acc[e] <= 1.0);
      CHECK(r.out_acc[e] >= 0.0);
      CHECK(r.out_acc[e] <= 1.0);
    }
    CHECK(std::isfinite(r.loss));
  }
  CHECK(training::read_records(training::run_records_path(o.run_dir)) == run.records);
  CHECK(training::checkpoint_step(training::run_checkpoint_path(o.run_dir)) == 7);
  const auto after = flat(m);
  double moved = 0;
  for (std::size_t i = 0; i < after.size(); ++i) moved = std::max(moved, double(std::abs(after[i] - before[i])));
  CHECK(moved > 1e-4);
  CHECK_FALSE(m.training);  // left in evaluation mode by the last evaluation
}

TEST_CASE("domainbed driver: an interrupted run resumes to the uninterrupted run's weights and records", "[domainbed_train]") {
  TempDir tmp;
  const auto ds = data::scan_domainbed(write_toy_set(tmp.path), "toy");
  Model full(toy_config(), 3);
  const auto full_run = training::train_domainbed(full, ds, toy_options(tmp.path / "full"));

  struct Interrupt : std::runtime_error {
    Interrupt() : std::runtime_error("killed") {}
  };
  {
    Model first(toy_config(), 3);
    auto o = toy_options(tmp.path / "cut");
    o.progress = [](const training::StepReport& r) {
      if (r.step == 4) throw Interrupt();  // after the checkpoint at 3 completed steps and the record of step 3
    };
    CHECK_THROWS_AS(training::train_domainbed(first, ds, o), Interrupt);
    CHECK(training::checkpoint_step(training::run_checkpoint_path(o.run_dir)) == 3);
  }
  Model resumed(toy_config(), 3);  // a new process: fresh initial weights, then the checkpoint
  const auto run = training::train_domainbed(resumed, ds, toy_options(tmp.path / "cut"));
  CHECK(run.first_step == 3);
  CHECK(flat(resumed) == flat(full));
  CHECK(run.records == full_run.records);
  CHECK(training::read_records(training::run_records_path(tmp.path / "cut")) == full_run.records);

  // Interrupted after the final checkpoint but before the final evaluation: the resume evaluates.
  auto records = full_run.records;
  records.pop_back();
  training::write_records(records, training::run_records_path(tmp.path / "full"));
  Model again(toy_config(), 3);
  const auto tail = training::train_domainbed(again, ds, toy_options(tmp.path / "full"));
  CHECK(tail.first_step == 7);
  REQUIRE(tail.records.size() == 3);
  CHECK(tail.records[2].step == 6);
  CHECK(tail.records[2].in_acc == full_run.records[2].in_acc);
  CHECK(tail.records[2].out_acc == full_run.records[2].out_acc);
}

TEST_CASE("domainbed driver: bad input gives typed errors naming the culprit", "[domainbed_train]") {
  TempDir tmp;
  const auto root = write_toy_set(tmp.path);
  const auto ds = data::scan_domainbed(root, "toy");
  SECTION("test_env out of range") {
    Model m(toy_config(), 1);
    auto o = toy_options(tmp.path / "run");
    o.test_env = 3;
    try {
      training::train_domainbed(m, ds, o);
      FAIL("no error");
    } catch (const data::DomainBedError& e) {
      CHECK(e.kind() == data::DomainBedErrorKind::TestEnvRange);
      CHECK_THAT(e.what(), Catch::Contains("test_env 3") && Catch::Contains("3 domains"));
    }
  }
  SECTION("an unreadable image is an error naming the file") {
    const auto bad = root / "toy" / "d_red" / "class1" / "0.png";
    std::ofstream(bad, std::ios::trunc) << "not a png";
    Model m(toy_config(), 1);
    auto o = toy_options(tmp.path / "run", 3);
    o.test_env = 0;  // d_red trains and is evaluated
    o.per_domain = 16;
    try {
      training::train_domainbed(m, ds, o);
      FAIL("no error");
    } catch (const io::ImageError& e) {
      CHECK_THAT(e.what(), Catch::Contains("0.png"));
    }
  }
  SECTION("an empty domain folder and a class missing from one domain") {
    std::filesystem::remove_all(root / "toy" / "d_green" / "class1");
    try {
      data::scan_domainbed(root, "toy");
      FAIL("no error");
    } catch (const data::DomainBedError& e) {
      CHECK(e.kind() == data::DomainBedErrorKind::ClassMismatch);
      CHECK_THAT(e.what(), Catch::Contains("class1") && Catch::Contains("d_green"));
    }
    std::filesystem::remove_all(root / "toy" / "d_green" / "class0");
    CHECK_THROWS_AS(data::scan_domainbed(root, "toy"), data::DomainBedError);
  }
  SECTION("a checkpoint whose experts have another count or shape") {
    Model six(toy_config(6), 1), four(toy_config(4), 1);
    const auto path = tmp.path / "six.safetensors";
    models::save_gmoe(six, path);
    try {
      models::load_gmoe(four, path);
      FAIL("no error");
    } catch (const nn::CheckpointError& e) {
      CHECK_THAT(e.what(), Catch::Contains("six.safetensors") && Catch::Contains("router.codebook") && Catch::Contains("experts.4"));
    }
    auto wider = toy_config(4);
    wider.vit.mlp_hidden = 48;
    Model other_shape(wider, 1);
    CHECK_THROWS_AS(models::load_gmoe(other_shape, tmp.path / "six.safetensors"), nn::CheckpointError);
    // A training run resumed with a model of another expert count stops before touching it.
    Model trained(toy_config(6), 1);
    training::train_domainbed(trained, ds, toy_options(tmp.path / "run", 3));
    const auto before = flat(four);
    CHECK_THROWS_AS(training::train_domainbed(four, ds, toy_options(tmp.path / "run", 6)), nn::CheckpointError);
    CHECK(flat(four) == before);
  }
  SECTION("a results file of another run") {
    Model m(toy_config(), 1);
    training::train_domainbed(m, ds, toy_options(tmp.path / "run", 3));
    auto o = toy_options(tmp.path / "run", 3);
    o.test_env = 2;
    CHECK_THROWS_AS(training::train_domainbed(m, ds, o), training::RecordsError);
  }
}

TEST_CASE("model selection: training-domain validation picks the best training-domain out accuracy", "[domainbed_select]") {
  // test_env 0; training envs 1 and 2. Their mean out accuracy is 0.55, 0.75, 0.70 at steps 0, 300, 600.
  const std::vector<training::CheckpointRecord> run{
      rec(0, {0.30, 0.9, 0.9}, {0.35, 0.5, 0.6}),
      rec(300, {0.40, 0.9, 0.9}, {0.45, 0.8, 0.7}),
      rec(600, {0.50, 0.9, 0.9}, {0.99, 0.7, 0.7}),
  };
  const auto iid = training::select_checkpoint(run, training::SelectionRule::TrainingDomainValidation);
  CHECK(iid.step == 300);
  CHECK(iid.record == 1);
  CHECK(iid.validation_accuracy == Approx(0.75));
  CHECK(iid.test_accuracy == Approx(0.40));
  // The oracle takes the last checkpoint, validated on the held-out out split, reporting held-out in.
  const auto oracle = training::select_checkpoint(run, training::SelectionRule::Oracle);
  CHECK(oracle.step == 600);
  CHECK(oracle.validation_accuracy == Approx(0.99));
  CHECK(oracle.test_accuracy == Approx(0.50));
  // Records out of order: "last" means the largest step.
  const std::vector<training::CheckpointRecord> shuffled{run[2], run[0], run[1]};
  CHECK(training::select_checkpoint(shuffled, training::SelectionRule::Oracle).step == 600);
  CHECK(training::select_checkpoint(shuffled, training::SelectionRule::TrainingDomainValidation).step == 300);
  // Ties keep the first checkpoint, as Python's max().
  const std::vector<training::CheckpointRecord> tied{rec(0, {0.1, 1, 1}, {0, 0.5, 0.5}), rec(300, {0.9, 1, 1}, {0, 0.5, 0.5})};
  CHECK(training::select_checkpoint(tied, training::SelectionRule::TrainingDomainValidation).step == 0);
  // Across hyper-parameter runs: the best validation accuracy.
  CHECK(training::select_run({iid, oracle, iid}) == 1);
  CHECK_THROWS_AS(training::select_checkpoint({}, training::SelectionRule::Oracle), std::invalid_argument);
  CHECK_THROWS_AS(training::select_checkpoint({run[0], rec(300, {0.4, 0.9, 0.9}, {0.4, 0.9, 0.9}, 1)},
                                              training::SelectionRule::Oracle),
                  std::invalid_argument);
}

TEST_CASE("domainbed records: JSONL round trip and errors naming the line and field", "[domainbed_select]") {
  TempDir tmp;
  const std::vector<training::CheckpointRecord> records{rec(0, {0.1 / 3, 0.25}, {1.0 / 7, 0.5}, 1),
                                                        {300, 1, 0, std::nan(""), {0.2, 0.3}, {0.4, 0.5}}};
  const auto path = tmp.path / "results.jsonl";
  training::write_records(records, path);
  const auto back = training::read_records(path);
  REQUIRE(back.size() == 2);
  CHECK(back[0] == records[0]);  // exact: 17 significant digits
  CHECK(std::isnan(back[1].loss));
  CHECK(back[1].in_acc == records[1].in_acc);
  CHECK_THAT(training::record_to_json(records[0]), Catch::Contains("\"env1_out_acc\": 0.5"));
  CHECK_THAT(training::record_to_json(records[1]), Catch::Contains("\"loss\": null"));  // JSON has no NaN
  std::ofstream(path, std::ios::app) << "{\"step\": 600, \"test_env\": 1}\n";
  try {
    training::read_records(path);
    FAIL("no error");
  } catch (const training::RecordsError& e) {
    CHECK_THAT(e.what(), Catch::Contains("results.jsonl:3") && Catch::Contains("'trial_seed'"));
  }
  training::write_records(records, path);
  std::ofstream(path, std::ios::app) << "{\"step\": 600, \"test_env\": \n";  // a line cut by a crash
  CHECK_THROWS_WITH(training::read_records(path), Catch::Contains("results.jsonl:3") && Catch::Contains("not a JSON line"));
  training::write_records(records, path);
  std::ofstream(path, std::ios::app) << "{\"step\": \"600\", \"test_env\": 1}\n";
  CHECK_THROWS_WITH(training::read_records(path), Catch::Contains("'step' is not a number"));
}

TEST_CASE("domainbed table: DomainBed's columns, mean +/- standard error, average and X", "[domainbed_table]") {
  using domainbed_common::TableRow;
  // Trials 0.80, 0.90 -> mean 85.0, population std 5.0, err 5/sqrt(2) = 3.5.
  const std::vector<TableRow> rows{{"GMoE", {{0.80, 0.90}, {0.5, 0.5}}}, {"ViT", {{0.7}, {}}}};
  const auto t = domainbed_common::domainbed_table("Dataset: toy, model selection method: training-domain validation set",
                                                   {"A", "B"}, rows);
  const std::string expected =
      "-------- Dataset: toy, model selection method: training-domain validation set\n"
      "Algorithm             A                     B                     Avg\n"
      "GMoE                  85.0 +/- 3.5          50.0 +/- 0.0          67.5\n"
      "ViT                   70.0 +/- 0.0          X                     X\n";
  CHECK(t == expected);
  CHECK(domainbed_common::format_mean({}) == "X");
  CHECK(domainbed_common::format_mean({0.5, 0.6, 0.7}) == "60.0 +/- 4.7");  // std 8.165 / sqrt(3)
}
