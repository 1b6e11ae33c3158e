#pragma once
// The results records of a DomainBed run: one line of JSON per evaluation checkpoint, as DomainBed's
// results.jsonl, with its key names ("step", "env{i}_in_acc", "env{i}_out_acc", ...), so a record
// file reads like DomainBed's to a person or a script. The values are flat numbers (no nested "args"
// or "hparams" objects), which is all model selection needs; they are written with 17 significant
// digits so a record read back compares equal to the one written (resume and cached results rely on it).
// A non-finite loss is written as JSON's null (Python's json writes a bare NaN, which is not JSON and
// which nlohmann-json, the parser here, rightly refuses); null reads back as NaN.
//
// The file is rewritten whole through a temporary file and a rename after every record (it holds
// ~17 short lines for a 5001-step run), so an interruption leaves the previous complete file.

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ttmoe::training {

/// A results file that cannot be read; what() names the file, the line and the field.
class RecordsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Accuracies of every environment at one evaluation checkpoint of one run.
struct CheckpointRecord {
  std::int64_t step = 0;        ///< DomainBed's 0-based step index (the record follows that step's update)
  std::int64_t test_env = 0;    ///< the held-out environment of the run
  std::int64_t trial_seed = 0;  ///< the trial (drives the in/out split)
  double loss = std::nan("");   ///< the training loss of the step
  std::vector<double> in_acc;   ///< per environment, accuracy on its `in` split (fraction)
  std::vector<double> out_acc;  ///< per environment, accuracy on its `out` split (fraction)

  bool operator==(const CheckpointRecord&) const = default;
};

/// One record as a line of JSON (no newline).
inline std::string record_to_json(const CheckpointRecord& r) {
  auto num = [](double v) {
    if (!std::isfinite(v)) return std::string("null");
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return std::string(buf);
  };
  std::string s = "{\"step\": " + std::to_string(r.step) + ", \"test_env\": " + std::to_string(r.test_env) +
                  ", \"trial_seed\": " + std::to_string(r.trial_seed) + ", \"loss\": " + num(r.loss) +
                  ", \"num_envs\": " + std::to_string(r.in_acc.size());
  for (std::size_t e = 0; e < r.in_acc.size(); ++e) {
    s += ", \"env" + std::to_string(e) + "_in_acc\": " + num(r.in_acc[e]);
    s += ", \"env" + std::to_string(e) + "_out_acc\": " + num(r.out_acc.at(e));
  }
  return s + "}";
}

namespace records_detail {
/// The number `key` of a parsed record (null reads as NaN); throws RecordsError naming `where` and the key.
inline double number_field(const nlohmann::json& j, const std::string& key, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end()) throw RecordsError(where + ": field '" + key + "' is missing");
  if (it->is_null()) return std::nan("");
  if (!it->is_number()) throw RecordsError(where + ": field '" + key + "' is not a number: " + it->dump());
  return it->get<double>();
}
}  // namespace records_detail

/// Parses a line written by record_to_json; `where` (file:line) prefixes errors.
inline CheckpointRecord record_from_json(const std::string& line, const std::string& where = "record") {
  using records_detail::number_field;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::parse_error& e) {
    throw RecordsError(where + ": not a JSON line: " + e.what());
  }
  if (!j.is_object()) throw RecordsError(where + ": a record must be a JSON object");
  CheckpointRecord r;
  r.step = std::int64_t(number_field(j, "step", where));
  r.test_env = std::int64_t(number_field(j, "test_env", where));
  r.trial_seed = std::int64_t(number_field(j, "trial_seed", where));
  r.loss = number_field(j, "loss", where);
  const double envs = number_field(j, "num_envs", where);
  if (!(envs >= 1 && envs <= 1024)) throw RecordsError(where + ": field 'num_envs' = " + std::to_string(envs) + " is out of range");
  for (std::size_t e = 0; e < std::size_t(envs); ++e) {
    r.in_acc.push_back(number_field(j, "env" + std::to_string(e) + "_in_acc", where));
    r.out_acc.push_back(number_field(j, "env" + std::to_string(e) + "_out_acc", where));
  }
  return r;
}

/// Every record of a results file (blank lines skipped); an absent file has none.
inline std::vector<CheckpointRecord> read_records(const std::filesystem::path& path) {
  std::vector<CheckpointRecord> out;
  if (!std::filesystem::exists(path)) return out;
  std::ifstream in(path);
  if (!in) throw RecordsError(path.string() + ": cannot be opened");
  std::string line;
  for (std::size_t n = 1; std::getline(in, line); ++n)
    if (line.find_first_not_of(" \t\r") != std::string::npos)
      out.push_back(record_from_json(line, path.string() + ":" + std::to_string(n)));
  return out;
}

/// Writes `records` as JSONL to `path` through a temporary file renamed into place.
inline void write_records(const std::vector<CheckpointRecord>& records, const std::filesystem::path& path) {
  const auto tmp = std::filesystem::path(path.string() + ".tmp");
  {
    std::ofstream o(tmp, std::ios::trunc);
    for (const auto& r : records) o << record_to_json(r) << '\n';
    o.flush();
    if (!o) throw RecordsError(tmp.string() + ": write failed");
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace ttmoe::training
