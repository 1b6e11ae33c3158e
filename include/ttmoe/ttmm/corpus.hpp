#pragma once
// TTMM training corpora: the documents one expert per cluster is trained on. A corpus is either a
// folder of text files (read recursively; every regular file is one document, its id the path
// relative to the folder, in sorted order so ids and order are the same on every machine and in
// every MPI rank) or a JSONL file (one JSON object per line, the text under a configurable field,
// the id under an optional field, else "<file>:<line>").
//
// Empty and non-UTF-8 documents are skipped, counted and named (Corpus::skipped) rather than fatal:
// a corpus of thousands of scraped files routinely holds a few, a single bad file must not cost a
// multi-hour clustering and training run, and neither kind carries text an expert could learn from
// (an invalid byte sequence has no defined meaning for the tokenizer, which would only see U+FFFD).
// What is malformed as a container (a JSONL line that is not a JSON object, a missing or non-string
// text field, an unreadable path) is the user's mistake and throws CorpusError naming the file,
// line and field. A corpus with no usable document at all throws too.
//
// Each document is truncated to its first N tokens (default 1024, the TTMM paper's) with the base
// model's tokenizer (tokenize_corpus).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ttmoe/core/error.hpp"
#include "ttmoe/text/tokenizer.hpp"
#include "ttmoe/text/utf8.hpp"

namespace ttmoe::ttmm {

/// A corpus that cannot be used: unreadable, malformed, or without one usable document. The message
/// names the path (and line / field where there is one).
class CorpusError : public ValueError {
 public:
  using ValueError::ValueError;
};

/// One training document.
struct Document {
  std::string id;    ///< relative path (folder corpora) or JSONL id field / "<file>:<line>"
  std::string text;  ///< valid UTF-8, not blank
};

/// A document left out of the corpus and why.
struct SkippedDocument {
  std::string id;
  std::string reason;  ///< "empty" or "not valid UTF-8 (first bad byte at offset N)"
};

/// The documents of a corpus, in a stable order, and the ones skipped.
struct Corpus {
  std::string source;  ///< the path it was read from
  std::vector<Document> documents;
  std::vector<SkippedDocument> skipped;

  /// One line per skipped document ("<source>: skipped <id>: <reason>"), for the user's log; empty
  /// when nothing was skipped.
  std::string skipped_report() const {
    std::string out;
    for (const auto& s : skipped) out += source + ": skipped " + s.id + ": " + s.reason + "\n";
    return out;
  }
};

/// How a corpus is read.
struct CorpusOptions {
  std::string text_field = "text";  ///< JSONL: the field holding a document's text
  std::string id_field;             ///< JSONL: the field holding its id ("" = "<file>:<line>")
};

namespace detail {

/// Whether `s` holds anything but ASCII whitespace (a blank document teaches an expert nothing).
inline bool is_blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; });
}

/// Offset of the first byte of the first invalid UTF-8 sequence of `s` (s must be invalid).
inline std::size_t first_invalid_byte(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const std::size_t at = i;
    const char32_t cp = text::next_code_point(s, i);
    // A decoded U+FFFD is an error unless the text spells U+FFFD itself (EF BF BD).
    if (cp == text::kReplacementChar && s.substr(at, i - at) != "\xEF\xBF\xBD") return at;
  }
  return s.size();
}

/// Adds `text` as document `id`, or records why it is skipped.
inline void add_document(Corpus& c, std::string id, std::string text) {
  if (!text::is_valid_utf8(text))
    c.skipped.push_back({std::move(id), "not valid UTF-8 (first bad byte at offset " + std::to_string(first_invalid_byte(text)) + ")"});
  else if (is_blank(text))
    c.skipped.push_back({std::move(id), "empty"});
  else
    c.documents.push_back({std::move(id), std::move(text)});
}

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw CorpusError(p.string() + ": cannot read the corpus file");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void read_folder(Corpus& c, const std::filesystem::path& root) {
  namespace fs = std::filesystem;
  std::vector<std::string> rel;
  for (const auto& e : fs::recursive_directory_iterator(root, fs::directory_options::follow_directory_symlink))
    if (e.is_regular_file()) rel.push_back(fs::relative(e.path(), root).generic_string());
  std::sort(rel.begin(), rel.end());
  for (auto& r : rel) {
    std::string text = read_file(root / r);
    add_document(c, std::move(r), std::move(text));
  }
}

