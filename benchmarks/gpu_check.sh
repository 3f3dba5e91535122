#!/usr/bin/env bash
# One device check for a GPU machine, in about 8 minutes (at most 9) on one GPU: the CUDA tests, the
# batched-client benchmark and one round of the FedSGA paper preset at full width. Every
# figure and log goes to the folder given as the argument (7 files, no subfolders):
#
#   bash benchmarks/gpu_prepare.sh          # here: wheels into .whl, the tree under 64 MiB
#   bash benchmarks/gpu_check.sh OUT        # on the GPU machine, from the repository root
#
#   OUT/env.txt                  nvidia-smi, CPU, torch, CUDA and the GPU's name
#   OUT/test_device.txt          tests/test_device.py: every registered algorithm gives the
#   OUT/test_device.xml          CPU's events, rounds and clients columns on the GPU; fused
#                                clients on the GPU give the loop's events (JUnit XML with
#                                each test's CPU and GPU accuracies as properties)
#   OUT/batched_clients.txt      FedAvg, clients one by one vs training.fuse_clients, at 20,
#   OUT/batched_clients_cuda.json  100 and 500 clients (ResNet-18 at full width, 3x32x32)
#   OUT/fedsga_round.txt         one round of scenarios/papers/fedsga/cifar10_resnet18.yaml
#   OUT/fedsga_round.json        (20 clients, 5 local epochs, batch 64) on generated images
#                                of CIFAR-10's shape (no dataset to bring along): its
#                                summary.json and rounds.csv
#
# Python: $PYTHON, else python3 (on the GPU image, the one that holds PyTorch). sflsim is
# imported from this checkout (PYTHONPATH), not installed. Where SimPy or pydantic is
# missing, the wheels in .whl/ (benchmarks/gpu_prepare.sh) are installed into a folder of
# their own, with no registry.
#
# GPU_CHECK_DEVICE=cpu GPU_CHECK_QUICK=1 GPU_CHECK_WORKERS=2 runs the same steps on the CPU
# at toy sizes in under a minute, to check the script itself where there is no GPU. Each
# step has its own time limit, and a step that fails does not stop the next.
set -uo pipefail
out=${1:?usage: bash benchmarks/gpu_check.sh OUT_DIR}
device=${GPU_CHECK_DEVICE:-cuda}
quick=${GPU_CHECK_QUICK:-0}
py=${PYTHON:-python3}
workers=${GPU_CHECK_WORKERS:-8}
cd "$(dirname "$0")/.."
mkdir -p "$out" 2> /dev/null && out=$(cd "$out" && pwd) \
    || { echo "gpu_check: cannot make the folder $out for the results" >&2; exit 2; }
work=$(mktemp -d)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
status=0
start=$(date +%s)
# a step's heading, on the terminal and as the first line of its log
step() { echo "== $2 ($(( $(date +%s) - start )) s in)" | tee "$out/$1"; }

step env.txt "environment"
if ! "$py" -c "import simpy, pydantic" 2>/dev/null; then
    if ls .whl/*.whl > /dev/null 2>&1; then
        "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
            --target "$work/site" .whl/*.whl >> "$out/env.txt" 2>&1
        export PYTHONPATH="$work/site"
    else
        echo "SimPy or pydantic is missing and there is no .whl folder:" \
             "run benchmarks/gpu_prepare.sh and carry .whl" | tee -a "$out/env.txt"
    fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
{ nvidia-smi || echo "no nvidia-smi"
  echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc --all) cores"
  "$py" -c "import sys, torch, sflsim, simpy, pydantic; print('python', sys.version.split()[0], \
'| torch', torch.__version__, 'CUDA', torch.version.cuda, 'available', \
torch.cuda.is_available(), '| sflsim', sflsim.__version__, sflsim.__file__, '| simpy', \
simpy.__version__, '| pydantic', pydantic.VERSION); torch.cuda.is_available() and \
print('GPU', torch.cuda.get_device_name())"; } >> "$out/env.txt" 2>&1 || status=1
tail -2 "$out/env.txt"

step test_device.txt "CUDA tests"
# one test at a time per worker process ($GPU_CHECK_WORKERS, default 8, one torch thread
# each): the algorithms' CPU and GPU runs side by side
timeout 210 "$py" -m pytest -q -p no:cacheprovider -n "$workers" --dist load -rA \
    --junitxml="$out/test_device.xml" tests/test_device.py >> "$out/test_device.txt" 2>&1 \
    || status=1
tail -3 "$out/test_device.txt"

if [ "$quick" = 1 ]; then
    width="width 0.125, 4 clients"
    sizes=(--clients 4 8 --model hetero_splitee_resnet --width 0.125 --image 1 28 28
           --samples 16 --batch 8)
    fedsga=(--set model.width=0.125 --set devices.pi4_wifi.count=1 --set devices.nano_lte.count=1
            --set devices.orin_wifi.count=1 --set devices.phone_5g.count=1
            --set training.local_epochs=1 --set training.batch_size=16
            --set "dataset.synthetic={train_samples: 64, test_samples: 32, classes: 10, image_shape: [3, 32, 32]}")
else
    width="full width"
    sizes=(--clients 20 100 500 --model resnet18 --width 1.0 --image 3 32 32 --samples 64
           --batch 32)
    fedsga=(--set "dataset.synthetic={train_samples: 2560, test_samples: 512, classes: 10, image_shape: [3, 32, 32]}")
fi

step batched_clients.txt "batched clients"
# the benchmark skips a fleet size it estimates would not end within its budget
timeout 190 "$py" benchmarks/batched_clients.py --device "$device" "${sizes[@]}" \
    --budget-s 170 -o "$out" >> "$out/batched_clients.txt" 2>&1 || status=1
tail -n +2 "$out/batched_clients.txt" | tail -4

step fedsga_round.txt "one round of the FedSGA preset ($width)"
timeout 120 "$py" -m sflsim run papers/fedsga/cifar10_resnet18 -o "$work/fedsga_round" \
    --overwrite -q --set training.rounds=1 --set dataset.name=synthetic \
    --set dataset.data_root=null --set training.device="$device" "${fedsga[@]}" \
    >> "$out/fedsga_round.txt" 2>&1 || status=1
"$py" - "$work/fedsga_round" "$out/fedsga_round.json" >> "$out/fedsga_round.txt" 2>&1 <<'PY' || status=1
import json, sys
import pandas as pd
run, dest = sys.argv[1:]
s = json.load(open(f"{run}/summary.json"))
rounds = pd.read_csv(f"{run}/rounds.csv")
json.dump({"summary": s, "rounds": rounds.to_dict(orient="records")}, open(dest, "w"),
          indent=1, default=str)
print({k: s.get(k) for k in ("status", "rounds_completed", "sim_time_s", "wall_time_s",
                             "client_flops")})
PY
tail -2 "$out/fedsga_round.txt"
rm -rf "$work"
echo "== done, status $status ($(( $(date +%s) - start )) s in)"
exit $status
