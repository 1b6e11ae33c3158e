#pragma once
// SentenceEncoder: a sentence-transformers model folder (all-MiniLM-L6-v2, all-mpnet-base-v2, ...)
// read and run the way sentence-transformers runs it:
//   modules.json   -> Transformer (BERT or MPNet, models/bert.hpp / models/mpnet.hpp)
//                     -> Pooling (mean over the real tokens; the only mode supported)
//                     -> Normalize (L2, when listed)
//   sentence_bert_config.json max_seq_length -> each text truncated to that many tokens, specials
//                     included, by the folder's tokenizer.json (text::HfTokenizer, WordPiece).
// encode() sorts the texts by token count and runs them in batches of similar lengths, each batch
// PACKED (no padding rows: nn/packed_attention.hpp), then puts the rows back in input order.
// Anything else in the folder (another module type, a pooling mode other than mean, a missing file)
// is a SentenceEncoderError naming the file and the field.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "ttmoe/models/bert.hpp"
#include "ttmoe/models/config_file.hpp"
#include "ttmoe/models/mpnet.hpp"
#include "ttmoe/text/hf_tokenizer.hpp"

namespace ttmoe::models {

/// A sentence-transformers folder ttmoe cannot run; what() reads "<file>: field '<field>': <problem>".
class SentenceEncoderError : public ConfigFieldError {
 public:
  using ConfigFieldError::ConfigFieldError;
};

/// How encode() batches.
struct SentenceEncoderOptions {
  index_t batch_size = 32;  ///< texts per forward pass (sentence-transformers' default)
  /// Overrides sentence_bert_config.json's max_seq_length when set (capped by the model's positions).
  std::optional<index_t> max_seq_length;
};

namespace detail {
/// 64-bit FNV-1a over `bytes`, continuing from `h` (model identities for caches).
inline std::uint64_t fnv1a(std::string_view bytes, std::uint64_t h = 1469598103934665603ull) {
  for (const unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return h;
}
/// The whole of a text file ("" when it does not exist).
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}
/// L2-normalises each row of the row-major [rows, dim] `x` like torch.nn.functional.normalize
/// (divides by max(norm, 1e-12)).
inline void normalize_rows(std::span<float> x, index_t dim) {
  for (std::size_t r = 0; r + std::size_t(dim) <= x.size(); r += std::size_t(dim)) {
    double ss = 0;
    for (index_t k = 0; k < dim; ++k) ss += double(x[r + std::size_t(k)]) * x[r + std::size_t(k)];
    const float inv = float(1.0 / std::max(std::sqrt(ss), 1e-12));
    for (index_t k = 0; k < dim; ++k) x[r + std::size_t(k)] *= inv;
  }
}
}  // namespace detail

/// A sentence-transformers encoder in F32 whose model runs on device D (embeddings come back to the
/// host); satisfies models::SentenceEmbedder. A class template so that nothing is instantiated until
/// a translation unit that has D's backend uses it; `SentenceEncoder` is the CPU one.
template <class D = cpu>
class BasicSentenceEncoder {
 public:
  /// Loads the folder `dir` (see the file comment).
  static BasicSentenceEncoder load(const std::filesystem::path& dir, const SentenceEncoderOptions& opt = {}) {
    namespace fs = std::filesystem;
    BasicSentenceEncoder e;
    e.batch_size_ = std::max<index_t>(1, opt.batch_size);
    const fs::path modules = dir / "modules.json";
    if (!fs::exists(modules))
      throw SentenceEncoderError(modules.string(), "", "no modules.json: not a sentence-transformers folder");
    const auto list = read_config_json<SentenceEncoderError>(modules, "module list");
    if (!list.is_array() || list.empty())
      throw SentenceEncoderError(modules.string(), "", "expected a non-empty JSON array of modules");
    std::optional<fs::path> transformer_dir;
    bool pooled = false;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const auto& m = list[i];
      const std::string field = "[" + std::to_string(i) + "]";
      if (!m.is_object() || !m.contains("type") || !m["type"].is_string())
        throw SentenceEncoderError(modules.string(), field + ".type", "each module needs a string type");
      const std::string type = m["type"].template get<std::string>();
      const std::string path = m.contains("path") && m["path"].is_string() ? m["path"].template get<std::string>() : "";
      // sentence-transformers 5 writes sentence_transformers.models.<Class>, 6 the class's module path
      // (sentence_transformers.base.modules.transformer.Transformer): the class name decides.
      const std::string cls = type.rfind("sentence_transformers.", 0) == 0 ? type.substr(type.rfind('.') + 1) : type;
      if (cls == "Transformer") {
        if (i != 0) throw SentenceEncoderError(modules.string(), field + ".type", "the Transformer must come first");
        transformer_dir = dir / path;
      } else if (cls == "Pooling") {
        if (!transformer_dir || pooled)
          throw SentenceEncoderError(modules.string(), field + ".type", "Pooling must follow the Transformer, once");
        e.check_pooling(dir / path / "config.json");
        pooled = true;
      } else if (cls == "Normalize") {
        if (!pooled) throw SentenceEncoderError(modules.string(), field + ".type", "Normalize must follow Pooling");
        e.normalize_ = true;
      } else {
        throw SentenceEncoderError(modules.string(), field + ".type",
                                   "'" + type + "' is not supported (Transformer, Pooling, Normalize)");
      }
    }
    if (!pooled) throw SentenceEncoderError(modules.string(), "", "no Pooling module (sentence embeddings need one)");
    e.load_transformer(*transformer_dir, opt);
    e.identity_ = "st:" + fs::path(dir).lexically_normal().filename().string() + ":" + e.model_type() + ":" +
                  std::to_string(e.dim()) + ":" + std::to_string(e.max_seq_length_) + ":" + e.weights_hash(*transformer_dir, modules);
    return e;
  }

