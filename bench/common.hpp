// Shared helpers for the ttmoe benchmark programs that time by hand (bench/moetta, bench/vit: whole
// model steps paired in-process and against PyTorch process by process). No dependencies, so the
// stand-alone builds of those folders need nothing beyond the library.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace bench {

using Clock = std::chrono::steady_clock;

/// Seconds elapsed since t0.
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// Median of v (mean of the middle two for an even count); v must not be empty.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Integer value of environment variable `name`, or `fallback` when unset or empty.
inline int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

/// A "Vm...:" field of /proc/self/status ("VmRSS:", "VmHWM:") in MB; -1 where unavailable.
inline double status_mb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::size_t k = std::strlen(key);
  while (std::getline(f, line))
    if (line.compare(0, k, key) == 0) return double(std::stoll(line.substr(k))) / 1024.0;
  return -1;
}

}  // namespace bench
