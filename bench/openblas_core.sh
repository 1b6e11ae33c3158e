# Sourced by the benchmark scripts that run OpenBLAS (PyTorch's GEMMs, the core GEMM peer). OpenBLAS
# is meant to run at its best here, and the kernel set it runs is the largest single factor in that:
# - Debian's OpenBLAS (DYNAMIC_ARCH) picks kernels from the CPU model name; on models it does not know
#   (the "Intel Xeon Processor" VM of earlier runs) it falls back to SSE3 (Prescott) kernels, which
#   made torchvision's ViT-B/16 forward 3-4x slower (1.5 vs 4.2-5.5 images/s);
# - a machine's environment may pin OPENBLAS_CORETYPE to a narrower set: this project's AMD EPYC
#   (Zen 5) VMs export OPENBLAS_CORETYPE=Haswell (AVX2), under which torchvision's forward took
#   1.37-1.45 s per batch of 8 against 0.82 s with the SkylakeX (AVX-512) kernels.
# So the kernel set comes from the CPU flags (the widest that they support), whatever the environment
# says; TTMOE_BENCH_OPENBLAS_CORETYPE=NAME chooses one explicitly. An overridden inherited value is
# reported.
_ttmoe_inherited_core=${OPENBLAS_CORETYPE:-}
if [ -n "${TTMOE_BENCH_OPENBLAS_CORETYPE:-}" ]; then
  export OPENBLAS_CORETYPE=$TTMOE_BENCH_OPENBLAS_CORETYPE
elif grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo; then
  export OPENBLAS_CORETYPE=SkylakeX
elif grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  export OPENBLAS_CORETYPE=Haswell
fi
echo "# OpenBLAS kernels (PyTorch's GEMMs and the GEMM peer): OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<its own detection>}$(
  [ -n "$_ttmoe_inherited_core" ] && [ "$_ttmoe_inherited_core" != "${OPENBLAS_CORETYPE:-}" ] &&
    echo " (the environment's $_ttmoe_inherited_core overridden; TTMOE_BENCH_OPENBLAS_CORETYPE chooses)")"
unset _ttmoe_inherited_core
