# Sourced by the benchmark scripts that run PyTorch. Debian's OpenBLAS (which Debian's PyTorch calls
# for its GEMMs) picks its kernels from the CPU model name; on CPUs it does not know, such as this VM's
# "Intel Xeon Processor", it falls back to SSE3 (Prescott) kernels, which made torchvision's ViT-B/16
# forward 3-4x slower here (1.5 vs 4.2-5.5 images/s). PyTorch is meant to run at its best, so unless the
# caller set OPENBLAS_CORETYPE, export the kernel set that the CPU flags support.
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  if grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell
  fi
fi
echo "# PyTorch's OpenBLAS kernels: OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<its own detection>}"
