#!/usr/bin/env bash
# Run the Monarch-style programs against Monarch itself (the torchmonarch package).
#
# Copies tests/compat_monarch/test_*.py into /tmp/compat_monarch_check/, rewrites the
# meshrt imports to monarch.actor's, and runs pytest there. Extra arguments go to
# pytest, e.g.:  tests/compat_monarch/run_against_monarch.sh -k ports -x
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DEST=/tmp/compat_monarch_check
PYTHON="${PYTHON:-/work/venv/bin/python}"

mkdir -p "$DEST"
rm -f "$DEST"/*.py
cp "$HERE"/test_*.py "$DEST"/
sed -i -e 's/^from meshrt import /from monarch.actor import /' \
    -e 's/^from meshrt.rdma import /from monarch.rdma import /' \
    -e 's/^import meshrt$/import monarch.actor as meshrt/' "$DEST"/*.py

if grep -nE '^\s*(from|import) meshrt\b' "$DEST"/*.py; then
    echo "error: meshrt imports left after rewriting" >&2
    exit 1
fi
printf '[pytest]\nasyncio_mode = auto\ntimeout = 300\n' > "$DEST/pytest.ini"
# This machine has no RDMA NIC: Monarch's RDMABuffer needs its TCP fallback turned on.
printf 'import monarch\n\nmonarch.configure(rdma_allow_tcp_fallback=True)\n' > "$DEST/conftest.py"

cd "$DEST"
exec "$PYTHON" -m pytest -p no:cacheprovider -q "$@"
