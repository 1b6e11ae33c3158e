#pragma once
// The online TTA loop: pull batches from a source until it is exhausted, let the method adapt and
// predict on each, score the prediction it made BEFORE its update against the labels, and report.
// The data side plugs in as a callable returning std::optional<Batch> (nullopt ends the stream).

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>
#include <optional>
#include <stdexcept>
#include <vector>

#include "ttmoe/tta/method.hpp"
#include "ttmoe/tta/metrics.hpp"

namespace ttmoe::tta {

/// One batch of the stream: images [B, C, H, W], a label and (optionally) a domain id per image.
template <class T = float, class D = cpu>
struct Batch {
  Tensor<T, DynShape<4>, D> images;
  std::vector<std::int64_t> labels;
  std::vector<int> domains;  ///< empty: no per-domain accounting
};

/// Produces the next batch, or nullopt at the end of the stream.
template <class T = float, class D = cpu>
using BatchSource = std::function<std::optional<Batch<T, D>>()>;

/// Progress after each batch.
struct Progress {
  std::int64_t batches = 0, images = 0;
  double images_per_second = 0;
  double accuracy = 0;  ///< cumulative top-1 so far
  std::int64_t skipped_batches = 0;
};

/// A BatchSource over a vector of batches (tests, small streams); the vector is shared, not copied.
template <class T = float, class D = cpu>
BatchSource<T, D> from_vector(std::vector<Batch<T, D>> batches) {
  auto data = std::make_shared<std::vector<Batch<T, D>>>(std::move(batches));
  auto pos = std::make_shared<std::size_t>(0);
  return [data, pos]() -> std::optional<Batch<T, D>> {
    if (*pos >= data->size()) return std::nullopt;
    return (*data)[(*pos)++];
  };
}

/// Runs `method` over the stream `next` on `model`. The accuracy of batch t is that of the logits
/// adapt_and_predict returned, i.e. the model before batch t's update. `progress` (optional) is
/// called after every batch. Peak memory: the device's unused cached blocks are released and the
/// process's VmHWM reset when the run starts, so Report::peak_rss_kib is this run's own peak
/// (Report::peak_rss_per_run says whether the reset worked; if not, it is the process-wide peak).
template <class T, class D, class Model, class M>
  requires Method<M, Model, T, D>
Report run(Model& model, M& method, const BatchSource<T, D>& next,
           const std::function<void(const Progress&)>& progress = {}) {
  using clock = std::chrono::steady_clock;
  Report rep;
  rep.method = method.name();
  // Peak memory of this run alone: give cached, unused pool blocks back (an earlier run's cache would
  // otherwise count as this run's), then reset VmHWM to the current RSS.
  if constexpr (requires { D::empty_cache(); }) D::empty_cache();
  rep.peak_rss_per_run = reset_peak_rss();
  rep.start_rss_kib = current_rss_kib();
  AccuracyMeter meter;
  const auto start = clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(clock::now() - start).count(); };
  while (auto batch = next()) {
    const index_t B = batch->images.extent(0);
    if (index_t(batch->labels.size()) != B)
      throw std::invalid_argument("tta::run: batch has " + std::to_string(B) + " images but " +
                                  std::to_string(batch->labels.size()) + " labels");
    Tensor<T, DynShape<2>, D> logits = method.adapt_and_predict(model, batch->images);
    const auto host = logits.to_vector();
    const auto preds = argmax_rows(std::vector<double>(host.begin(), host.end()), logits.extent(0), logits.extent(1));
    meter.update(preds, batch->labels, batch->domains);
    const StepInfo& info = method.last_step();
    rep.skipped_batches += info.skipped_nonfinite;
    rep.resets += info.reset;
    ++rep.batches;
    rep.images += B;
    if (progress) {
      const double s = elapsed();
      progress(Progress{rep.batches, rep.images, s > 0 ? double(rep.images) / s : 0.0, meter.overall().accuracy(),
                        rep.skipped_batches});
    }
  }
  rep.seconds = elapsed();
  rep.images_per_second = rep.seconds > 0 ? double(rep.images) / rep.seconds : 0.0;
  rep.accuracy = meter.overall().accuracy();
  rep.per_domain = meter.per_domain();
  rep.accuracy_trace = meter.trace();
  rep.peak_rss_kib = peak_rss_kib();
  return rep;
}

/// True for BatchSource<T, D> (any T, D): such sources go to the overload that deduces T and D.
template <class S>
inline constexpr bool is_batch_source_v = false;
template <class T, class D>
inline constexpr bool is_batch_source_v<BatchSource<T, D>> = true;

/// Overload for any callable returning std::optional<Batch<T, D>> (T defaults to float).
template <class T = float, class D = cpu, class Model, class M, class Source>
  requires(!is_batch_source_v<std::remove_cvref_t<Source>>)
Report run(Model& model, M& method, Source&& next, const std::function<void(const Progress&)>& progress = {}) {
  return run<T, D>(model, method, BatchSource<T, D>(std::forward<Source>(next)), progress);
}

}  // namespace ttmoe::tta
