// Parity of the Llama-family causal LM with Hugging Face transformers (tests/models/llm_reference.py):
// folders written by save_pretrained (single file, sharded, bf16) load by name; full-sequence logits
// match within 1e-4 (normwise relative), 32 greedy tokens per prompt are identical to transformers'
// generate (prompts of different lengths batched together here, one at a time there), and the
// continuation loss equals transformers' loss with the prefix labels set to -100. The other direction:
// folders written by save_llama load in transformers (hf_load_check.py) and give the same logits.
// PEFT LoRA adapters: see the section at the end.

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "parity.hpp"
#include "ttmoe/models/llm.hpp"
#include "ttmoe/training/llama_lora.hpp"

using namespace ttmoe;
namespace fs = std::filesystem;

namespace {

fs::path case_dir(const std::string& name) {
  const fs::path p = fs::path(TTMOE_TEST_DATA_DIR) / "llm" / name;
  if (!fs::exists(p / "reference.safetensors"))
    throw std::runtime_error("missing LLM fixture " + p.string() +
                             " (run the generate_llm_fixtures CTest step; needs TTMOE_REF_PYTHON with transformers)");
  return p;
}

/// The reference file of case `name` (<test-data>/llm/<name>/reference.safetensors), read through the
/// shared fixture loader; case_dir first, so a missing folder names the step that writes it.
test::Fixture reference(const std::string& name) {
  case_dir(name);
  return test::Fixture("reference", "llm/" + name);
}

/// Everything one reference folder checks; `tol` is the normwise relative logits tolerance.
void check_case(const std::string& name, double tol) {
  const fs::path dir = case_dir(name);
  const auto ref = reference(name);
  auto m = models::load_llama<float>(dir);

  // Full-sequence logits.
  const auto logits = m.forward(ref.get<2, std::int64_t>("logits_ids"));
  const auto want = ref.get<3, float>("logits");
  const double err = test::normwise_rel_error(logits, want);
  INFO(name << ": logits normwise relative error " << err);
  CHECK(err <= tol);

  // Greedy generation, all prompts in one batch (right-padded prefill, per-sequence lengths).
  const auto flat = ref.flat<std::int64_t>("gen_prompt_ids");
  const auto lens = ref.flat<std::int64_t>("gen_prompt_lens"), gen = ref.flat<std::int64_t>("gen_tokens");
  std::vector<std::vector<std::int64_t>> prompts;
  std::size_t at = 0;
  for (auto n : lens) {
    prompts.emplace_back(flat.begin() + std::ptrdiff_t(at), flat.begin() + std::ptrdiff_t(at + std::size_t(n)));
    at += std::size_t(n);
  }
  models::GenerationOptions opt;
  opt.max_new_tokens = 32;
  const auto out = models::generate(m, prompts, opt);
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    const std::vector<std::int64_t> expect(gen.begin() + std::ptrdiff_t(32 * p), gen.begin() + std::ptrdiff_t(32 * (p + 1)));
    INFO(name << ": prompt " << p << " of " << prompts[p].size() << " tokens");
    CHECK(out.tokens[p] == expect);
  }

  // Continuation loss (loss on the continuation only).
  const auto ll = ref.flat<std::int64_t>("ll_ids"), prefix = ref.flat<std::int64_t>("ll_prefix");
  const auto loss = ref.get<1, float>("ll_loss").to_vector();
  const std::size_t T = ll.size() / prefix.size();
  for (std::size_t b = 0; b < prefix.size(); ++b) {
    std::vector<std::int64_t> row(ll.begin() + std::ptrdiff_t(b * T), ll.begin() + std::ptrdiff_t((b + 1) * T));
    const auto s = models::score_continuation(m, row, prefix[b]);
    INFO(name << ": continuation " << b << " nll " << s.nll() << " vs transformers " << loss[b]);
    CHECK(s.tokens == index_t(T) - prefix[b]);
    CHECK(std::abs(s.nll() - loss[b]) <= 1e-4 * std::abs(loss[b]));
  }

