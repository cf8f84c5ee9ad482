#!/usr/bin/env bash
# run_all.sh [BITSPARK]: rebuild the tiny Bonsai and its drafter from scratch (about 2 hours on
# one busy core): corpus, tokenizer (checked against bitspark tokenize), 1-bit QAT target,
# Q1_0 GGUF + PyTorch reference logits for tests/test_trained_model.py, samples, the ternary
# (Q2_0) variant + its reference logits, DSpark drafter, its GGUF / safetensors, the antidoom FTPO
# LoRA (pairs mined and everything measured with bitspark) and the merged model.
# Outputs: models/, tests/data/bonsai_tiny_ref.*, tests/data/bonsai_tiny_q2_ref.*, train/out/.
#
# SMOKE=1 train/run_all.sh [BITSPARK]: the same chain with a few steps of everything, written to
# train/out-smoke/ only (models/ and tests/data/ are not touched; train/data is reused when it
# exists). A few minutes; checks that the scripts run, not what they produce.
#
# Needs: apt-get install -y python3-torch python3-regex fortunes libopenblas0-pthread
set -euo pipefail
cd "$(dirname "$0")/.."
bitspark=${1:-build/bitspark}
py=/usr/bin/python3
export OPENBLAS_NUM_THREADS=1
run() { echo "+ $*" >&2; nice -n 10 "$@"; }

if [ "${SMOKE:-0}" = 1 ]; then
  out=train/out-smoke models=train/out-smoke/models refs=train/out-smoke/ref
  steps=3 q2steps=2 dsteps=3 dargs="--n-seq 4 --n-eval 2" sargs="--n 8"
  adargs="--n-mine 6 --n-val 6 --n-eval 4 --epochs 1 --max-seconds 20"
  rm -rf "$out"; mkdir -p "$models" "$refs"
else
  out=train/out models=models refs=tests/data
  steps=${TARGET_STEPS:-745}     # the step count the committed model's time-bounded run reached
  q2steps=${TERNARY_STEPS:-130}  # the same for the ternary continuation
  dsteps=${DRAFTER_STEPS:-600} dargs="" sargs="" adargs=""
fi

if [ "${SMOKE:-0}" != 1 ] || [ ! -f train/data/vocab.json ]; then
  run $py train/corpus.py train/data
  run $py train/tokenizer.py train/data 2048
fi
if [ -x "$bitspark" ] && [ "${SMOKE:-0}" != 1 ]; then
  run $py train/verify_tokenizer.py "$bitspark" train/data/vocab.json train/data/heldout.txt
fi
rm -f $out/target_log.tsv $out/target_q2_log.tsv
run $py train/train_target.py --data train/data --out $out --steps "$steps" --lr 3e-3 \
    --batch 16 --seq 128 --warmup 30 --n-layer 4
run $py train/export_gguf.py $out/target.pt train/data/vocab.json $models/bonsai-tiny-q1_0.gguf \
    --ref-text train/data/heldout.txt --ref-out $refs/bonsai_tiny_ref
run $py train/sample.py $out/target.pt train/data/vocab.json $sargs > $out/samples.txt
# ternary: continue from the 1-bit model's latent weights with the ternary quantizer
run $py train/train_target.py --data train/data --out $out --steps "$q2steps" --lr 1e-3 \
    --batch 16 --seq 128 --warmup 10 --n-layer 4 --quant q2_0 --init $out/target.pt --name target_q2
run $py train/export_gguf.py $out/target_q2.pt train/data/vocab.json $models/bonsai-tiny-q2_0.gguf \
    --ref-text train/data/heldout.txt --ref-out $refs/bonsai_tiny_q2_ref
if [ -x "$bitspark" ]; then
  run $py train/eval_ppl.py "$bitspark" $models/bonsai-tiny-q1_0.gguf $out/target.pt \
      train/data/heldout_ids.npy > $out/ppl_bitspark.json
  run $py train/eval_ppl.py "$bitspark" $models/bonsai-tiny-q2_0.gguf $out/target_q2.pt \
      train/data/heldout_ids.npy > $out/ppl_bitspark_q2.json
fi
rm -f $out/drafter_data.pt
run $py train/train_drafter.py --data train/data --out $out --steps "$dsteps" $dargs
run $py train/export_drafter.py $out/drafter.pt $models/bonsai-tiny-dspark.gguf $models/bonsai-tiny-dspark
if [ -x "$bitspark" ]; then   # the shipped drafter is Q8_0 (models/README.md)
  run "$bitspark" quantize $models/bonsai-tiny-dspark.gguf $out/dspark-q8.gguf q8_0 --embd-type q1_0 \
      --output-type q1_0 --allow-requantize
  mv $out/dspark-q8.gguf $models/bonsai-tiny-dspark.gguf
fi
if [ -x "$bitspark" ]; then
  # pairs are mined and every number is measured with bitspark on the Q1_0 file just written
  rm -rf $out/antidoom
  run $py train/antidoom.py "$bitspark" --data train/data --out $out --models $models \
      --base $models/bonsai-tiny-q1_0.gguf --ship-lora float $adargs
else
  echo "no bitspark at $bitspark: antidoom skipped (it mines and measures with bitspark)" >&2
fi
echo "done: $models/ and $out/{target_eval,target_q2_eval,drafter_eval}.json, $out/antidoom/eval.json" >&2
