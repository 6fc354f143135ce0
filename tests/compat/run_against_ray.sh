#!/usr/bin/env bash
# Run the compatibility programs against real Ray (not meshrt).
#
# Copies tests/compat/*.py into /tmp/compat_ray_check/, rewrites the meshrt
# imports back to Ray's, and runs pytest there.  Extra arguments are passed to
# pytest, e.g.:  tests/compat/run_against_ray.sh -k queue -x
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DEST=/tmp/compat_ray_check
PYTHON="${PYTHON:-/work/venv/bin/python}"

mkdir -p "$DEST"
rm -f "$DEST"/*.py
cp "$HERE"/*.py "$DEST"/

# Order matters: specific module paths first, then the catch-all.
sed -i \
    -e 's/^import meshrt as ray$/import ray/' \
    -e 's/\bmeshrt\.util\b/ray.util/g' \
    -e 's/\bmeshrt\.exceptions\b/ray.exceptions/g' \
    -e 's/\bmeshrt\./ray./g' \
    -e 's/\bimport meshrt\b/import ray/g' \
    "$DEST"/*.py

if grep -n 'meshrt' "$DEST"/*.py; then
    echo "error: meshrt references left after rewriting" >&2
    exit 1
fi

cd "$DEST"
exec "$PYTHON" -m pytest -p no:cacheprovider -q "$@"
