#!/usr/bin/env bash
# The full test run: install the Debian packages, configure, build everything, run every CTest test.
# This is the README's test command and exactly what CI runs (.ci/run calls this script), so the two
# cannot drift apart. Run from anywhere (as root or with sudo available); builds in <repo>/build.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
set -x
./scripts/install-deps.sh
# CI (CI=true, a fresh clone that is thrown away) compiles the example programs at -O1: there they run
# only as smoke and CLI tests, and it saves about 110 CPU-seconds of the build. Everywhere else they
# stay at -O2, since this build folder is also the one the README's examples run from.
# CI also compiles each test suite as one TU (TTMOE_TEST_UNITY, tests/CMakeLists.txt): a build compiled
# once and thrown away gains nothing from one TU per test file, whose shared instantiations it would
# compile again in every file. Everywhere else the tests keep one TU per file (incremental rebuilds).
ci_opts=()
if [[ "${CI:-}" == true ]]; then
  ci_opts=(-DTTMOE_EXAMPLES_OPT=1 -DTTMOE_TEST_UNITY=ON)
fi
cmake -S . -B build "${ci_opts[@]}"
cmake --build build -j2
ctest --test-dir build --output-on-failure -j2
