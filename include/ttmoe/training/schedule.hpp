#pragma once
// Learning-rate schedules for training::train: a schedule maps the optimiser step index (0-based)
// to a learning rate. The loop stores the rate into the optimiser before each step, so a resumed
// run continues the curve exactly where the interrupted one stopped.

#include <cmath>
#include <cstddef>
#include <functional>
#include <numbers>
#include <stdexcept>
#include <string>

namespace ttmoe::training {

/// A schedule: step index (0-based) -> learning rate.
using Schedule = std::function<double(std::size_t step)>;

/// The same rate at every step.
inline Schedule constant_lr(double lr) {
  return [lr](std::size_t) { return lr; };
}

/// Linear warm-up over `warmup` steps to `peak` (step s < warmup gets peak * (s + 1) / warmup), then
/// a half cosine from `peak` at step `warmup` down towards 0 at step `total` (the ViT recipe of
/// timm / DeiT without a floor). Throws std::invalid_argument unless warmup < total.
inline Schedule warmup_cosine(double peak, std::size_t warmup, std::size_t total) {
  if (warmup >= total)
    throw std::invalid_argument("training::warmup_cosine: warm-up steps (" + std::to_string(warmup) +
                                ") must be fewer than the total steps (" + std::to_string(total) + ")");
  return [peak, warmup, total](std::size_t step) {
    if (step < warmup) return peak * double(step + 1) / double(warmup);
    return 0.5 * peak * (1 + std::cos(std::numbers::pi * double(step - warmup) / double(total - warmup)));
  };
}

}  // namespace ttmoe::training
