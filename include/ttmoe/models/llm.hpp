#pragma once
// Umbrella header for the Llama-family causal LMs: config, model, HF folders, sampling, generation,
// PEFT LoRA adapters.

#include "ttmoe/models/llama.hpp"
#include "ttmoe/models/llama_config.hpp"
#include "ttmoe/models/llama_generate.hpp"
#include "ttmoe/models/llama_hf.hpp"
#include "ttmoe/models/llama_lora.hpp"
#include "ttmoe/models/peft_adapter.hpp"
#include "ttmoe/models/sampling.hpp"
