#pragma once
// A training checkpoint: the model's parameters, the optimiser's state and the number of completed
// steps in ONE safetensors file, written atomically (SafetensorsWriter::write: temporary file,
// fsync, rename), so an interrupted run leaves either the previous checkpoint or the new one, never
// a mix. Parameters are stored under "model." + their module names (loaded back through
// nn::load_state, which checks every key and shape before touching the model), optimiser buffers
// under "optimizer." + their state_dict names; the step counts are metadata.

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ttmoe/nn/checkpoint.hpp"
#include "ttmoe/nn/module.hpp"
#include "ttmoe/nn/optim_state.hpp"

namespace ttmoe::training {

/// An optimiser whose state can be saved and restored (nn::SGD, nn::Adam / AdamW).
template <class O>
concept StatefulOptimizer = requires(O& o, const O& co) {
  co.state_dict();
  o.load_state_dict(co.state_dict());
};

/// A checkpoint that cannot be resumed from; what() names the file and the field.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Metadata keys of a training checkpoint.
inline constexpr const char* kStepKey = "ttmoe.training.step";
inline constexpr const char* kOptimizerStepsKey = "ttmoe.training.optimizer_steps";
/// File-key prefixes of the two parts.
inline constexpr const char* kModelPrefix = "model.";
inline constexpr const char* kOptimizerPrefix = "optimizer.";

/// Writes `model`'s parameters (full precision of T), `opt`'s state and `step` (completed optimiser
/// steps) to `path`, atomically; `metadata` entries are stored beside them.
template <class Model, StatefulOptimizer Optimizer>
void save_checkpoint(Model& model, const Optimizer& opt, std::size_t step, const std::filesystem::path& path,
                     const std::vector<std::pair<std::string, std::string>>& metadata = {}) {
  io::SafetensorsWriter w;
  const auto names = io::timm_names(kModelPrefix);
  nn::for_each_parameter(model, [&](const std::string& name, auto& t) {
    using T = typename std::remove_cvref_t<decltype(t)>::value_type;
    const auto e = t.extents();
    // The writer's default dtype of T (F32 for float, F64 for double): exact, resumes bit for bit.
    w.add(names.key_for(name), std::span<const T>(t.data(), std::size_t(t.numel())),
          std::vector<std::int64_t>(e.begin(), e.end()));
  });
  const auto state = opt.state_dict();
  for (const auto& [name, values] : state.tensors)
    w.add(kOptimizerPrefix + name, std::span(values.data(), values.size()), {std::int64_t(values.size())});
  w.set_metadata(kStepKey, std::to_string(step));
  w.set_metadata(kOptimizerStepsKey, std::to_string(state.step));
  for (const auto& [k, v] : metadata) w.set_metadata(k, v);
  w.write(path);
}

/// A non-negative count stored as metadata `key` of a training checkpoint; CheckpointError naming
/// the file and key when it is absent or not a count.
inline std::int64_t checkpoint_count(const io::SafetensorsFile& file, const char* key, const std::filesystem::path& path) {
  const auto& meta = file.metadata();
  auto it = meta.find(key);
  if (it == meta.end()) throw CheckpointError(path.string() + ": no '" + key + "' metadata (not a training checkpoint)");
  std::size_t pos = 0;
  std::int64_t v = -1;
  try {
    v = std::stoll(it->second, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (pos == 0 || pos != it->second.size() || v < 0)
    throw CheckpointError(path.string() + ": metadata '" + key + "' = '" + it->second + "' is not a step count");
  return v;
}

/// The completed step count of the training checkpoint at `path` (what a resume starts from),
/// read without touching a model.
inline std::size_t checkpoint_step(const std::filesystem::path& path) {
  io::SafetensorsFile file(path);
  return std::size_t(checkpoint_count(file, kStepKey, path));
}

/// Reads a checkpoint written by save_checkpoint into `model` and `opt`; returns the completed step
/// count. Throws nn::CheckpointError (parameters that do not fit) or training::CheckpointError
/// (missing or malformed step metadata), before changing anything on a mismatch of the model.
template <class Model, StatefulOptimizer Optimizer>
std::size_t load_checkpoint(Model& model, Optimizer& opt, const std::filesystem::path& path) {
  io::SafetensorsFile file(path);
  auto number = [&](const char* key) { return checkpoint_count(file, key, path); };
  const std::int64_t step = number(kStepKey), opt_steps = number(kOptimizerStepsKey);
  using State = std::remove_cvref_t<decltype(opt.state_dict())>;
  using T = typename std::remove_cvref_t<decltype(State{}.tensors)>::value_type::second_type::value_type;
  State state{opt_steps, {}};
  const std::string prefix = kOptimizerPrefix;
  for (const auto& name : file.names()) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    state.tensors.emplace_back(name.substr(prefix.size()), file.template read<T>(name));
  }
  nn::load_state(model, file, io::timm_names(kModelPrefix));
  opt.load_state_dict(state);
  return std::size_t(step);
}

}  // namespace ttmoe::training
