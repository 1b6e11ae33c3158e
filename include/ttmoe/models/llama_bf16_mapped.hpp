#pragma once
// Zero-copy BF16 loading of a Llama-family LM (issue #14, "Weights"): the decoder Linears, the
// embedding table (which a tied head shares) and an untied head point straight into the
// memory-mapped safetensors file when it stores them as BF16, so no F32 model and no second BF16
// copy ever exists. The mapping is the storage owner (shared by every view; it unmaps when the
// last layer goes). The kernel pages weights in on first use, so the resident set is the file's
// weight bytes plus norms, biases and the KV cache. A tensor is COPIED (rounded to BF16, one
// tensor at a time) only when the file stores it as F32/F16 or its bytes are not 2-byte aligned.
// Norms and biases (small) are read into F32 as usual. Each decoder layer is still constructed
// (with F32 weights) before its matrices are adopted, one layer at a time; the pool blocks those
// F32 weights free are returned to the OS when the load ends, so they never add to decoding's
// resident set, while blocks the pool cached before the load stay cached for their owners.

#include <cstdint>
#include <filesystem>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ttmoe/core/caching_pool.hpp"
#include "ttmoe/core/device.hpp"
#include "ttmoe/io/bf16_matrix.hpp"
#include "ttmoe/io/safetensors.hpp"
#include "ttmoe/io/safetensors_mmap.hpp"
#include "ttmoe/models/llama.hpp"
#include "ttmoe/models/llama_bf16.hpp"
#include "ttmoe/nn/checkpoint.hpp"