inline void read_jsonl(Corpus& c, const std::filesystem::path& file, const CorpusOptions& o) {
  std::istringstream lines(read_file(file));
  std::string line;
  std::size_t number = 0;
  const std::string name = file.filename().string();
  while (std::getline(lines, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (is_blank(line)) continue;  // a blank line separates nothing and holds no document
    const std::string where = file.string() + ":" + std::to_string(number);
    const std::string fallback_id = name + ":" + std::to_string(number);
    // Invalid UTF-8 is a property of the document, not of the container: skip it like a text file.
    if (!text::is_valid_utf8(line)) {
      c.skipped.push_back({fallback_id, "not valid UTF-8 (first bad byte at offset " + std::to_string(first_invalid_byte(line)) +
                                            " of the line)"});
      continue;
    }
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw CorpusError(where + ": not a JSON object (" + e.what() + ")");
    }
    if (!j.is_object()) throw CorpusError(where + ": not a JSON object but a " + std::string(j.type_name()));
    const auto t = j.find(o.text_field);
    if (t == j.end()) throw CorpusError(where + ": no field '" + o.text_field + "' (set the text field with --text-field)");
    if (!t->is_string())
      throw CorpusError(where + ": field '" + o.text_field + "' is a " + std::string(t->type_name()) + ", not a string");
    std::string id = fallback_id;
    if (!o.id_field.empty()) {
      const auto i = j.find(o.id_field);
      if (i == j.end()) throw CorpusError(where + ": no id field '" + o.id_field + "'");
      id = i->is_string() ? i->get<std::string>() : i->dump();
    }
    add_document(c, std::move(id), t->get<std::string>());
  }
}

}  // namespace detail

/// Reads the corpus at `path`: a folder (recursive, sorted, ids = relative paths) or a `.jsonl` /
/// `.json` file of JSON lines. Empty and non-UTF-8 documents are skipped and listed in `skipped`.
/// Throws CorpusError for a missing path, a malformed JSONL line or field, and when no usable
/// document remains (the message then names what was skipped).
inline Corpus load_corpus(const std::filesystem::path& path, const CorpusOptions& o = {}) {
  namespace fs = std::filesystem;
  Corpus c;
  c.source = path.string();
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    detail::read_folder(c, path);
  } else if (fs::is_regular_file(path, ec)) {
    const auto ext = path.extension().string();
    if (ext != ".jsonl" && ext != ".json")
      throw CorpusError(c.source + ": a corpus is a folder of text files or a .jsonl file (got extension '" + ext + "')");
    detail::read_jsonl(c, path, o);
  } else {
    throw CorpusError(c.source + ": no such folder or file");
  }
  if (c.documents.empty()) {
    if (c.skipped.empty()) throw CorpusError(c.source + ": the corpus holds no document");
    std::string msg = c.source + ": no usable document; all " + std::to_string(c.skipped.size()) + " were skipped:";
    for (std::size_t i = 0; i < c.skipped.size() && i < 10; ++i) msg += " " + c.skipped[i].id + " (" + c.skipped[i].reason + ");";
    if (c.skipped.size() > 10) msg += " ...";
    throw CorpusError(msg);
  }
  return c;
}

/// The token ids of every document of `c` (same order), each truncated to its first `max_tokens`
/// (the BOS the tokenizer's template adds counts as one). Throws CorpusError for max_tokens < 2 and
/// for a document that yields fewer than two tokens (nothing a causal LM could be trained on).
inline std::vector<std::vector<std::int64_t>> tokenize_corpus(const Corpus& c, const text::Tokenizer& tok,
                                                              std::size_t max_tokens = 1024) {
  if (max_tokens < 2) throw CorpusError("tokenize_corpus: max_tokens " + std::to_string(max_tokens) + " (need at least 2)");
  std::vector<std::vector<std::int64_t>> out;
  out.reserve(c.documents.size());
  for (const auto& d : c.documents) {
    const auto ids = tok.encode(d.text, true);
    const std::size_t n = std::min(ids.size(), max_tokens);
    if (n < 2)
      throw CorpusError(c.source + ": document " + d.id + " gives " + std::to_string(n) + " token(s), fewer than two");
    out.emplace_back(ids.begin(), ids.begin() + std::ptrdiff_t(n));
  }
  return out;
}

}  // namespace ttmoe::ttmm
