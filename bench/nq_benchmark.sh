#!/usr/bin/env bash
# Real-data benchmark of evaluate.py on NQ-open (results: docs/evaluate-nq.md).
#
#   bash bench/nq_benchmark.sh            # QUESTIONS=300 by default; PYTHON=... the venv's python
#
# Corpus = every gold passage of ../shared/data/nq-open-oracle.jsonl.gz, relevance = answer
# match, judge and generator = the embedded SmolLM2-135M. Every stage and every judge call is
# cached under bench/data/nq/cache: a killed run resumes where it stopped, and the second
# utility source reuses the answers of the first. On 2 CPU cores the whole run takes hours, so
# it first runs each retriever under both utility sources (results usable as they come), then
# the sweeps, whose judge work is then all cached, for the cross-retriever summaries.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1
PYTHON=${PYTHON:-python}
out=bench/data/nq
common=(dataset=nq_open "dataset.limit=${QUESTIONS:-300}" "cache_dir=$out/cache" ablations=true
        theta_crossfit=true n_bootstrap=1000)
retrievers=(bm25 dense hybrid oracle_first random)
utilities=(abstention answer_likelihood)

# k=5, one retriever at a time under both utility sources
for retriever in "${retrievers[@]}"; do
    for utility in "${utilities[@]}"; do
        "$PYTHON" evaluate.py "${common[@]}" k=5 "retriever=$retriever" "utility=$utility" \
            "hydra.run.dir=$out/runs/k5_${utility}_$retriever"
    done
done
# the sweeps (cached by now): one summary per utility source ranking the retrievers
for utility in "${utilities[@]}"; do
    "$PYTHON" evaluate.py -m "${common[@]}" k=5 "utility=$utility" \
        "retriever=$(IFS=,; echo "${retrievers[*]}")" "hydra.sweep.dir=$out/k5_$utility"
done
# positional study: the gold passage cycled over positions 1..5 (BM25 fills the rest)
"$PYTHON" evaluate.py "${common[@]}" k=5 retriever=gold_at "hydra.run.dir=$out/k5_gold_at"
# sensitivity to k on one retriever
"$PYTHON" evaluate.py -m "${common[@]}" k=1,3,10 retriever=bm25 "hydra.sweep.dir=$out/k_bm25"
