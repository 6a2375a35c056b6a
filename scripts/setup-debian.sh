#!/usr/bin/env bash
# Installs the Debian packages that building and testing syncfree needs (as
# root, or through sudo): a C++ compiler, Python's headers (the Python entry,
# syncfree._C, compiles against them), GoogleTest, clang with its
# sanitizer runtimes, and ccache (the Makefile uses it where installed).
# Works on Debian 12 and 13; does nothing when everything is already there.
# torch, CMake, ninja and the Python tools come from pip (scripts/setup-venv.sh).
set -euo pipefail

packages=(build-essential git python3 python3-venv python3-dev libgtest-dev googletest clang libclang-rt-dev ccache)

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
