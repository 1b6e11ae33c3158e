# Helpers shared by the ttmoe-vs-PyTorch round scripts (bench/moetta/run_moetta_bench.sh,
# bench/gmoe/run_gmoe_bench.sh), sourced by them: each round runs one process per side, its figures
# are collected per round with `keep` and printed as medians over the rounds by `print_medians`.
# shellcheck shell=bash

# The PyTorch Python (TTMOE_BENCH_TORCH_PYTHON, else the reference venv) into $torch_py; $1 names
# the calling script in the error.
find_torch_python() {
  torch_py=${TTMOE_BENCH_TORCH_PYTHON:-${TTMOE_VENV:-$HOME/.cache/ttmoe/venv}/bin/python}
  [ -x "$torch_py" ] || { echo "$1: no PyTorch Python at $torch_py (run scripts/install-deps.sh)" >&2; exit 1; }
}
# The benchmark binary: $1 when given (bench/report's prebuilt one), else target $4 built stand-alone
# from folder $2 into build folder $3 (cmake -S $2 -B $3, Release); prints its path.
prebuilt_or_build() {
  if [ -n "$1" ]; then echo "$1"; return; fi
  cmake -S "$2" -B "$3" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$3" --target "$4" -j2 >/dev/null
  echo "$3/$4"
}
# The 1-minute load average.
load() { cut -d' ' -f1 /proc/loadavg; }
# The value of the `NAME: value` line named $1 on stdin.
field() { awk -v k="$1:" '$1 == k {print $2}'; }
# Median of the arguments (mean of the middle two for an even count).
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
# $1 / $2 to three decimals.
div() { python3 -c "print(f'{$1 / $2:.3f}')"; }
declare -A per_round  # figure name -> its per-round values, space-separated
# Records value $2 of figure $1 for this round (an empty value is skipped).
keep() { [ -z "$2" ] || per_round[$1]+="$2 "; }
# `name: median   (per round: ...; load now L)` for each figure named in the arguments that has values.
print_medians() {
  local la name v
  la=$(load)
  for name in "$@"; do
    [ -n "${per_round[$name]:-}" ] || continue
    read -ra v <<<"${per_round[$name]}"
    echo "$name: $(med "${v[@]}")   (per round: ${v[*]}; load now $la)"
  done
}
# The benchmark program: $1 when given (prebuilt, as bench/report passes it), else target $4 built
# stand-alone from the bench folder $2 into the build folder $3 (Release, 2 jobs).
bench_binary() {
  if [ -n "$1" ]; then echo "$1"; return; fi
  cmake -S "$2" -B "$3" -DCMAKE_BUILD_TYPE=Release >/dev/null || return 1
  cmake --build "$3" --target "$4" -j2 >/dev/null || return 1
  echo "$3/$4"
}
