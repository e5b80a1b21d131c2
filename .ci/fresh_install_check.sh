#!/usr/bin/env bash
# README's test install on a machine that has only the public index: the committed tree (git archive HEAD) is
# installed with its dev extra into a fresh venv, with every pip configuration file, environment variable and
# local wheel store left out (PIP_CONFIG_FILE=/dev/null, --isolated: no find-links, no extra index, no
# constraints), then README's demo and one test run.
#
#   .ci/fresh_install_check.sh              # pip install -e '.[dev]' as it is: torch from PyPI (on Linux its
#                                           # CUDA build, some GB), then a test that checks against torch
#   .ci/fresh_install_check.sh --cpu-torch  # README's way: torch's CPU build (about 200 MB) from the PyTorch
#                                           # index first, then pip install -e '.[dev]'
#   .ci/fresh_install_check.sh --no-torch   # every dev requirement but torch, which is only resolved
#                                           # (pip install --dry-run: its metadata, no download); a test without torch
#
# Too heavy for every CI run (it downloads the dependencies); run it when pyproject.toml's requirements change.
set -euo pipefail
mode=${1:-full}
case "$mode" in full|--cpu-torch|--no-torch) ;; *) echo "usage: $0 [--cpu-torch|--no-torch]" >&2; exit 2;; esac
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# nothing of this machine's pip setup: no config file, no PIP_* variables (find-links, indexes, constraints)
for v in $(env | sed -n 's/^\(PIP_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1
pip_() { "$work/venv/bin/python" -m pip --isolated "$@"; }

mkdir "$work/repo"
git -C "$root" archive HEAD | tar -x -C "$work/repo"
python3 -m venv "$work/venv"
export PATH="$work/venv/bin:$PATH"  # (the tools the tests run are the venv's)
cd "$work/repo"
pip_ config list | grep . && { echo "fresh_install_check: pip still reads a configuration" >&2; exit 1; }

case "$mode" in
  full)
    pip_ install -q -e '.[dev]'
    test=(tests/test_nn.py -k batchnorm_train_and_eval);;
  --cpu-torch)
    pip_ install -q torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
    pip_ install -q -e '.[dev]'
    test=(tests/test_nn.py -k batchnorm_train_and_eval);;
  --no-torch)
    # the dev extra as pyproject.toml lists it, less torch
    mapfile -t reqs < <("$work/venv/bin/python" -c "import tomllib; print('\n'.join(r for r in tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['dev'] if not r.startswith('torch')))")
    torch_req=$("$work/venv/bin/python" -c "import tomllib; print(next(r for r in tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['dev'] if r.startswith('torch')))")
    pip_ install -q -e . "${reqs[@]}"
    pip_ install --dry-run --no-deps "$torch_req" | tail -1
    test=(tests/test_tools.py -k "version or exit_0");;
esac
pip_ check
"$work/venv/bin/python" examples/demo.py > "$work/demo.out"  # README's first command
"$work/venv/bin/python" -m pytest -q -p no:cacheprovider "${test[@]}"
echo "fresh_install_check $mode: ok"
