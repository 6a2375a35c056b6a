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
# shellcheck disable=SC2086
pip install -q "torch==$torch_version" $vision -r "$root/requirements/dev.txt"
"$venv/bin/python" -c "import torch; assert torch.__version__.split('+')[0] == '$torch_version', torch.__version__"
echo "$wanted" >"$stamp"
echo "setup-venv: ready in $((SECONDS - t0)) s"
