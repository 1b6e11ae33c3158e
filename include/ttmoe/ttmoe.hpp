#pragma once
// ttmoe: header-only C++20 tensors, autograd and mixture-of-experts components for models that
// adapt or specialise at test time. This umbrella header is the CPU library: the CPU backend
// (Backend<cpu>: Eigen, xsimd, the thread pool) and the device-generic core, expressions, ops and
// autograd built on it. Layers, MoE components, models and adaptation methods have their own headers
// (ttmoe/nn/nn.hpp, ttmoe/moe/..., ttmoe/models/..., ttmoe/tta/tta.hpp); include them beside this one.

#include "ttmoe/autograd/backward.hpp"
#include "ttmoe/autograd/tape.hpp"
#include "ttmoe/backend/cpu/backend.hpp"
#include "ttmoe/core/format.hpp"
#include "ttmoe/core/tensor.hpp"
#include "ttmoe/expr/expr.hpp"
#include "ttmoe/ops/attention.hpp"
#include "ttmoe/ops/causal_attention.hpp"
#include "ttmoe/ops/indexing.hpp"
#include "ttmoe/ops/layer_norm.hpp"
#include "ttmoe/ops/linear.hpp"
#include "ttmoe/ops/matmul.hpp"
#include "ttmoe/ops/mlp.hpp"
#include "ttmoe/ops/parallel_tasks.hpp"
#include "ttmoe/ops/reduce.hpp"
