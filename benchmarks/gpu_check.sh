#!/usr/bin/env bash
# What we run on a machine with a CUDA GPU, in one go (such machines are lent for minutes):
# build meshrt._C with CUDA, the GPU tests, the tensor and torch.distributed tests as a
# CPU machine runs them (GPUs hidden, see tests/conftest.py), and the actor-mesh
# benchmark for meshrt alone with its scaling rows in every round (a machine with more
# cores than ours; BENCH=0 skips it). Logs and results go to the folder given
# (default ./gpu-check).
#
#   bash benchmarks/gpu_check.sh [OUTDIR]
set -u
out=${1:-gpu-check}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
py=${PYTHON:-python3}

step() {  # step NAME SECONDS CMD...: run with a time limit, log to OUTDIR/NAME.log
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    timeout -k 10 "$limit" "$@" >"$out/$name.log" 2>&1
    local rc=$?
    echo "== $name: exit $rc in $((SECONDS - t0)) s" | tee -a "$out/summary.txt"
    tail -n 25 "$out/$name.log"
}

{ nvidia-smi -L; nproc; $py -c "import torch; print('torch', torch.__version__, torch.cuda.is_available())"
  $py -m pip show pytest 2>/dev/null | grep -i ^version; } >"$out/machine.txt" 2>&1
cat "$out/machine.txt"
step build 120 $py setup.py build_ext --inplace
$py -c "from meshrt import _C; print(_C.build_info(), _C.cuda_available())" | tee -a "$out/summary.txt"
$py -c "import torch; from meshrt._private.spawn import _gpu_driver_started as started; a = started()
torch.cuda.is_available(); print('GPU driver started by import torch:', a, '; by is_available():', started())" \
    | tee -a "$out/machine.txt"
step gpu_tests 150 $py -m pytest -v -m gpu --timeout 100 tests/
[ "${BENCH:-1}" = 1 ] && step bench 160 env CUDA_VISIBLE_DEVICES= $py benchmarks/mesh.py --backend meshrt --repeat 3 --scaling-rounds 3 \
    --json "$out/mesh.json" --markdown "$out/mesh.md"
step cpu_tests 190 $py -m pytest -v --durations=12 --timeout 60 tests/test_mesh_distributed.py tests/test_tensor.py
cat "$out/summary.txt"
