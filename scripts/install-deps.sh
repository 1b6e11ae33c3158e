#!/usr/bin/env bash
# Installs every Debian bookworm package ttmoe's build, tests, examples and benchmarks use.
# Idempotent: packages already present are left alone. Needs root (or sudo).
set -euo pipefail
pkgs=(
  build-essential cmake git pkg-config
  libeigen3-dev libxsimd-dev xtl-dev libfmt-dev        # the library's own dependencies
  catch2 libbenchmark-dev                              # tests and benchmarks
  nlohmann-json3-dev libstb-dev zlib1g-dev             # checkpoint headers, image decoding, Fashion-MNIST
  libopenblas-dev                                      # optional BLAS GEMM path, benchmark peer
  clang libclang-rt-14-dev                             # libFuzzer target
  python3-torch python3-torchvision python3-numpy      # PyTorch references (/usr/bin/python3)
  dataset-fashion-mnist                                # the examples' default data
  python3-venv                                         # the pinned reference virtual environment
  libpcre2-dev libutf8proc-dev libsentencepiece-dev    # tokenizers: pre-tokenizer regex, Unicode, SentencePiece
  sentencepiece                                        # spm_train/spm_encode: the SentencePiece parity reference
  libcli11-dev                                         # example command lines
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
