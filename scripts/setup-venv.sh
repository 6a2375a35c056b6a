#!/usr/bin/env bash
# Creates (or updates) the project's virtual environment for one torch
# version: torch from pip, the torchvision built for it where there is one,
# and the build and test tools of requirements/dev.txt.
#   scripts/setup-venv.sh 2.13.0 .venv/torch-2.13.0
# Does nothing when the environment already has exactly what is asked for.
# PYTHON (default python3) creates the environment.
set -euo pipefail
torch_version="${1:?usage: setup-venv.sh TORCH_VERSION VENV_DIR}"
venv="${2:?usage: setup-venv.sh TORCH_VERSION VENV_DIR}"
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"

# torchvision releases are built for one torch release each: the pairing is
# tests/legs.txt's (- or no row: none, and the torchvision tests skip, saying so).
vision=$(awk -v t="$torch_version" '!/^#/ && NF && $1 == t && $2 != "-" {print "torchvision==" $2}' "$root/tests/legs.txt")
# A pip configuration may cap torch at an older release (a constraints file
# for the releases kept on local disk): the newest torch goes past that cap.
case "$torch_version" in
  2.15.*) export PIP_CONSTRAINT=/dev/null ;;
esac

wanted="torch==$torch_version $vision $(sha256sum "$root/requirements/dev.txt" | cut -c1-16)"
stamp="$venv/.syncfree-setup"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ] && [ -x "$venv/bin/python" ]; then
  exit 0
fi
echo "setup-venv: $venv: torch==$torch_version $vision + requirements/dev.txt"
t0=$SECONDS
rm -rf "$venv"
"$python" -m venv "$venv"
pip() {  # pip's exit status, without the index's "Location ... is ignored" noise
  "$venv/bin/python" -m pip "$@" 2>&1 | { grep -v "^WARNING: Location" || true; }
}
# The installer: uv (from the package index, into the environment) where it
# can be had: it installs torch and its CUDA libraries (about 3 GB of wheels,
# 5.5 GB unpacked) in about 20 s on 2 cores, unpacking in parallel into its
# cache and linking the files from there, where pip takes over a minute. uv
# reads none of pip's configuration: the index, extra indexes, wheel folders
# and certificates pip is configured with are passed on (the versions asked
# for here are exact, so pip's constraint files have nothing to add). pip
# (without byte-compiling: Python compiles what it imports) where uv cannot
# be installed (one short try: an index that cannot be reached is not waited
# for).
# shellcheck disable=SC2086
if pip install -q --retries 1 --timeout 15 uv && [ -x "$venv/bin/uv" ]; then
  uv_args=(--python "$venv/bin/python" --index-strategy unsafe-best-match)
  while IFS= read -r line; do
    key=${line%%=*} value=${line#*=}
    value=${value#\'} value=${value%\'}
    case "${key##*.}" in
      index-url) uv_args+=(--index-url "$value") ;;
      extra-index-url) for url in $value; do uv_args+=(--extra-index-url "$url"); done ;;
      find-links) for url in $value; do uv_args+=(--find-links "$url"); done ;;
      cert) export SSL_CERT_FILE="$value" ;;
    esac
  done < <("$venv/bin/python" -m pip config list 2>/dev/null)
  "$venv/bin/uv" pip install -q "${uv_args[@]}" "torch==$torch_version" $vision -r "$root/requirements/dev.txt"
else
  echo "setup-venv: uv could not be installed: pip installs (a minute or two more)"
  pip install -q --no-compile "torch==$torch_version" $vision -r "$root/requirements/dev.txt"
fi
"$venv/bin/python" -c "import torch; assert torch.__version__.split('+')[0] == '$torch_version', torch.__version__"
echo "$wanted" >"$stamp"
echo "setup-venv: ready in $((SECONDS - t0)) s"
