# Shared by the trainer tests: a small corpus made on the spot (no download, no
# dependence on the fortunes package), prepared into shards with the project's tool.
set -euo pipefail

make_corpus() {  # make_corpus DIR PREPARE
  local dir=$1 prepare=$2
  mkdir -p "$dir"
  local text="$dir/corpus.txt"
  : > "$text"
  local i
  for i in $(seq 1 400); do
    printf 'The quick brown fox %d jumps over the lazy dog. A stitch in time saves nine.\n' "$i" >> "$text"
    printf 'To be or not to be, that is the question number %d.\n\n' "$i" >> "$text"
  done
  "$prepare" --out "$dir/data" --val-fraction 0.1 "$text" > /dev/null
}

# The tiny model every trainer test uses, on the corpus of make_corpus.
tiny_args() {  # tiny_args DATA_DIR RUN_DIR
  echo --config "$ROOT/configs/tiny.json" --set device=cpu --set "train_data=$1/train.bin" \
    --set "val_data=$1/val.bin" --set "run_dir=$2" --set threads=1
}
