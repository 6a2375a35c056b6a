#!/usr/bin/env bash
# Builds the wheel (pip wheel --no-build-isolation .) with the torch of VENV,
# checks its contents and metadata, installs it into a fresh venv that sees
# VENV's packages (torch) through a .pth file, and runs the Python tests
# against the installed copy, from outside the source tree.
#   scripts/check-wheel.sh .venv/torch-2.13.0 build/torch-2.13.0/wheel
set -euo pipefail
venv="$(cd "${1:?usage: check-wheel.sh VENV WORKDIR}" && pwd)"
work="${2:?usage: check-wheel.sh VENV WORKDIR}"
root="$(cd "$(dirname "$0")/.." && pwd)"
rm -rf "$work" && mkdir -p "$work" && work="$(cd "$work" && pwd)"

# setuptools' staging folders (and setup.py's CMake build trees) are shared
# by every torch: start them afresh.
rm -rf "$root"/build/lib.* "$root"/build/bdist.* "$root"/build/temp.*
echo "check-wheel: pip wheel . (SYNCFREE_WITH_CUDA=${SYNCFREE_WITH_CUDA:-auto})"
if ! "$venv/bin/python" -m pip wheel --no-build-isolation --no-deps -v -w "$work/dist" "$root" \
    >"$work/pip-wheel.log" 2>&1; then
  tail -n 60 "$work/pip-wheel.log"
  echo "check-wheel: pip wheel failed (log: $work/pip-wheel.log)" >&2
  exit 1
fi
# setup.py prints its choice of the CUDA operator.
choice=$(grep -o "syncfree: [a-z ]*building the CUDA operator.*" "$work/pip-wheel.log" | head -n 1 || true)
if [ -z "$choice" ]; then
  echo "check-wheel: setup.py did not print its choice of the CUDA operator (log: $work/pip-wheel.log)" >&2
  exit 1
fi
echo "check-wheel: $choice"
wheel=$(ls "$work"/dist/syncfree-*.whl)
echo "check-wheel: built $(basename "$wheel")"

# Contents and metadata: the library, py.typed, the license, the torch pin.
"$venv/bin/python" - "$wheel" <<'PY'
import os, sys, zipfile
import torch
wheel = sys.argv[1]
names = zipfile.ZipFile(wheel).namelist()
meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
meta = zipfile.ZipFile(wheel).read(meta_name).decode()
minor = ".".join(torch.__version__.split("+")[0].split(".")[:2])
expect = {
    "compiled library": any(n.endswith("syncfree/libsyncfree.so") for n in names),
    "py.typed": "syncfree/py.typed" in names,
    "LICENSE": any(n.endswith("LICENSE") and ".dist-info/" in n for n in names),
    f"Requires-Dist: torch=={minor}.*": f"Requires-Dist: torch=={minor}.*" in meta,
    "License-Expression or License": "License-Expression: BSD-3-Clause" in meta or "License: BSD-3-Clause" in meta,
    "platform tag (not any)": not wheel.endswith("-any.whl"),
    "compat subpackage": "syncfree/compat/torchvision.py" in names,
    "detection subpackage": "syncfree/detection/generalized_rcnn.py" in names,
}
# SYNCFREE_EXPECT_PYTHON_ENTRY=1 (the Makefile's wheel check): the Python
# entry, syncfree._C, is in the wheel (setup.py builds it where the Python has
# its headers).
if os.environ.get("SYNCFREE_EXPECT_PYTHON_ENTRY") == "1":
    expect["Python entry (syncfree/_C.*.so)"] = any(n.startswith("syncfree/_C.") and n.endswith(".so") for n in names)
missing = [k for k, ok in expect.items() if not ok]
if missing:
    sys.exit(f"check-wheel: the wheel lacks {missing}: {names}")
print("check-wheel: contents and metadata ok:", ", ".join(expect))
PY

fresh="$work/venv"
"$venv/bin/python" -m venv "$fresh"
site_of() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
echo "$(site_of "$venv")" >"$(site_of "$fresh")/torch-env.pth"
# The fresh venv's own setuptools would shadow the newer one that torch needs.
"$fresh/bin/python" -m pip uninstall -q -y setuptools 2>/dev/null || true
# With its dependencies: torch is found (through the .pth file), nothing is downloaded.
"$fresh/bin/python" -m pip install -q --no-index "$wheel"
cd "$work"
"$fresh/bin/python" -c "import syncfree, os; print('check-wheel: installed syncfree', syncfree.__version__, 'at', os.path.dirname(syncfree.__file__))"
# SYNCFREE_EXPECT_CUDA_OPERATOR=1: the installed copy registers the C++ CUDA
# kernels (not the error of a build without them); 0: it has none.
SYNCFREE_EXPECT_CUDA_OPERATOR="${SYNCFREE_EXPECT_CUDA_OPERATOR:-}" "$fresh/bin/python" - <<'PY'
import os, sys
import torch
import syncfree, syncfree._build_info as info
expect = os.environ["SYNCFREE_EXPECT_CUDA_OPERATOR"]
from syncfree import _without_cuda
for op in ["syncfree::" + name for name in sorted(_without_cuda.OPS)]:
    cuda = [l for l in torch._C._dispatch_dump_table(op).splitlines() if l.startswith("CUDA:")]
    native = len(cuda) == 1 and "_cuda.cpp:" in cuda[0]
    if expect and native != (expect == "1"):
        sys.exit(f"check-wheel: {op}: CUDA kernel {cuda}, but SYNCFREE_EXPECT_CUDA_OPERATOR={expect}")
    if native != info.CUDA_OPERATOR:
        sys.exit(f"check-wheel: {op}: CUDA kernel {cuda}, but _build_info.CUDA_OPERATOR={info.CUDA_OPERATOR}")
print("check-wheel: CUDA kernels registered:", info.CUDA_OPERATOR)
PY
# PYTEST_FLAGS and PYTEST_MARKERS (the Makefile's): how pytest runs and which
# tests (empty markers: all of them); the rest of pytest's configuration is
# pyproject.toml's.
markers=()
if [ -n "${PYTEST_MARKERS:-}" ]; then markers=(-m "$PYTEST_MARKERS"); fi
# shellcheck disable=SC2086
SYNCFREE_EXPECT_INSTALLED=1 "$fresh/bin/python" -m pytest ${PYTEST_FLAGS:-} "${markers[@]}" "$root/tests/python"
