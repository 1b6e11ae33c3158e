#!/usr/bin/env bash
# The full test run: install the Debian packages, configure, build everything, run every CTest test.
# This is the README's test command and exactly what CI runs (.ci/run calls this script), so the two
# cannot drift apart. Run from anywhere (as root or with sudo available); builds in <repo>/build.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
set -x
./scripts/install-deps.sh
cmake -S . -B build
cmake --build build -j2
ctest --test-dir build --output-on-failure -j2
