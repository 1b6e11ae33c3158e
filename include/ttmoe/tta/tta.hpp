#pragma once
// Test-time adaptation: the engine, its metrics and the methods (NoAdapt, Tent, EATA, SAR, MoETTA)
// and their registry.

#include "ttmoe/tta/method.hpp"
#include "ttmoe/tta/metrics.hpp"
#include "ttmoe/tta/engine.hpp"
#include "ttmoe/tta/trainable.hpp"
#include "ttmoe/tta/adapting.hpp"
#include "ttmoe/tta/entropy.hpp"
#include "ttmoe/tta/no_adapt.hpp"
#include "ttmoe/tta/tent.hpp"
#include "ttmoe/tta/eata.hpp"
#include "ttmoe/tta/sar.hpp"
#include "ttmoe/tta/moetta.hpp"
#include "ttmoe/tta/registry.hpp"
#include "ttmoe/tta/make_method.hpp"