  /// Embeddings [texts.size(), dim()] of `texts` (row i is texts[i]), L2-normalised when the folder
  /// lists Normalize. An empty text is embedded as its special tokens alone, as sentence-transformers does.
  Tensor<float, DynShape<2>, cpu> encode(const std::vector<std::string>& texts) const {
    const index_t n = index_t(texts.size()), d = dim();
    std::vector<std::vector<std::int32_t>> ids(texts.size());
    for (std::size_t i = 0; i < texts.size(); ++i) ids[i] = tokenizer_->encode(texts[i], true);
    // Longest first: batches of similar lengths, the largest allocation first.
    std::vector<std::size_t> order(texts.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return ids[a].size() > ids[b].size(); });
    std::vector<float> out(std::size_t(n * d));
    for (std::size_t first = 0; first < order.size(); first += std::size_t(batch_size_)) {
      const std::size_t last = std::min(order.size(), first + std::size_t(batch_size_));
      nn::PackedSequences seqs;
      std::vector<std::int64_t> packed;
      for (std::size_t k = first; k < last; ++k) {
        const auto& t = ids[order[k]];
        packed.insert(packed.end(), t.begin(), t.end());
        seqs.push(index_t(t.size()));
      }
      const auto tok = IndexTensor<DynShape<1>, D>::from_host(DynShape<1>(index_t(packed.size())),
                                                                 std::span<const std::int64_t>(packed));
      const auto h = std::visit([&](const auto& m) { return m.hidden_states(tok, seqs).to_vector(); }, model_);
      const float* hp = h.data();
      for (std::size_t k = first; k < last; ++k) {  // mean over the sequence's tokens (all real)
        const index_t b = index_t(k - first), L = seqs.length(b);
        float* row = out.data() + order[k] * std::size_t(d);
        for (index_t c = 0; c < d; ++c) {
          double s = 0;
          for (index_t t = 0; t < L; ++t) s += hp[(seqs.offsets[std::size_t(b)] + t) * d + c];
          row[c] = L ? float(s / double(L)) : 0.f;
        }
      }
    }
    if (normalize_) detail::normalize_rows(out, d);
    return Tensor<float, DynShape<2>, cpu>::from_host(DynShape<2>(n, d), out);
  }

  /// Width of the embeddings.
  index_t dim() const {
    return std::visit([](const auto& m) { return m.config.hidden_size; }, model_);
  }
  /// Tokens per text after truncation (special tokens included).
  index_t max_seq_length() const { return max_seq_length_; }
  /// The same (models::SentenceEmbedder's name for it).
  index_t max_tokens() const { return max_seq_length_; }
  /// Whether embeddings are L2-normalised.
  bool normalizes() const { return normalize_; }
  /// "bert" or "mpnet".
  std::string model_type() const {
    return std::visit([](const auto& m) { return m.config.model_type; }, model_);
  }
  /// A string that changes whenever the embeddings could: the folder's name, architecture, width,
  /// truncation and a hash of its config, modules and weight file size (for embedding caches).
  const std::string& identity() const { return identity_; }
  /// The tokenizer (for callers that count tokens).
  const text::HfTokenizer& tokenizer() const { return *tokenizer_; }

 private:
  /// Mean pooling is the one supported mode: any other mode set (or mean unset) is an error.
  void check_pooling(const std::filesystem::path& file) {
    const auto j = read_config_json<SentenceEncoderError>(file, "pooling config");
    if (!j.is_object()) throw SentenceEncoderError(file.string(), "", "expected a JSON object");
    pooling_file_ = file.string();
    for (const char* key : {"word_embedding_dimension", "embedding_dimension"})  // versions <= 5, 6
      if (j.contains(key) && j[key].is_number_integer()) pooled_dim_ = j[key].template get<index_t>();
    if (j.contains("pooling_mode") && j["pooling_mode"].is_string()) {
      const std::string mode = j["pooling_mode"].template get<std::string>();
      if (mode != "mean") throw SentenceEncoderError(file.string(), "pooling_mode", "'" + mode + "' is not supported (mean)");
      return;
    }
    for (const auto& [key, value] : j.items()) {
      if (key.rfind("pooling_mode_", 0) != 0) continue;
      const bool on = value.is_boolean() && value.template get<bool>();
      if (key == "pooling_mode_mean_tokens" && !on)
        throw SentenceEncoderError(file.string(), key, "must be true (mean pooling is the one supported mode)");
      if (key != "pooling_mode_mean_tokens" && on)
        throw SentenceEncoderError(file.string(), key, "is not supported (mean pooling only)");
    }
    if (!j.contains("pooling_mode_mean_tokens"))
      throw SentenceEncoderError(file.string(), "pooling_mode_mean_tokens", "is required (mean pooling)");

  }

  void load_transformer(const std::filesystem::path& dir, const SentenceEncoderOptions& opt) {
    const auto config = EncoderConfig::load(dir / "config.json");
    if (config.is_mpnet()) model_ = MPNetModel<float, D>::load(dir);
    else model_ = BertModel<float, D>::load(dir);
    if (pooled_dim_ && pooled_dim_ != config.hidden_size)
      throw SentenceEncoderError(pooling_file_, "embedding_dimension",
                                 std::to_string(pooled_dim_) + " differs from the model's hidden_size " +
                                     std::to_string(config.hidden_size));
    // The truncation length: sentence_bert_config.json's max_seq_length (sentence-transformers <= 5),
    // else tokenizer_config.json's model_max_length (where version 6 keeps it), else the positions.
    std::int64_t max_len = std::int64_t(config.max_tokens());
    const auto st = dir / "sentence_bert_config.json", tc = dir / "tokenizer_config.json";
    bool from_st = false;
    if (std::filesystem::exists(st)) {
      const auto j = read_config_json<SentenceEncoderError>(st, "sentence-transformers config");
      const detail::ConfigFieldReader<SentenceEncoderError> r{j, st.string(), ""};
      if (r.boolean("do_lower_case", false))
        r.fail("do_lower_case", "true is not supported (lower-casing belongs in tokenizer.json's normalizer)");
      if (r.has("max_seq_length")) {
        max_len = r.integer("max_seq_length");
        if (max_len <= 0) r.fail("max_seq_length", std::to_string(max_len) + " must be positive");
        from_st = true;
      }
    }
    if (!from_st && std::filesystem::exists(tc)) {
      const auto j = read_config_json<SentenceEncoderError>(tc, "tokenizer config");
      // transformers writes a huge float sentinel when the tokenizer has no limit: only integers count.
      if (j.is_object() && j.contains("model_max_length") && j["model_max_length"].is_number_integer() &&
          j["model_max_length"].template get<std::int64_t>() > 0)
        max_len = std::min(max_len, j["model_max_length"].template get<std::int64_t>());
    }
    if (opt.max_seq_length) max_len = std::int64_t(*opt.max_seq_length);
    max_seq_length_ = std::min(index_t(std::max<std::int64_t>(1, max_len)), config.max_tokens());
    const auto tok = dir / "tokenizer.json";
    if (!std::filesystem::exists(tok))
      throw SentenceEncoderError(tok.string(), "", "no tokenizer.json beside the model");
    tokenizer_ = std::make_shared<text::HfTokenizer>(text::HfTokenizer::from_file(tok.string()));
    tokenizer_->set_padding(false);  // batches are packed, never padded
    tokenizer_->set_truncation(std::size_t(max_seq_length_));
  }

  std::string weights_hash(const std::filesystem::path& dir, const std::filesystem::path& modules) const {
    std::error_code ec;
    const auto size = std::filesystem::file_size(dir / "model.safetensors", ec);
    std::uint64_t h = detail::fnv1a(detail::slurp(dir / "config.json"));
    h = detail::fnv1a(detail::slurp(modules), h);
    h = detail::fnv1a(std::to_string(ec ? 0 : size), h);
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    return buf;
  }

  std::variant<BertModel<float, D>, MPNetModel<float, D>> model_;
  std::shared_ptr<text::HfTokenizer> tokenizer_;
  bool normalize_ = false;
  index_t max_seq_length_ = 0, batch_size_ = 32, pooled_dim_ = 0;
  std::string identity_, pooling_file_;
};

/// The sentence-transformers encoder on the CPU.
using SentenceEncoder = BasicSentenceEncoder<cpu>;

}  // namespace ttmoe::models