  // Sliding-window perplexity (HF's protocol for fixed-length models), rows (window, stride, nll).
  const auto text = ref.flat<std::int64_t>("ppl_ids");
  const auto windows = ref.get<2, double>("ppl_windows").to_vector();
  for (std::size_t i = 0; i < windows.size(); i += 3) {
    const auto w = index_t(windows[i]), stride = index_t(windows[i + 1]);
    const auto s = models::windowed_perplexity(m, text, w, stride);
    INFO(name << ": window " << w << " stride " << stride << ": nll " << s.nll() << " vs transformers " << windows[i + 2]);
    CHECK(s.tokens == index_t(text.size()) - 1 - (stride == w ? index_t(text.size() - 1) / w : 0));
    CHECK(std::abs(s.nll() - windows[i + 2]) <= 1e-4 * std::abs(windows[i + 2]));
  }
}

}  // namespace

TEST_CASE("llama parity: Llama 2 shape, separate LM head", "[llm][parity]") { check_case("llama_small", 1e-4); }
TEST_CASE("llama parity: Llama 3.2 shape, llama3 rope, tied head, head_dim 24, sharded", "[llm][parity]") {
  check_case("llama3_small", 1e-4);
}
TEST_CASE("qwen2 parity: q/k/v biases, one KV head, tied head", "[llm][parity]") { check_case("qwen2_small", 1e-4); }
// bf16 on disk: the reference runs float32 on the bf16-rounded weights, so converting BF16 -> F32
// exactly (as ttmoe does) must reproduce it at the F32 tolerance: the only BF16 error is the
// rounding of the weights, which both sides share.
TEST_CASE("qwen2 parity: bf16 weights on disk", "[llm][parity]") {
  check_case("qwen2_bf16", 1e-4);
  // Against the model before rounding: bf16 keeps 8 significant bits, a relative error of at most
  // 2^-9 per weight; through two layers and the head the logits move by a few times that.
  const auto ref = reference("qwen2_bf16");
  auto m = models::load_llama<float>(case_dir("qwen2_bf16"));
  const double err = test::normwise_rel_error(m.forward(ref.get<2, std::int64_t>("logits_ids")),
                                              ref.get<3, float>("logits_unrounded_weights"));
  INFO("bf16-rounded weights vs the f32 originals: logits normwise relative error " << err);
  CHECK(err > 1e-4);  // the rounding is visible: the weights really were stored as bf16
  CHECK(err <= 8 * std::ldexp(1.0, -9));
}
TEST_CASE("llama parity: Llama-3.2-1B width (2048 hidden, 32/8 heads, 8192 MLP), 2 layers", "[llm][parity]") {
  check_case("llama32_1b_width", 1e-4);
}

