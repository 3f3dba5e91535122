#!/usr/bin/env bash
# One device check for a GPU machine, in under 8 minutes on one GPU: the CUDA tests, the
# batched-client benchmark and one round of the FedSGA paper preset at full width. Every
# figure and log goes to the folder given as the argument:
#
#   bash benchmarks/gpu_check.sh OUT        # on the GPU machine, from the repository root
#
#   OUT/env.txt                  nvidia-smi, torch, CUDA and the GPU's name
#   OUT/test_device.txt          tests/test_device.py (every registered algorithm: the same
#                                events, rounds and clients columns on CPU and GPU)
#   OUT/batched_clients.txt      FedAvg, clients one by one vs training.fuse_clients, at 20,
#   OUT/batched_clients_cuda.json  100 and 500 clients (ResNet-18 at full width, 3x32x32)
#   OUT/fedsga_round/            one round of scenarios/papers/fedsga/cifar10_resnet18.yaml
#   OUT/fedsga_round.txt         (20 clients, 5 local epochs, batch 64) on generated images
#                                of CIFAR-10's shape (no dataset to bring along)
#
# GPU_CHECK_DEVICE=cpu GPU_CHECK_QUICK=1 runs the same steps on the CPU at toy sizes in about
# two minutes, to check the script itself where there is no GPU. Each step has its own
# time limit, and a step that fails does not stop the next.
set -uo pipefail
out=${1:?usage: bash benchmarks/gpu_check.sh OUT_DIR}
device=${GPU_CHECK_DEVICE:-cuda}
quick=${GPU_CHECK_QUICK:-0}
cd "$(dirname "$0")/.."
mkdir -p "$out"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
status=0
start=$(date +%s)
step() { echo "== $1 ($(( $(date +%s) - start )) s in)"; }

step "environment" | tee "$out/env.txt"
{ nvidia-smi || echo "no nvidia-smi"
  python -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, \
'available', torch.cuda.is_available()); torch.cuda.is_available() and \
print('GPU', torch.cuda.get_device_name())"; } >> "$out/env.txt" 2>&1

step "CUDA tests" | tee "$out/test_device.txt"
timeout 240 python -m pytest -q -n 0 -p no:cacheprovider tests/test_device.py -rA \
    >> "$out/test_device.txt" 2>&1 || status=1
tail -3 "$out/test_device.txt"

if [ "$quick" = 1 ]; then
    sizes=(--clients 4 8 --model hetero_splitee_resnet --width 0.125 --image 1 28 28
           --samples 16 --batch 8)
    fedsga=(--set model.width=0.125 --set devices.pi4_wifi.count=1 --set devices.nano_lte.count=1
            --set devices.orin_wifi.count=1 --set devices.phone_5g.count=1
            --set training.local_epochs=1 --set training.batch_size=16
            --set "dataset.synthetic={train_samples: 64, test_samples: 32, classes: 10, image_shape: [3, 32, 32]}")
else
    sizes=(--clients 20 100 500 --model resnet18 --width 1.0 --image 3 32 32 --samples 64
           --batch 32)
    fedsga=(--set "dataset.synthetic={train_samples: 2560, test_samples: 512, classes: 10, image_shape: [3, 32, 32]}")
fi

step "batched clients" | tee "$out/batched_clients.txt"
timeout 200 python benchmarks/batched_clients.py --device "$device" "${sizes[@]}" -o "$out" \
    >> "$out/batched_clients.txt" 2>&1 || status=1
tail -4 "$out/batched_clients.txt"

step "one round of the FedSGA preset at full width" | tee "$out/fedsga_round.txt"
timeout 150 sflsim run papers/fedsga/cifar10_resnet18 -o "$out/fedsga_round" --overwrite -q \
    --set training.rounds=1 --set dataset.name=synthetic --set dataset.data_root=null \
    --set training.device="$device" "${fedsga[@]}" >> "$out/fedsga_round.txt" 2>&1 || status=1
python - "$out/fedsga_round" >> "$out/fedsga_round.txt" 2>&1 <<'PY' || status=1
import json, sys
s = json.load(open(f"{sys.argv[1]}/summary.json"))
print({k: s[k] for k in ("status", "rounds_completed", "sim_time_s", "wall_time_s", "client_flops")})
PY
tail -2 "$out/fedsga_round.txt"
step "done, status $status"
exit $status
