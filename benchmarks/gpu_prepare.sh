#!/usr/bin/env bash
# Get the checkout ready to send to a GPU machine that reaches no package registry and
# accepts at most 64 MiB of working tree, for benchmarks/gpu_check.sh:
#
#   bash benchmarks/gpu_prepare.sh           # before sending the checkout
#   ... run `bash benchmarks/gpu_check.sh OUT` there, carrying .whl ...
#   bash benchmarks/gpu_prepare.sh --undo    # right after, before any commit
#
# 1. Wheels, into .whl/ (ignored by git): what sflsim imports that a GPU image with
#    PyTorch, torchvision, NumPy, pandas, pyarrow, networkx, matplotlib, PyYAML, typer,
#    rich and pytest (pytest-xdist, pytest-timeout, Hypothesis) may lack: SimPy, pydantic
#    and what pydantic needs, at the versions this environment has (the ones its tests
#    passed with), built for CPython $GPU_PYTHON_VERSION (default 3.12) on x86-64 Linux.
#    gpu_check.sh installs them there when `import simpy, pydantic` fails.
# 2. analysis/measured (the reproduction runs, about 240 MiB) is taken out of git's index
#    and listed in .git/info/exclude, so it is neither tracked nor untracked-and-unignored
#    and does not travel; the files stay on disk. --undo puts it back in the index and
#    removes the exclude line. Between the two, commit nothing: the index records the
#    folder as deleted.
set -euo pipefail
cd "$(dirname "$0")/.."
exclude=.git/info/exclude
measured=analysis/measured
line="/$measured/"
# add a line to .git/info/exclude unless it is there (on a line of its own)
exclude_add() {
    mkdir -p "$(dirname "$exclude")"
    grep -qxF "$1" "$exclude" 2>/dev/null && return
    [ -s "$exclude" ] && [ -n "$(tail -c 1 "$exclude")" ] && echo >> "$exclude"
    echo "$1" >> "$exclude"
}

if [ "${1:-}" = --undo ]; then
    git reset -q -- "$measured"
    if [ -f "$exclude" ]; then
        grep -vxF "$line" "$exclude" > "$exclude.new" || true
        mv "$exclude.new" "$exclude"
    fi
    git diff --quiet -- "$measured" && git diff --cached --quiet -- "$measured" \
        || { echo "gpu_prepare: $measured differs from HEAD after --undo; see git status" >&2; exit 1; }
    echo "gpu_prepare: $measured is tracked again"
    exit 0
fi

python_version=${GPU_PYTHON_VERSION:-3.12}
exclude_add "/.whl/"
# the versions installed here, which the test suite ran with
mapfile -t wheels < <(python - <<'PY'
import importlib.metadata as m
for name in ("simpy", "pydantic", "pydantic-core", "annotated-types", "typing-inspection",
             "typing-extensions"):
    print(f"{name}=={m.version(name)}")
PY
)
rm -rf .whl
python -m pip download -q --no-deps --only-binary=:all: --python-version "$python_version" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl "${wheels[@]}" 2> >(grep -v "is ignored" >&2)
echo "gpu_prepare: .whl holds $(ls .whl | tr '\n' ' ')"

if git ls-files --error-unmatch "$measured" > /dev/null 2>&1; then
    git rm -r -q --cached "$measured"
fi
exclude_add "$line"
# what would travel: tracked files and untracked ones git does not ignore, plus .whl
mib=$( { git ls-files -z --cached --others --exclude-standard; find .whl -type f -print0; } \
       | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {printf "%.1f", s / 2^20}')
echo "gpu_prepare: $mib MiB would travel (the limit is 64 MiB); $measured is set aside"
awk -v m="$mib" 'BEGIN {exit !(m < 60)}' \
    || { echo "gpu_prepare: too large to send; run --undo and look at git ls-files" >&2; exit 1; }
echo "gpu_prepare: now run 'bash benchmarks/gpu_check.sh \$OUT' on the GPU machine with .whl"
echo "             carried, then 'bash benchmarks/gpu_prepare.sh --undo'"
