#!/usr/bin/env bash
# run_all.sh [BITSPARK]: rebuild the tiny Bonsai and its drafter from scratch (about 1.5 hours on
# one busy core): corpus, tokenizer (checked against bitspark tokenize), 1-bit QAT target,
# Q1_0 GGUF + PyTorch reference logits for tests/test_trained_model.py, samples, DSpark drafter,
# its GGUF / safetensors, the antidoom FTPO LoRA and the merged model. Outputs: models/, tests/data/bonsai_tiny_ref.*, train/out/.
# Needs: apt-get install -y python3-torch python3-regex fortunes libopenblas0-pthread
set -euo pipefail
cd "$(dirname "$0")/.."
bitspark=${1:-build/bitspark}
py=/usr/bin/python3
export OPENBLAS_NUM_THREADS=1
steps=${TARGET_STEPS:-745}   # the step count the committed model's time-bounded run reached
dsteps=${DRAFTER_STEPS:-600}
run() { echo "+ $*" >&2; nice -n 10 "$@"; }

run $py train/corpus.py train/data
run $py train/tokenizer.py train/data 2048
if [ -x "$bitspark" ]; then run $py train/verify_tokenizer.py "$bitspark" train/data/vocab.json train/data/heldout.txt; fi
rm -f train/out/target_log.tsv
run $py train/train_target.py --data train/data --out train/out --steps "$steps" --lr 3e-3 \
    --batch 16 --seq 128 --warmup 30 --n-layer 4
mkdir -p models
run $py train/export_gguf.py train/out/target.pt train/data/vocab.json models/bonsai-tiny-q1_0.gguf \
    --ref-text train/data/heldout.txt --ref-out tests/data/bonsai_tiny_ref
run $py train/sample.py train/out/target.pt train/data/vocab.json > train/out/samples.txt
if [ -x "$bitspark" ]; then
  run $py train/eval_ppl.py "$bitspark" models/bonsai-tiny-q1_0.gguf train/out/target.pt \
      train/data/heldout_ids.npy > train/out/ppl_bitspark.json
fi
rm -f train/out/drafter_data.pt
run $py train/train_drafter.py --data train/data --out train/out --steps "$dsteps"
run $py train/export_drafter.py train/out/drafter.pt models/bonsai-tiny-dspark.gguf models/bonsai-tiny-dspark
run $py train/antidoom.py --data train/data --out train/out --models models
echo "done: models/ and train/out/{target_eval,drafter_eval,antidoom_eval}.json" >&2
