#!/usr/bin/env bash
# pip install --no-build-isolation . into a fresh venv made with
# --system-site-packages (Debian's torch), then runs the Python tests against
# the installed package, from outside the source tree.
set -euo pipefail
python="${1:-/usr/bin/python3}"
venv="${2:-build/pip-venv}"
root="$(cd "$(dirname "$0")/.." && pwd)"
rm -rf "$venv"
"$python" -m venv --system-site-packages "$venv"
venv="$(cd "$venv" && pwd)"
"$venv/bin/python" -m pip install --no-build-isolation --no-index -q "$root"
cd "$venv"
"$venv/bin/python" -c "import syncfree, os; print('installed syncfree', syncfree.__version__, 'at', os.path.dirname(syncfree.__file__))"
SYNCFREE_EXPECT_INSTALLED=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider "$root/tests/python"
