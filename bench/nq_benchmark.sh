#!/usr/bin/env bash
# Real-data benchmark of evaluate.py on NQ-open (set-up: docs/evaluate-nq.md; results: docs/findings.md).
#
#   bash bench/nq_benchmark.sh            # QUESTIONS=300 by default; PYTHON=... the venv's python
#
# Corpus = every gold passage of ../shared/data/nq-open-oracle.jsonl.gz, relevance = answer
# match, judge and generator = the embedded SmolLM2-135M. Every stage and every judge call is
# cached under bench/data/nq/cache: a killed run resumes where it stopped, and the second
# utility source reuses the answers of the first. On 2 CPU cores the whole run takes hours
# (about 30 min per new set of 300 contexts), so results are written block by block.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1
PYTHON=${PYTHON:-python}
out=bench/data/nq
common=(dataset=nq_open "dataset.limit=${QUESTIONS:-300}" "cache_dir=$out/cache" ablations=true
        theta_crossfit=true n_bootstrap=1000)
retrievers=(bm25 dense hybrid oracle_first random)

# k=5: each retriever alone under one utility source, then the sweep summary across them
by_retriever() {
    local utility=$1 retriever
    for retriever in "${retrievers[@]}"; do
        "$PYTHON" evaluate.py "${common[@]}" k=5 "retriever=$retriever" "utility=$utility" \
            "hydra.run.dir=$out/runs/k5_${utility}_$retriever"
    done
    "$PYTHON" evaluate.py -m "${common[@]}" k=5 "utility=$utility" \
        "retriever=$(IFS=,; echo "${retrievers[*]}")" "hydra.sweep.dir=$out/k5_$utility"
}

# Order = what the report needs first (each block resumes from the cache):
# 1. every retriever under the abstention source
by_retriever abstention
# 2. sensitivity to k on one retriever
"$PYTHON" evaluate.py -m "${common[@]}" k=1,3,10 retriever=bm25 "hydra.sweep.dir=$out/k_bm25"
# 3. positional study: the gold passage cycled over positions 1..5 (BM25 fills the rest)
"$PYTHON" evaluate.py "${common[@]}" k=5 retriever=gold_at "hydra.run.dir=$out/k5_gold_at"
# 4. the answer-likelihood source on the same contexts (answers cached by now)
by_retriever answer_likelihood
