#!/usr/bin/env bash
# Real-data benchmark of evaluate.py on NQ-open (results: docs/evaluate-nq.md).
#
#   bash bench/nq_benchmark.sh            # QUESTIONS=300 by default
#
# Corpus = every gold passage of ../shared/data/nq-open-oracle.jsonl.gz, relevance = answer
# match, judge and generator = the embedded SmolLM2-135M. Every stage and every judge call is
# cached under bench/data/nq/cache: a killed run resumes where it stopped, and the second
# utility source reuses the answers of the first. On 2 CPU cores the whole run takes hours.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1
PYTHON=${PYTHON:-python}   # the interpreter of the set-up venv
out=bench/data/nq
common=(dataset=nq_open "dataset.limit=${QUESTIONS:-300}" "cache_dir=$out/cache" ablations=true
        theta_crossfit=true n_bootstrap=1000)

# k=5: three retrievers plus controls, under both utility sources
for utility in abstention answer_likelihood; do
    "$PYTHON" evaluate.py -m "${common[@]}" k=5 "utility=$utility" \
        retriever=bm25,dense,hybrid,oracle_first,random "hydra.sweep.dir=$out/k5_$utility"
done
# positional study: the gold passage cycled over positions 1..5 (BM25 fills the rest)
"$PYTHON" evaluate.py "${common[@]}" k=5 retriever=gold_at "hydra.run.dir=$out/k5_gold_at"
# sensitivity to k on one retriever
"$PYTHON" evaluate.py -m "${common[@]}" k=1,3,10 retriever=bm25 "hydra.sweep.dir=$out/k_bm25"
