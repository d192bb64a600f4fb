#!/usr/bin/env bash
# A/B of the TREC engine's cold (first-call) and warm times between two commits: ROUNDS
# alternating fresh processes of `bench_trec.py --tools udcg` on each side (single runs on a
# shared host vary by 20-30%, so compare the medians). AFTER "." is the working tree.
#
#   bash bench/ab_trec.sh BEFORE AFTER [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
before=$1 after=$2 rounds=${3:-8}
python=$(command -v "${PYTHON:-python}")
[[ $python = /* ]] || python="$PWD/$python"  # the same interpreter after cd
checkout() {  # a worktree of commit $1 (the working tree for ".")
    if [ "$1" = . ]; then echo "$PWD"; return; fi
    local dir
    dir=$(mktemp -d)
    git worktree add -q --detach "$dir" "$1"
    echo "$dir"
}
a=$(checkout "$before") b=$(checkout "$after")
trap 'for d in "$a" "$b"; do [ "$d" = "$PWD" ] || git worktree remove --force "$d"; done' EXIT
files=("$PWD/bench/data/qrels.trec" "$PWD/bench/data/run.trec")
for _ in $(seq "$rounds"); do
    for side in before after; do
        dir=$([ "$side" = before ] && echo "$a" || echo "$b")
        row=$(cd "$dir" && PYTHONPATH="$dir" "$python" bench/bench_trec.py "${files[@]}" \
            --tools udcg --repeats 2 2>/dev/null | tail -1)
        echo "$side $(echo "$row" | awk -F'|' '{print "cold", $3, "warm", $4}')"
    done
done
