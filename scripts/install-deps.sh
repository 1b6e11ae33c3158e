#!/usr/bin/env bash
# Installs every Debian bookworm package ttmoe's build, tests, examples and benchmarks use, then
# creates or refreshes the pinned reference environment (requirements/reference.txt) in one virtual
# environment, ${TTMOE_VENV:-~/.cache/ttmoe/venv}. Idempotent: packages already present are left alone,
# and a stamp in the venv holding the requirements file's hash makes a second run cost nothing.
# Needs root (or sudo) for apt.
#   scripts/install-deps.sh           Debian packages + the reference environment, without llama-cpp-python
#   scripts/install-deps.sh --bench   the same plus llama-cpp-python (builds llama.cpp from source:
#                                     long on 2 cores, see README; only the benchmarks use it)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
with_bench=0
for arg in "$@"; do
  case "$arg" in
    --bench) with_bench=1 ;;
    *) echo "install-deps.sh: unknown argument '$arg' (only --bench)" >&2; exit 2 ;;
  esac
done
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
  openmpi-bin libopenmpi-dev                           # ttmm train sharded over mpirun (examples/ttmm)
  python3.11-doc                                       # ttmm default: prose corpus (reST sources of the Python docs)
  base-files                                           # llm's default model: /usr/share/common-licenses (Essential)
  libssl-dev libfreetype-dev                           # DomainBed split (MD5), digit-set font rendering
  opencv-doc                                           # digit set: the 5,000 handwritten digits of digits.png
  fonts-dejavu-core fonts-liberation2 fonts-freefont-ttf fonts-urw-base35 fonts-crosextra-caladea   # digit set: serif
  fonts-dancingscript fonts-kaushanscript fonts-kristi fonts-comic-neue fonts-humor-sans            # digit set: script
  fonts-dseg fonts-3270 fonts-jetbrains-mono fonts-hack fonts-inconsolata fonts-courier-prime       # digit set: display
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# --- The pinned reference environment -----------------------------------------------------------------
# From Debian's Python, without system site packages, so only the pinned versions are importable.
# llama-cpp-python compiles llama.cpp from its sdist (see README: set-up times), so the default set-up
# skips its line and --bench installs exactly that pinned line afterwards; each part has its own stamp.
venv="${TTMOE_VENV:-$HOME/.cache/ttmoe/venv}"
req="$root/requirements/reference.txt"
hash=$(sha256sum "$req" | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import sys' 2>/dev/null; then
  echo "install-deps.sh: creating the reference environment in $venv"
  if [ -e "$venv" ] && [ ! -f "$venv/pyvenv.cfg" ]; then
    echo "install-deps.sh: $venv exists and is not a virtual environment; set TTMOE_VENV elsewhere" >&2
    exit 1
  fi
  rm -rf "$venv"   # a broken venv (its Python gone after an upgrade, say)
  mkdir -p "$(dirname "$venv")"
  /usr/bin/python3 -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip install --disable-pip-version-check -q)
if [ "$(cat "$venv/.ttmoe-reference.sha256" 2>/dev/null)" != "$hash" ]; then
  echo "install-deps.sh: installing requirements/reference.txt into $venv (without llama-cpp-python)"
  base=$(mktemp)
  trap 'rm -f "$base"' EXIT
  grep -v '^llama-cpp-python' "$req" > "$base"
  "${pip[@]}" -r "$base"
  echo "$hash" > "$venv/.ttmoe-reference.sha256"
fi
if [ "$with_bench" -eq 1 ] && [ "$(cat "$venv/.ttmoe-bench.sha256" 2>/dev/null)" != "$hash" ]; then
  echo "install-deps.sh: installing llama-cpp-python into $venv (compiles llama.cpp from source: this takes a while)"
  "${pip[@]}" "$(grep '^llama-cpp-python==' "$req")"
  echo "$hash" > "$venv/.ttmoe-bench.sha256"
fi
