#!/bin/sh
# Runs a command under OpenMPI's mpirun with N processes, also where that needs flags:
#   scripts/ttmm-mpirun.sh N ttmm train --model DIR --corpus PATH --clusters K --out STORE
# As root (containers, CI), OpenMPI refuses to start without --allow-run-as-root; with more processes
# than cores (2 on the project's CI machine) it needs --oversubscribe. TTMOE_NUM_THREADS is passed on
# to every rank (-x): set it to the cores per rank, and to the same value as a single-process run
# whose experts should come out bit-identical (a GEMM's reduction order follows its thread count).
set -eu
if [ $# -lt 2 ]; then
  echo "usage: $0 N COMMAND [ARGS...]" >&2
  exit 2
fi
n=$1
shift
extra=""
[ "$(id -u)" -eq 0 ] && extra="--allow-run-as-root"
env_flags=""
[ -n "${TTMOE_NUM_THREADS:-}" ] && env_flags="-x TTMOE_NUM_THREADS"
[ -n "${TTMM_EXIT_AFTER_EXPERTS:-}" ] && env_flags="$env_flags -x TTMM_EXIT_AFTER_EXPERTS"
# shellcheck disable=SC2086  # the flags are words on purpose
exec "${MPIEXEC:-mpirun}" $extra --oversubscribe $env_flags -n "$n" "$@"
