// Shared helpers for the ttmoe benchmarks: plain std::chrono timing, medians, `name: value` output.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace bench {

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Times f() once, in seconds.
template <class F>
double time_once(F&& f) {
  const double t0 = now_s();
  f();
  return now_s() - t0;
}

// One figure per line, `name: value`, as bench/report collects them.
inline void figure(const std::string& name, double value, const char* fmt = "%.3f") {
  std::printf("%s: ", name.c_str());
  std::printf(fmt, value);
  std::printf("\n");
  std::fflush(stdout);
}

inline int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

// Compiler-opaque use of a value so a result is not optimised away.
template <class T>
inline void keep(const T& v) {
  asm volatile("" : : "g"(&v) : "memory");
}

}  // namespace bench
