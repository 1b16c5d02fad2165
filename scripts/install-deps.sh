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
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
