#pragma once
// One progress line on stderr, redrawn in place: "  <label> [#####.....] done/total  <rate> <unit>/s
// <tail>", a newline once done == total. Shared by every long loop (training steps, corpus
// embedding) so that they all look and behave the same.

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <string>

namespace ttmoe::training {

/// Draws the progress line (see the file comment); `tail` is free text after the rate (e.g. the loss).
inline void draw_progress_line(const std::string& label, std::size_t done, std::size_t total, double per_second,
                               const char* unit, const std::string& tail = "") {
  const std::size_t shown = total ? std::min(done, total) : 0;
  const int bar = total ? int(30.0 * double(shown) / double(total)) : 30;
  std::fprintf(stderr, "\r  %s [%s%s] %zu/%zu  %.2f %s/s %s ", label.c_str(), std::string(std::size_t(bar), '#').c_str(),
               std::string(std::size_t(30 - bar), '.').c_str(), done, total, per_second, unit, tail.c_str());
  if (done >= total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

}  // namespace ttmoe::training
