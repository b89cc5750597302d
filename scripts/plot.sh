#!/usr/bin/env bash
# Renders `weave bench --json` files into PNGs (scripts/plot_bench.py), with matplotlib from PyPI
# in a virtual environment under build/ (made on first use; WEAVE_PLOT_VENV overrides where).
# Without arguments: every JSON file in docs/perf/, the PNGs next to them.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${WEAVE_PLOT_VENV:-build/plot-venv}
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" || { echo "weave: python3 -m venv failed; install python3-venv (Debian/Ubuntu)" >&2; exit 1; }
  "$venv/bin/pip" install -q matplotlib
fi
if [ $# -eq 0 ]; then set -- docs/perf/*.json; fi
exec "$venv/bin/python" scripts/plot_bench.py "$@"
