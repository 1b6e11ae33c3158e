#pragma once
// Builds any registered test-time-adaptation method (tta/registry.hpp) for a model type, behind
// AnyMethod: the tta::Method contract with the method type erased, so one loop (tta::run) runs them
// all and an example chooses a method by its registry key alone.

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ttmoe/tta/eata.hpp"
#include "ttmoe/tta/method.hpp"
#include "ttmoe/tta/moetta.hpp"
#include "ttmoe/tta/no_adapt.hpp"
#include "ttmoe/tta/registry.hpp"
#include "ttmoe/tta/sar.hpp"
#include "ttmoe/tta/tent.hpp"

namespace ttmoe::tta {

/// What a method may need beyond its hyper-parameters.
template <class T = float, class D = cpu>
struct MethodContext {
  std::vector<Tensor<T, DynShape<4>, D>> fisher;  ///< clean source batches (MethodInfo::needs_fisher)
  std::uint64_t seed = 0;                         ///< seed of a method's own randomness (MoETTA's routers)
};

/// Any registered method on model type Model behind the tta::Method contract (one virtual call
/// per batch; tta::run accepts it like the concrete method).
template <class Model, class T = float, class D = cpu>
class AnyMethod {
 public:
  /// Wraps a concrete method (moved in).
  template <class M>
    requires Method<M, Model, T, D>
  explicit AnyMethod(M method) : impl_(std::make_unique<Holder<M>>(std::move(method))) {}

  /// The wrapped method's name() (its registry key).
  std::string name() const { return impl_->name(); }
  /// The wrapped method's adapt_and_predict.
  Tensor<T, DynShape<2>, D> adapt_and_predict(Model& model, const Tensor<T, DynShape<4>, D>& images) {
    return impl_->adapt_and_predict(model, images);
  }
  /// The wrapped method's last_step().
  const StepInfo& last_step() const { return impl_->last_step(); }
  /// The wrapped method's reset().
  void reset() { impl_->reset(); }

 private:
  struct Interface {
    virtual ~Interface() = default;
    virtual std::string name() const = 0;
    virtual Tensor<T, DynShape<2>, D> adapt_and_predict(Model& model, const Tensor<T, DynShape<4>, D>& images) = 0;
    virtual const StepInfo& last_step() const = 0;
    virtual void reset() = 0;
  };
  template <class M>
  struct Holder final : Interface {
    explicit Holder(M m) : method(std::move(m)) {}
    std::string name() const override { return method.name(); }
    Tensor<T, DynShape<2>, D> adapt_and_predict(Model& model, const Tensor<T, DynShape<4>, D>& images) override {
      return method.adapt_and_predict(model, images);
    }
    const StepInfo& last_step() const override { return method.last_step(); }
    void reset() override { method.reset(); }
    M method;
  };
  std::unique_ptr<Interface> impl_;
};

/// A model MoETTA can run on: it converts its LayerNorms to MoE-LayerNorms and reports their balance
/// loss (models::VisionTransformer).
template <class Model>
concept MoEConvertible = requires(Model& m) {
  m.convert_to_moe_layernorm(index_t(1), index_t(1), std::uint64_t(0));
  m.moe_layers();
  m.balance_loss();
};

/// Builds method `info` for model type Model with hyper-parameters `h` (only the fields the method
/// has are read; the learning rate is given at batch 64) and context `ctx`. Throws
/// std::invalid_argument when the model cannot run the method (MoETTA on a model without MoE
/// conversion).
template <class Model, class T = float, class D = cpu>
AnyMethod<Model, T, D> make_method(const MethodInfo& info, const Hyper& h, const MethodContext<T, D>& ctx = {}) {
  switch (info.kind) {
    case MethodKind::no_adapt:
      return AnyMethod<Model, T, D>(NoAdapt<Model, T, D>{});
    case MethodKind::tent: {
      typename Tent<Model, T, D>::Options o;
      o.lr.at_reference = h.lr;
      return AnyMethod<Model, T, D>(Tent<Model, T, D>(o));
    }
    case MethodKind::eata: {
      typename EATA<Model, T, D>::Options o;
      o.lr.at_reference = h.lr, o.margin_factor = h.margin, o.d_margin = h.d_margin;
      return AnyMethod<Model, T, D>(EATA<Model, T, D>(o, ctx.fisher));
    }
    case MethodKind::sar: {
      typename SAR<Model, T, D>::Options o;
      o.lr.at_reference = h.lr, o.margin_factor = h.margin;
      return AnyMethod<Model, T, D>(SAR<Model, T, D>(o));
    }
    case MethodKind::moetta:
      if constexpr (MoEConvertible<Model>) {
        typename MoETTA<Model, T, D>::Options o;
        o.router_seed = ctx.seed;
        o.lr.at_reference = h.lr, o.margin_factor = h.margin, o.lambda = h.lambda, o.num_experts = index_t(h.experts);
        return AnyMethod<Model, T, D>(MoETTA<Model, T, D>(o));
      } else {
        throw std::invalid_argument("tta::make_method: method '" + info.key +
                                    "' needs a model with MoE-LayerNorm conversion (convert_to_moe_layernorm, "
                                    "moe_layers, balance_loss), as models::VisionTransformer has");
      }
  }
  throw std::invalid_argument("tta::make_method: method '" + info.key + "' has no factory");
}

/// make_method by key; throws std::invalid_argument for an unknown key.
template <class Model, class T = float, class D = cpu>
AnyMethod<Model, T, D> make_method(std::string_view key, const Hyper& h, const MethodContext<T, D>& ctx = {}) {
  return make_method<Model, T, D>(method_info(key), h, ctx);
}

}  // namespace ttmoe::tta
