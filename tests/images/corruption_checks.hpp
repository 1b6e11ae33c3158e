// Checks every corruption test makes of an output: the input's size, identical output for the same
// seed, values inside [0, 1]. Shared by the tests of the fifteen and of the four extra corruptions.
#pragma once

#include <algorithm>

#include <catch2/catch.hpp>

#include "ttmoe/io/image.hpp"

namespace ttmoe_test {

/// `a` and `b` are two corruptions of `im` with the same seed.
inline void check_corrupted_image(const ttmoe::io::Image& im, const ttmoe::io::Image& a, const ttmoe::io::Image& b) {
  CHECK(a.height == im.height);
  CHECK(a.width == im.width);
  CHECK(a.channels == im.channels);
  REQUIRE(a.pixels.size() == im.pixels.size());
  CHECK(a.pixels == b.pixels);
  const auto [lo, hi] = std::minmax_element(a.pixels.begin(), a.pixels.end());
  CHECK(*lo >= 0.0f);
  CHECK(*hi <= 1.0f);
}

}  // namespace ttmoe_test
