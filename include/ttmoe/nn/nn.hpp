#pragma once
// Umbrella header for the dense layers, losses and optimisers.

#include "ttmoe/nn/attention.hpp"
#include "ttmoe/nn/dropout.hpp"
#include "ttmoe/nn/embedding.hpp"
#include "ttmoe/nn/init.hpp"
#include "ttmoe/nn/layernorm.hpp"
#include "ttmoe/nn/linear.hpp"
#include "ttmoe/nn/llama_attention.hpp"
#include "ttmoe/nn/loss.hpp"
#include "ttmoe/nn/mlp.hpp"
#include "ttmoe/nn/module.hpp"
#include "ttmoe/nn/optim_adam.hpp"
#include "ttmoe/nn/optim_sgd.hpp"
#include "ttmoe/nn/patch_embed.hpp"
#include "ttmoe/nn/rmsnorm.hpp"
#include "ttmoe/nn/rope.hpp"
#include "ttmoe/nn/sdpa.hpp"
