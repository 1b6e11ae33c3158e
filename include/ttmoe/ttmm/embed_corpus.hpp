#pragma once
// Embedding a training corpus with φ (any models::SentenceEmbedder), in batches, with a progress
// line, and cached on disk: the embedding matrix [documents, dim] is stored as a safetensors file
// whose metadata holds the cache key (the embedder's identity, a hash of the documents, the
// embedder's token limit). A cache file whose key matches is read instead of embedding again; one
// whose key differs (another model, corpus or truncation) is stale and is recomputed and replaced;
// one that cannot be read as such a file is corrupt and is an EmbeddingCacheError naming it (never
// silently overwritten: it may be something else the user pointed at by mistake). Writes go through
// io::SafetensorsWriter::write (temporary file, fsync, rename), so an interrupted run leaves either
// the old cache or the new one.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ttmoe/core/error.hpp"
#include "ttmoe/io/safetensors.hpp"
#include "ttmoe/io/safetensors_writer.hpp"
#include "ttmoe/models/sentence_embedder.hpp"
#include "ttmoe/models/sentence_encoder.hpp"
#include "ttmoe/training/progress.hpp"

namespace ttmoe::ttmm {

/// An embedding cache file that is not one (unreadable, or lacking the key or the matrix).
class EmbeddingCacheError : public Error {
 public:
  EmbeddingCacheError(std::string file, const std::string& problem)
      : Error(file + ": not a usable embedding cache: " + problem), file_(std::move(file)) {}
  /// The cache file.
  const std::string& file() const noexcept { return file_; }

