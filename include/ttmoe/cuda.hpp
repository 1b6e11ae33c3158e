#pragma once
// ttmoe on NVIDIA GPUs: the core (tensors, lazy expressions, ops, autograd) plus the `cuda` device and
// Backend<cuda> (thrust + cuBLAS). For .cu translation units compiled by nvcc: nothing here includes
// Eigen, fmt or the CPU backend (ops and everything above them are device-generic and include no
// backend; see the floors in docs/design.md), and layers, MoE components and models can be added
// from their own headers. Use `Tensor<float, S, ttmoe::cuda>`; move data with `from_host` /
// `to_vector`. Link CUDA::cudart and CUDA::cublas; nvcc flags: -std=c++20 --expt-relaxed-constexpr.
// Spell the device `ttmoe::cuda`: with `using namespace ttmoe` a bare `cuda` is ambiguous with
// libcu++'s `::cuda` namespace.

#include "ttmoe/autograd/backward.hpp"
#include "ttmoe/autograd/tape.hpp"
#include "ttmoe/backend/cuda/backend.hpp"
#include "ttmoe/core/tensor.hpp"
#include "ttmoe/expr/expr.hpp"
#include "ttmoe/ops/indexing.hpp"
#include "ttmoe/ops/matmul.hpp"
#include "ttmoe/ops/reduce.hpp"
