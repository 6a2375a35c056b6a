#!/usr/bin/env bash
# Installs what building and testing syncfree needs on Debian 12 (as root, or
# through sudo). Does nothing when everything is already there.
#   scripts/setup-debian.sh          # build and test
#   scripts/setup-debian.sh plots    # also matplotlib, for bench/plot.py
set -euo pipefail

packages=(
  build-essential cmake ninja-build git
  libtorch-dev python3-torch python3-torchvision libopenblas0-pthread
  libgtest-dev googletest clang libclang-rt-14-dev
  python3-venv python3-pip python3-setuptools python3-wheel
  python3-pytest python3-numpy python3-scipy
)
if [ "${1:-}" = "plots" ]; then
  packages+=(python3-matplotlib)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "setup-debian: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