 private:
  std::string file_;
};

/// Progress of embed_corpus, reported after each batch.
struct EmbedProgress {
  std::size_t done = 0, total = 0;  ///< documents embedded so far, of all
  double seconds = 0;               ///< since embedding started
};

/// How embed_corpus runs.
struct EmbedCorpusOptions {
  std::size_t batch = 256;            ///< documents per embedder call (the embedder batches further)
  std::filesystem::path cache;        ///< empty: no cache
  std::function<void(const EmbedProgress&)> progress;  ///< e.g. stderr_embed_progress()
};

/// What embed_corpus returns.
struct EmbeddedCorpus {
  Tensor<float, DynShape<2>, cpu> embeddings;  ///< [documents, dim], row i for document i
  bool from_cache = false;                     ///< read from a matching cache file
};

/// A progress callback drawing training::draw_progress_line on stderr (documents/s).
inline std::function<void(const EmbedProgress&)> stderr_embed_progress(std::string label = "embed") {
  return [label = std::move(label)](const EmbedProgress& p) {
    training::draw_progress_line(label, p.done, p.total, p.seconds > 0 ? double(p.done) / p.seconds : 0.0, "docs");
  };
}

/// 64-bit hash of a list of documents (each document's length and bytes, in order), as 16 hex digits.
inline std::string corpus_hash(const std::vector<std::string>& documents) {
  std::uint64_t h = models::detail::fnv1a(std::to_string(documents.size()));
  for (const auto& d : documents) h = models::detail::fnv1a(d, models::detail::fnv1a(std::to_string(d.size()) + ":", h));
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

namespace detail {
inline constexpr const char* kCacheFormat = "ttmoe-ttmm-embeddings-1";

/// The metadata a cache file for (embedder, documents) must carry.
template <models::SentenceEmbedder E>
std::vector<std::pair<std::string, std::string>> cache_key(const E& embedder, const std::vector<std::string>& documents) {
  return {{"ttmm.format", kCacheFormat},
          {"ttmm.embedder", std::string(embedder.identity())},
          {"ttmm.max_tokens", std::to_string(embedder.max_tokens())},
          {"ttmm.corpus_hash", corpus_hash(documents)},
          {"ttmm.documents", std::to_string(documents.size())},
          {"ttmm.dim", std::to_string(index_t(embedder.dim()))}};
}

/// The cached matrix when `file` holds one for `key`; nothing when its key differs (stale); an
/// EmbeddingCacheError when it is not an embedding cache at all.
inline std::optional<Tensor<float, DynShape<2>, cpu>> read_cache(const std::filesystem::path& file,
                                                                  const std::vector<std::pair<std::string, std::string>>& key) {
  std::optional<io::SafetensorsFile> f;
  try {
    f.emplace(file);
  } catch (const io::SafetensorsError& e) {
    throw EmbeddingCacheError(file.string(), e.what());
  }
  const auto& meta = f->metadata();
  const auto format = meta.find("ttmm.format");
  if (format == meta.end() || format->second != kCacheFormat)
    throw EmbeddingCacheError(file.string(), "no ttmm.format \"" + std::string(kCacheFormat) + "\" in its metadata");
  for (const auto& [k, v] : key) {
    const auto it = meta.find(k);
    if (it == meta.end()) throw EmbeddingCacheError(file.string(), "metadata key '" + k + "' is missing");
    if (it->second != v) return std::nullopt;  // stale
  }
  if (!f->contains("embeddings")) throw EmbeddingCacheError(file.string(), "no 'embeddings' tensor");
  const auto& info = f->info("embeddings");
  const std::int64_t n = std::stoll(meta.at("ttmm.documents")), d = std::stoll(meta.at("ttmm.dim"));
  if (info.dtype != io::DType::F32 || info.shape != std::vector<std::int64_t>{n, d})
    throw EmbeddingCacheError(file.string(), "'embeddings' is " + std::string(io::dtype_name(info.dtype)) + " " +
                                                 io::format_shape(std::span<const std::int64_t>(info.shape)) +
                                                 ", not F32 [" + std::to_string(n) + ", " + std::to_string(d) + "]");
  std::vector<float> v(std::size_t(n * d));
  f->read_as<float>("embeddings", std::span<float>(v));
  return Tensor<float, DynShape<2>, cpu>::from_host(DynShape<2>(index_t(n), index_t(d)), v);
}
}  // namespace detail

/// Embeds `documents` with `embedder` (see the file comment); an empty corpus gives [0, dim].
template <models::SentenceEmbedder E>
EmbeddedCorpus embed_corpus(const E& embedder, const std::vector<std::string>& documents,
                            const EmbedCorpusOptions& opt = {}) {
  const auto key = detail::cache_key(embedder, documents);
  if (!opt.cache.empty() && std::filesystem::exists(opt.cache))
    if (auto cached = detail::read_cache(opt.cache, key)) return {std::move(*cached), true};
  const index_t d = index_t(embedder.dim());
  std::vector<float> all(documents.size() * std::size_t(d));
  const std::size_t step = std::max<std::size_t>(1, opt.batch);
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t first = 0; first < documents.size(); first += step) {
    const std::size_t last = std::min(documents.size(), first + step);
    const std::vector<std::string> part(documents.begin() + std::ptrdiff_t(first), documents.begin() + std::ptrdiff_t(last));
    const auto e = embedder.encode(part);
    const auto v = e.to_vector();
    std::copy(v.begin(), v.end(), all.begin() + std::ptrdiff_t(first * std::size_t(d)));
    if (opt.progress)
      opt.progress({last, documents.size(), std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()});
  }
  if (!opt.cache.empty()) {
    if (opt.cache.has_parent_path()) std::filesystem::create_directories(opt.cache.parent_path());
    io::SafetensorsWriter w;
    w.add("embeddings", std::span<const float>(all), {std::int64_t(documents.size()), std::int64_t(d)}, io::DType::F32);
    for (const auto& [k, v] : key) w.set_metadata(k, v);
    w.write(opt.cache);
  }
  return {Tensor<float, DynShape<2>, cpu>::from_host(DynShape<2>(index_t(documents.size()), d), all), false};
}

}  // namespace ttmoe::ttmm
