#pragma once
// ttmoe: header-only C++20 tensors, autograd and mixture-of-experts components for models that
// adapt or specialise at test time. This umbrella header includes the CPU backend and everything
// built on it.

#include "ttmoe/backend/cpu/backend.hpp"
#include "ttmoe/core/format.hpp"
#include "ttmoe/core/tensor.hpp"
#include "ttmoe/expr/expr.hpp"
#include "ttmoe/ops/attention.hpp"
#include "ttmoe/ops/linear.hpp"
#include "ttmoe/ops/matmul.hpp"
#include "ttmoe/ops/reduce.hpp"
#include "ttmoe/ops/indexing.hpp"
#include "ttmoe/autograd/backward.hpp"