TEST_CASE("llama hf folder: truncated shard and missing shard are errors naming the file", "[llm][io]") {
  const fs::path src = case_dir("llama3_small");
  const fs::path tmp = fs::temp_directory_path() / ("ttmoe_llm_bad_" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::copy(src, tmp);
  const std::string shard = "model-00003-of-00011.safetensors";
  SECTION("truncated shard") {
    fs::resize_file(tmp / shard, fs::file_size(tmp / shard) - 7);
    try {
      models::load_llama<float>(tmp);
      FAIL("no error");
    } catch (const io::SafetensorsError& e) {
      CHECK(e.kind() == io::ErrorKind::Truncated);
      CHECK(std::string(e.what()).find(shard) != std::string::npos);
    }
  }
  SECTION("index naming a missing shard") {
    fs::remove(tmp / shard);
    try {
      models::load_llama<float>(tmp);
      FAIL("no error");
    } catch (const io::SafetensorsError& e) {
      CHECK(std::string(e.what()).find(shard) != std::string::npos);
      CHECK(std::string(e.what()).find("does not exist") != std::string::npos);
    }
  }
  SECTION("config / weights mismatch: one error listing every tensor") {
    auto j = nlohmann::json::parse(std::ifstream(tmp / "config.json"));
    j["intermediate_size"] = 96;  // every MLP weight now mis-shaped: 2 layers x 3
    j["num_hidden_layers"] = 1;   // and layer 1's tensors unexpected
    std::ofstream(tmp / "config.json") << j.dump();
    try {
      models::load_llama<float>(tmp);
      FAIL("no error");
    } catch (const nn::CheckpointError& e) {
      CHECK(e.problems().size() == 3 + 9);  // 3 mis-shaped MLP weights of layer 0, 9 tensors of layer 1
      CHECK(std::string(e.what()).find("model.layers.0.mlp.up_proj.weight") != std::string::npos);
      CHECK(std::string(e.what()).find("unexpected key 'model.layers.1.self_attn.q_proj.weight'") != std::string::npos);
    }
  }
  fs::remove_all(tmp);
}

TEST_CASE("llama hf folder: what save_llama writes loads in transformers with the same logits", "[llm][parity][io]") {
  for (const char* name : {"llama3_small", "qwen2_small", "llama_small"})
    for (io::DType dt : {io::DType::F32, io::DType::BF16}) {
      auto m = models::load_llama<float>(case_dir(name));
      const fs::path out = fs::temp_directory_path() /
                           ("ttmoe_llm_save_" + std::string(name) + "_" + std::string(io::dtype_name(dt)) + "_" + std::to_string(::getpid()));
      fs::remove_all(out);
      models::save_llama(m, out, dt);
      const auto ref = reference(name);
      const auto ids = ref.flat<std::int64_t>("logits_ids");
      io::SafetensorsWriter w;
      w.add("ids", std::span<const std::int64_t>(ids), {3, 12});
      w.write(out / "ids.safetensors");
      const std::string cmd = std::string("'") + TTMOE_REF_PYTHON_EXE + "' '" + TTMOE_SOURCE_DIR +
                              "/tests/models/hf_load_check.py' '" + out.string() + "'";
      INFO(name << " saved as " << io::dtype_name(dt) << ": " << cmd);
      REQUIRE(std::system(cmd.c_str()) == 0);
      // The saved weights (rounded if bf16) run by ttmoe, against transformers on the same folder.
      auto back = models::load_llama<float>(out);
      const double err = test::normwise_rel_error(back.forward(ref.get<2, std::int64_t>("logits_ids")),
                                                  test::read_tensor<3, float>(io::SafetensorsFile(out / "hf_logits.safetensors"), "logits"));
      INFO("logits normwise relative error " << err);
      CHECK(err <= 1e-4);
      fs::remove_all(out);
    }
}

// ---- PEFT LoRA adapters (tests/models/peft_reference.py) ----
// Adapters made by PEFT (one plain, one rsLoRA with a regex target, rank_pattern and alpha_pattern)
// run unmerged and merged give PEFT's logits; both at once with weights 0.7 / -0.4 give PEFT's
// weighted combination; an adapter made and saved by ttmoe loads in PEFT with the same logits.

namespace {

void check_peft_case(const std::string& name) {
  const fs::path dir = case_dir(name);
  const auto ref = reference(name);
  auto m = models::load_llama<float>(dir / "base");
  const auto ids = ref.get<2, std::int64_t>("ids");
  const auto base = m.forward(ids).to_vector();
  auto plain = models::load_peft_adapter(dir / "lora_plain", m);
  auto rs = models::load_peft_adapter(dir / "lora_rs", m);
  CHECK(plain.modules.size() == 14);
  CHECK(rs.modules.size() == 8);
  CHECK(rs.modules.at("model.layers.1.mlp.down_proj").rank() == 6);
  CHECK(rs.modules.at("model.layers.0.mlp.up_proj").scaling == 3.0 / 2.0);  // alpha 3 / sqrt(4)
  const auto scales = ref.get<1, double>("scales").to_vector();
  struct Use {
    const char* ref_key;
    std::vector<models::WeightedAdapter<float>> adapters;
  };
  const std::vector<Use> uses = {{"logits_lora_plain", {{&plain, 1.0}}},
                                 {"logits_lora_rs", {{&rs, 1.0}}},
                                 {"logits_combined", {{&plain, scales[0]}, {&rs, scales[1]}}}};
  for (const auto& u : uses) {
    const auto want = ref.get<3, float>(u.ref_key);
    CHECK(test::normwise_rel_error(m.forward(ids), want) > 0.05);  // the adapters matter
    for (auto mode : {models::LoraMode::unmerged, models::LoraMode::merged}) {
      models::AttachedAdapters<float> on(m, u.adapters, mode);
      const double err = test::normwise_rel_error(m.forward(ids), want);
      INFO(name << " " << u.ref_key << (mode == models::LoraMode::merged ? " merged" : " unmerged")
                << ": logits vs PEFT, normwise relative error " << err);
      CHECK(err <= 1e-4);
    }
    CHECK(m.forward(ids).to_vector() == base);  // removed exactly
  }
  const double base_err = test::normwise_rel_error(m.forward(ids), ref.get<3, float>("logits_base"));
  CHECK(base_err <= 1e-4);
}

/// Saves `a` with save_peft_adapter, has PEFT load it on `base_dir` (peft_reference.py --check) and
/// returns PEFT's logits of the token ids `ids` (2 rows of 9); `tag` names the temporary folder.
Tensor<float, DynShape<3>> peft_logits_of_saved(models::PeftAdapter<float>& a, const fs::path& base_dir,
                                                const std::vector<std::int64_t>& ids, const std::string& tag) {
  const fs::path out = fs::temp_directory_path() / ("ttmoe_peft_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(out);
  models::save_peft_adapter(a, out);
  io::SafetensorsWriter w;
  w.add("ids", std::span<const std::int64_t>(ids), {2, 9});
  w.write(out / "ids.safetensors");
  std::ofstream(out / "base_model.txt") << base_dir.string() << "\n";
  const std::string cmd = std::string("'") + TTMOE_REF_PYTHON_EXE + "' '" + TTMOE_SOURCE_DIR +
                          "/tests/models/peft_reference.py' --check '" + out.string() + "'";
  INFO(tag << ": " << cmd);
  REQUIRE(std::system(cmd.c_str()) == 0);
  auto logits = test::read_tensor<3, float>(io::SafetensorsFile(out / "peft_logits.safetensors"), "logits");
  fs::remove_all(out);
  return logits;
}

}  // namespace

TEST_CASE("peft parity: Llama with PEFT adapters, unmerged, merged and combined", "[llm][parity][peft]") {
  check_peft_case("peft_llama");
}
TEST_CASE("peft parity: Qwen2 with PEFT adapters, unmerged, merged and combined", "[llm][parity][peft]") {
  check_peft_case("peft_qwen2");
}

TEST_CASE("peft parity: an adapter made and saved by ttmoe loads in PEFT with the same logits", "[llm][parity][peft][io]") {
  for (const char* name : {"peft_llama", "peft_qwen2"}) {
    const fs::path base_dir = case_dir(name) / "base";
    auto m = models::load_llama<float>(base_dir);
    models::LoraAdapterConfig c;
    c.r = 3;
    c.lora_alpha = 5;
    c.use_rslora = true;
    c.target_regex = R"(model\.layers\.\d+\.(self_attn\.(k|o)_proj|mlp\.gate_proj))";
    c.rank_pattern = {{"o_proj", 5}};
    c.alpha_pattern = {{"layers.0.mlp.gate_proj", 2}};
    auto a = models::make_lora_adapter(m, c, 77);
    // Training would move B away from zero; random values stand in for it.
    std::mt19937_64 rng(78);
    std::normal_distribution<float> nd(0.f, 1.f);
    for (auto& [mod, f] : a.modules) {
      std::vector<float> v(std::size_t(f.lora_B.weight.numel()));
      for (auto& x : v) x = nd(rng) / std::sqrt(float(f.rank()));
      f.lora_B.weight = Tensor<float, DynShape<2>>::from_host(DynShape<2>(f.lora_B.weight.extent(0), f.rank()), v);
    }
    const auto ref = reference(name);
    const auto peft_logits = peft_logits_of_saved(a, base_dir, ref.flat<std::int64_t>("ids"), "save_" + std::string(name));
    CHECK(test::normwise_rel_error(m.forward(ref.get<2, std::int64_t>("ids")), peft_logits) > 0.05);  // the adapter matters
    models::AttachedAdapters<float> on(m, {{&a, 1.0}}, models::LoraMode::unmerged);
    const double err = test::normwise_rel_error(m.forward(ref.get<2, std::int64_t>("ids")), peft_logits);
    INFO(name << ": ttmoe logits vs PEFT's on the ttmoe-saved adapter, normwise relative error " << err);
    CHECK(err <= 1e-4);
  }
}

// ---- LoRA training (training/llama_lora.hpp) against PEFT + torch.optim.AdamW (peft_reference.py's
// train/ case): the same adapter, micro-batches with prompts and padding masked out, two AdamW steps
// of two micro-batches. Each micro-batch's loss and step 0's accumulated gradients must match, then
// the factors' change after both steps (the first Adam step is nearly lr * sign(g), the second
// depends on the gradients' sizes); the trained adapter, saved, loads in PEFT with the same logits.
TEST_CASE("lora training parity: train_lora repeats PEFT + torch AdamW", "[llm][parity][peft][train]") {
  for (const char* name : {"peft_llama", "peft_qwen2"}) {
    const fs::path dir = case_dir(name) / "train";
    const auto ref = test::Fixture("reference", "llm/" + std::string(name) + "/train");
    auto m = models::load_llama<float>(case_dir(name) / "base");
    auto a = models::load_peft_adapter(dir / "init", m);
    std::map<std::string, std::vector<float>> before;
    for (const auto& p : nn::named_parameters<float>(a)) before[p.name] = p.flat.to_vector();
    const auto hyper = ref.get<1, double>("hyper").to_vector();
    const auto losses = ref.get<1, double>("losses").to_vector();
    const std::size_t steps = std::size_t(hyper[5]), accumulation = std::size_t(hyper[6]);
    std::vector<models::CausalLMBatch<>> batches;
    for (std::size_t k = 0; k < steps * accumulation; ++k)
      batches.push_back({ref.get<2, std::int64_t>("ids_" + std::to_string(k)), ref.flat<std::int64_t>("labels_" + std::to_string(k))});
    CHECK(batches[0].scored_tokens() == 6 + 4);  // row 0: positions 3..8 (prompt 0..2); row 1: 2..5 (then padding)

    {  // Step 0 by hand: losses and accumulated gradients.
      training::LoraTrainingAttachment<float, cpu> attach(m, a);
      for (std::size_t k = 0; k < accumulation; ++k) {
        autograd::Tape tape;
        attach.bind();
        auto loss = models::causal_lm_loss(m, batches[k]);
        CHECK(double(loss.item()) == Approx(losses[k]).epsilon(1e-5));
        autograd::backward(tape, decltype(loss)(loss * float(1.0 / double(accumulation))));
      }
      for (const auto& p : nn::named_parameters<float>(a)) {  // now trainable: views share the gradients
        INFO(name << ": gradient of " << p.name);
        REQUIRE(p.flat.grad().defined());
        const auto want = ref.get<2, float>("grad." + p.name);
        const double err = test::normwise_rel_error(p.flat.grad().reshape(want.shape()), want);
        INFO("normwise relative error " << err);
        CHECK(err <= 1e-4);
        p.flat.zero_grad();
      }
      // The base stays frozen: no base parameter is trainable while attached.
      CHECK(nn::trainable_parameters<float>(m).empty());
    }
    const auto trainable_before = nn::trainable_parameters<float>(m).size();

    training::LoraTrainOptions o;
    o.adam.lr = hyper[0];
    o.adam.beta1 = hyper[1];
    o.adam.beta2 = hyper[2];
    o.adam.eps = hyper[3];
    o.adam.weight_decay = hyper[4];
    o.loop.total_steps = steps;
    o.loop.accumulation = accumulation;
    std::vector<double> step_losses;
    o.loop.progress = [&](const training::StepReport& r) { step_losses.push_back(r.loss); };
    training::train_lora(m, a, [&](std::size_t step, std::size_t micro) { return batches[step * accumulation + micro]; }, o);
    REQUIRE(step_losses.size() == steps);
    for (std::size_t s = 0; s < steps; ++s)
      CHECK(step_losses[s] == Approx((losses[2 * s] + losses[2 * s + 1]) / 2).epsilon(1e-5));
    CHECK(nn::trainable_parameters<float>(m).size() == trainable_before);  // flags restored
    for (const auto& p : nn::named_parameters<float>(a)) {
      const auto want = ref.get<2, float>("final." + p.name).to_vector();
      const auto got = p.flat.to_vector();
      const auto& b = before.at(p.name);
      double diff = 0, norm = 0;  // the change: (got - b) vs (want - b)
      for (std::size_t i = 0; i < b.size(); ++i) {
        diff += std::pow(double(got[i]) - double(want[i]), 2);
        norm += std::pow(double(want[i]) - double(b[i]), 2);
      }
      INFO(name << ": " << p.name << ": change after " << steps << " steps vs PEFT's, normwise relative error "
                << std::sqrt(diff / norm));
      CHECK(norm > 0);
      CHECK(std::sqrt(diff / norm) <= 1e-3);
    }
    const auto base_ref = reference(name);
    const auto peft_logits =
        peft_logits_of_saved(a, case_dir(name) / "base", base_ref.flat<std::int64_t>("ids"), "trained_" + std::string(name));
    models::AttachedAdapters<float> on(m, {{&a, 1.0}}, models::LoraMode::unmerged);
    const auto ids = base_ref.get<2, std::int64_t>("ids");
    const double err = test::normwise_rel_error(m.forward(ids), peft_logits);
    INFO(name << ": logits of the trained adapter vs PEFT's after loading it, normwise relative error " << err);
    CHECK(err <= 1e-4);
  }
}