namespace ttmoe::models {

namespace detail {

/// The BF16 bits of the 2-D tensor `key` of `src`. Stored BF16 and 2-byte aligned: with
/// Bf16Storage::mapped a view into the mapping (kept alive by `owner`), its pages mapped in now
/// (io::detail::prefault_read); with huge_pages a copy in huge pages, a file mapping's pages
/// released as they are copied (io::copy_to_huge_pages). Otherwise a converted, owned copy.
template <class F>
io::Bf16Matrix mapped_bf16(const F& src, const std::shared_ptr<const void>& owner, const std::string& key,
                           Bf16Storage storage) {
  const io::TensorInfo& t = src.info(key);
  const index_t rows = index_t(t.shape[0]), cols = index_t(t.shape[1]);
  const auto addr = reinterpret_cast<std::uintptr_t>(t.bytes.data());
  if (t.dtype == io::DType::BF16 && addr % alignof(std::uint16_t) == 0) {
    const auto view = io::Bf16Matrix::view(owner, reinterpret_cast<const std::uint16_t*>(t.bytes.data()), rows, cols);
    // The mapped pages are dropped as they are copied only where they are a file's mapping: caller
    // bytes (SafetensorsFile::from_bytes) would be zeroed.
    if (storage == Bf16Storage::huge_pages) return io::copy_to_huge_pages(view, src.is_mapped());
    io::detail::prefault_read(t.bytes);  // the pages now, not as the first forward's page faults
    return view;
  }
  std::vector<float> values(t.numel());
  src.template read_as<float>(key, std::span<float>(values));
  return io::Bf16Matrix::from_floats(values.data(), rows, cols);
}

/// Appends a problem to `problems` unless `src` holds `key` as a float tensor of shape [rows, cols].
template <class F>
void check_matrix(const F& src, const std::string& key, index_t rows, index_t cols, std::vector<std::string>& problems) {
  if (!src.contains(key)) {
    problems.push_back("missing key '" + key + "'");
    return;
  }
  const io::TensorInfo& t = src.info(key);
  const std::vector<std::int64_t> want{std::int64_t(rows), std::int64_t(cols)};
  if (t.shape != want)
    problems.push_back("shape mismatch for '" + key + "': file " + nn::detail::shape_str(t.shape) + ", expected " +
                       nn::detail::shape_str(want));
  else if (!nn::detail::is_float_dtype(t.dtype))
    problems.push_back("dtype " + std::string(io::dtype_name(t.dtype)) + " of '" + key + "' is not a float type");
}

}  // namespace detail

/// Builds the model of `config` with BF16-resident weights taken from `src` (a SafetensorsFile or
/// ShardedSafetensors, shared so the views can own it). Every problem, with the matrices (missing,
/// mis-shaped, non-float) and with the norms and biases (missing, mis-shaped, unexpected keys),
/// comes in ONE nn::CheckpointError listing them all. `storage`: where the BF16 matrices live
/// (Bf16Storage: views into the mapping, or huge-page copies).
template <class F>
LlamaForCausalLM<float, cpu> load_llama_bf16_mapped(const LlamaConfig& config, std::shared_ptr<const F> src,
                                                    Bf16Storage storage = Bf16Storage::mapped) {
  config.validate();
  const std::shared_ptr<const void> owner = src;
  const index_t hidden = config.hidden_size, heads = config.num_attention_heads * config.head_dim,
                kv = config.num_key_value_heads * config.head_dim, inter = config.intermediate_size;
  struct Matrix {
    std::string name;
    index_t rows, cols;
  };
  // Every matrix that stays BF16, with the shape the config implies.
  std::vector<Matrix> matrices{{"model.embed_tokens", config.vocab_size, hidden}};
  if (!config.tie_word_embeddings) matrices.push_back({"lm_head", config.vocab_size, hidden});
  for (index_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    for (const Matrix& m : {Matrix{"self_attn.q_proj", heads, hidden}, Matrix{"self_attn.k_proj", kv, hidden},
                            Matrix{"self_attn.v_proj", kv, hidden}, Matrix{"self_attn.o_proj", hidden, heads},
                            Matrix{"mlp.gate_proj", inter, hidden}, Matrix{"mlp.up_proj", inter, hidden},
                            Matrix{"mlp.down_proj", hidden, inter}})
      matrices.push_back({p + m.name, m.rows, m.cols});
  }
  std::vector<std::string> problems;
  for (const Matrix& m : matrices) detail::check_matrix(*src, m.name + ".weight", m.rows, m.cols, problems);
  // With a bad matrix nothing is adopted (or converted): the model is built only so that the norms
  // and biases are checked too, its Linears without weights, and the load ends in one error below.
  const bool adopt_matrices = problems.empty();
  // The layers' transient F32 weights land in the host pool's cache; hand those blocks back to the
  // OS at the end so they do not count against decoding's resident set (issue target: peak RSS
  // <= 1.15 x the weights on disk), but keep what was cached before the load for its owners.
  memory::ReleaseCachedAfterScope<memory::HostPages> release_transient_blocks(cpu::memory_pool());

  LlamaForCausalLM<float, cpu> m;
  m.config = config;
  // The views are streamed once per decoded token: 2 MiB page-table entries where the page cache
  // allows them, asked for before the first page is touched (io::detail::advise_huge_pages).
  if (adopt_matrices && storage == Bf16Storage::mapped) src->advise_huge_pages();
  if (adopt_matrices) {
    m.model.embed_tokens.adopt_weight_bf16(detail::mapped_bf16(*src, owner, "model.embed_tokens.weight", storage),
                                           "model.embed_tokens");
    if (!config.tie_word_embeddings)
      m.lm_head.adopt_weight_bf16(detail::mapped_bf16(*src, owner, "lm_head.weight", storage), "lm_head");
  }
  const auto freqs = config.rope_frequencies();
  m.model.layers.reserve(std::size_t(config.num_hidden_layers));
  for (index_t i = 0; i < config.num_hidden_layers; ++i) {
    // The layer's F32 weights exist only until adopted (one layer at a time, before any mapped
    // page is touched), so they never add to the peak resident set of decoding. Nothing is drawn
    // for them (nn::SkipInit): the matrices are adopted and the norms and biases read below.
    auto& l = [&]() -> LlamaDecoderLayer<float, cpu>& {
      nn::SkipInit no_draws;
      return m.model.layers.emplace_back(config, freqs, 1000 + 32 * std::uint64_t(i));
    }();
    const std::string p = "model.layers." + std::to_string(i) + ".";
    auto adopt = [&](nn::Linear<float, cpu>& lin, const std::string& name) {
      if (adopt_matrices) lin.adopt_weight_bf16(detail::mapped_bf16(*src, owner, p + name + ".weight", storage), p + name);
      else lin.weight = Tensor<float, DynShape<2>, cpu>{};
    };
    adopt(l.self_attn.q_proj, "self_attn.q_proj");
    adopt(l.self_attn.k_proj, "self_attn.k_proj");
    adopt(l.self_attn.v_proj, "self_attn.v_proj");
    adopt(l.self_attn.o_proj, "self_attn.o_proj");
    adopt(l.mlp.gate_proj, "mlp.gate_proj");
    adopt(l.mlp.up_proj, "mlp.up_proj");
    adopt(l.mlp.down_proj, "mlp.down_proj");
  }
  m.model.norm = nn::RMSNorm<float, cpu>(hidden, float(config.rms_norm_eps));
  // Norms and biases: the adopted matrices are undefined F32 parameters (load_state skips them),
  // so their keys are declared as used here.
  nn::LoadOptions opt;
  opt.ignore_keys = {"*.rotary_emb.inv_freq", "lm_head.weight"};
  for (const Matrix& mat : matrices) opt.ignore_keys.push_back(mat.name + ".weight");
  nn::LoadReport unused;
  auto rest = nn::check_state(m, *src, io::timm_names(), opt, unused);
  problems.insert(problems.end(), std::make_move_iterator(rest.begin()), std::make_move_iterator(rest.end()));
  if (!problems.empty()) throw nn::CheckpointError(src->path(), std::move(problems));
  nn::load_state(m, *src, io::timm_names(), opt);  // checks again (file metadata only) and reads
  return m;
}

}  // namespace ttmoe::models
