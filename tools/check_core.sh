#!/usr/bin/env bash
# make test-core: numbatraj installed with no extras into a fresh venv, then used as a new
# user would, from outside the source tree.  Needs $1 = the venv's python.
set -euo pipefail
py=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
bin=$(dirname "$py")
work=$(mktemp -d /tmp/numbatraj-core.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"

installed=$("$py" -m pip list --format=freeze 2>/dev/null | cut -d= -f1 | tr 'A-Z_' 'a-z-' | sort | tr '\n' ' ')
expected="h5py hdf5plugin llvmlite numba numbatraj numpy pip setuptools "
[ "$installed" = "$expected" ] || { echo "core install: got [$installed], expected [$expected]"; exit 1; }
"$py" -c "import importlib.util as u, sys; sys.exit(u.find_spec('numba_cuda') is not None)"

"$bin/numbatraj" --help >/dev/null
for cmd in info validate "import lerobot" "import d4rl" "import libero" "import lafan" \
           "import minari" "import robomimic" "import diffusion-policy" "catalog serve" \
           "catalog add-key" "remote pull" "remote push" "remote list" "remote describe" \
           "lerobot push" "lerobot reject" "assets status" "assets pull" "assets where" \
           "dataset push" "dataset pull" "dataset list"; do
  # shellcheck disable=SC2086
  "$bin/numbatraj" $cmd --help >/dev/null || { echo "numbatraj $cmd --help failed"; exit 1; }
done

"$py" - <<'PY'
import numpy as np
import numbatraj
from numbatraj import ColumnSpec, TrajectoryStoreWriter

numbatraj.StoreReplay
cols = [ColumnSpec("state", np.float32, (26,)), ColumnSpec("reward", np.float32)]
with TrajectoryStoreWriter("run.h5", cols, env_id="walker-walk", seed=0) as w:
    w.append("state", np.zeros((100, 26), np.float32))
    w.append("reward", np.zeros(100, np.float32))
    w.end_episode()
try:
    numbatraj.StoreReplayGpu(cols, 8)
except numbatraj.DeviceUnavailableError as exc:
    assert "numbatraj[cuda]" in str(exc), exc
else:
    raise SystemExit("StoreReplayGpu built without numba-cuda")
PY
"$bin/numbatraj" info run.h5 | grep -q "rows: 100"
"$bin/numbatraj" validate run.h5 | grep -q ": ok"

set +e
err=$("$bin/numbatraj" remote list 2>&1 >/dev/null); rc=$?
set -e
[ "$rc" = 2 ] || { echo "numbatraj remote list: exit $rc, expected 2: $err"; exit 1; }
[ "$(printf '%s\n' "$err" | wc -l)" = 1 ] || { echo "more than one line: $err"; exit 1; }
case "$err" in *"pip install 'numbatraj[remote]'"*) ;; *) echo "no hint: $err"; exit 1;; esac
echo "test-core: ok (core install: $installed)"
