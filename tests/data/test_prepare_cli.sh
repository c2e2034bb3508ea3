#!/usr/bin/env bash
# CLI tests of build/bin/prepare, one case per call:  test_prepare_cli.sh PREPARE CASE
# Bad input must exit with status exactly 2 (a UserError, not a crash or a bug) and
# say on stderr which file or flag is wrong; good input must write shards whose
# tokens are the input's bytes.
set -u
prepare=$1
case_name=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# expect_error NEEDLE ARGS...: prepare ARGS exits 2 and its stderr contains NEEDLE.
expect_error() {
  local needle=$1; shift
  "$prepare" "$@" >stdout.txt 2>stderr.txt
  local status=$?
  echo "prepare $* -> exit $status, stderr: $(cat stderr.txt)"
  [[ $status -eq 2 ]] || fail "expected exit status 2, got $status"
  grep -qF -- "$needle" stderr.txt || fail "stderr does not mention '$needle'"
  [[ ! -e out/train.bin ]] || fail "bad input still wrote out/train.bin"
  [[ ! -e out ]] || fail "bad input left out/ behind: $(ls -A out)"  # no case makes it first
}

# shards_text SHARD...: the text of shards read one after the other.
shards_text() { local s; for s in "$@"; do shard_text "$s"; done; }

# shard_text SHARD: the shard's tokens as bytes (ASCII text only: drops each token's
# zero high byte after skipping the 1024-byte header).
shard_text() { tail -c +1025 "$1" | tr -d '\000'; }

printf 'first line\nsecond line\n' >good.txt
: >empty.txt
mkdir adir

case $case_name in
  no_files)          expect_error "no input files" --out out ;;
  no_out)            expect_error "--out" good.txt ;;
  missing_file)
    # Every input is checked before any is read: good.txt is not encoded first.
    expect_error "input 'no_such_input.txt': no such file" --out out good.txt no_such_input.txt
    ! grep -q "tokens" stdout.txt || fail "good.txt was encoded before the missing file was found" ;;
  empty_file)        expect_error "empty.txt" --out out good.txt empty.txt ;;
  directory)         expect_error "adir" --out out adir ;;
  unknown_flag)      expect_error "--frobnicate" --out out --frobnicate good.txt ;;
  fraction_zero)     expect_error "--val-fraction" --out out --val-fraction 0 good.txt ;;
  fraction_one)      expect_error "--val-fraction" --out out --val-fraction 1 good.txt ;;
  fraction_negative) expect_error "--val-fraction" --out out --val-fraction -0.1 good.txt ;;
  fraction_text)     expect_error "0.1x" --out out --val-fraction 0.1x good.txt
                     expect_error "--val-fraction ' 0.1' is not a number" --out out --val-fraction ' 0.1' good.txt ;;
  fraction_underflow) expect_error "--val-fraction 1e-400 is outside (0, 1)" --out out --val-fraction 1e-400 good.txt ;;
  fraction_no_value) expect_error "--val-fraction" --out out good.txt --val-fraction ;;
  same_file_twice)   expect_error "is given twice" --out out good.txt ./good.txt ;;
  flag_twice)        expect_error "flag --out is given twice" --out out --out out2 good.txt ;;
  out_is_file)       : >afile; expect_error "--out 'afile' is a file, not a directory" --out afile good.txt ;;
  into_checkpoint)
    # A checkpoint directory (it holds manifest.json): its run's pruning deletes it whole.
    mkdir -p run/step_00000002 && echo '{}' >run/step_00000002/manifest.json
    expect_error "run/step_00000002 is a checkpoint directory" --out run/step_00000002/data good.txt
    [[ ! -e run/step_00000002/data ]] || fail "the refused prepare made run/step_00000002/data" ;;
  shard_as_text)
    # prepare's own output given back as input: refused, not tokenized as bytes, and
    # before any input is encoded.
    "$prepare" --out first good.txt >/dev/null || fail "the first prepare failed"
    expect_error "first/train.bin' is a token shard" --out out good.txt first/train.bin
    ! grep -q "tokens" stdout.txt || fail "good.txt was encoded before the shard was found" ;;
  input_is_output)
    # An input that is one of the shards prepare writes (by name, or through a link) is
    # refused even with --force, and keeps its text; the control: another input is not.
    mkdir out && cp good.txt out/train.bin && cp good.txt out/val.bin && ln -s out/val.bin link.txt
    for input in "--force out/train.bin" "--force link.txt" out/train.bin; do  # refused with or without --force
      # shellcheck disable=SC2086  # the flag and the file, split on purpose
      "$prepare" --out out $input >stdout.txt 2>stderr.txt
      status=$?
      [[ $status -eq 2 ]] || fail "input $input, one of the shards: exit $status, expected 2"
      grep -qF "input '${input#--force }' is out/" stderr.txt ||
        fail "input $input: the refusal does not name it: $(cat stderr.txt)"
    done
    cmp -s out/train.bin good.txt && cmp -s out/val.bin good.txt || fail "a refused run changed its input text"
    # (The control replaces real shards: text under a shard's name is refused, stale_not_shard.)
    "$prepare" --out shards good.txt >/dev/null && cp shards/train.bin shards/val.bin out/
    "$prepare" --out out --force good.txt >/dev/null 2>stderr.txt || fail "the control failed: $(cat stderr.txt)"
    rm -rf out
    ;;
  existing)
    # Shards already in --out are a dataset: kept unless --force; with it, replaced.
    "$prepare" --out out good.txt >/dev/null || fail "the first prepare failed"
    cp out/train.bin first_train.bin
    printf 'other text\nentirely\n' >other.txt
    "$prepare" --out out other.txt >stdout.txt 2>stderr.txt
    status=$?
    [[ $status -eq 2 ]] || fail "replacing without --force exited $status, expected 2"
    grep -qF -- "--force" stderr.txt || fail "the refusal does not mention --force: $(cat stderr.txt)"
    # Refused before the inputs are read: no token counts printed.
    ! grep -q "tokens" stdout.txt || fail "the inputs were tokenized before the refusal: $(cat stdout.txt)"
    cmp -s out/train.bin first_train.bin || fail "the refused run changed out/train.bin"
    "$prepare" --out out --force other.txt >/dev/null || fail "--force did not replace the shards"
    [[ "$(shard_text out/train.bin)$(shard_text out/val.bin)" == "$(tr -d '\000' <other.txt)" ]] ||
      fail "after --force the shards do not hold other.txt"
    # A symbolic link that points nowhere is there too: the link is kept, its target not made.
    mkdir linked && ln -s nowhere.bin linked/train.bin
    "$prepare" --out linked good.txt >stdout.txt 2>stderr.txt
    status=$?
    [[ $status -eq 2 ]] || fail "a dangling linked/train.bin: exit $status, expected 2"
    grep -qF "linked/train.bin" stderr.txt || fail "the refusal does not name linked/train.bin: $(cat stderr.txt)"
    [[ -L linked/train.bin && ! -e linked/nowhere.bin ]] || fail "the refused run replaced the link or made its target"
    ;;
  all_or_none)
    # The disk refuses the tokens: a file-size limit (ulimit -f, in KiB; SIGXFSZ ignored, so
    # the write fails with EFBIG instead of killing the process) stops the token spool,
    # 2 bytes a token, the largest file prepare writes. The old pair stays whole and no
    # file is left behind. (write_shards' own all-or-none, a set whose second shard
    # fails, is test_data's.)
    "$prepare" --out out good.txt >/dev/null || fail "the first prepare failed"
    cp out/train.bin first_train.bin && cp out/val.bin first_val.bin
    for i in $(seq 1 2000); do echo "other text $i"; done >other.txt  # 28 KB of text: a 56 KB spool
    (trap '' XFSZ; ulimit -f 16; exec "$prepare" --out out --force other.txt) >stdout.txt 2>stderr.txt
    status=$?
    [[ $status -eq 2 ]] || fail "exit $status, expected 2"
    grep -qF "token spool" stderr.txt && grep -qF "2 bytes a token" stderr.txt ||
      fail "the message does not name the spool and its size: $(cat stderr.txt)"
    cmp -s out/train.bin first_train.bin && cmp -s out/val.bin first_val.bin ||
      fail "a failed write changed the old shards"
    [[ -z "$(ls out | grep -v '^\(train\|val\)\.bin$')" ]] || fail "files were left behind: $(ls out)"
    # Control: without the limit the same run replaces both shards.
    "$prepare" --out out --force other.txt >/dev/null || fail "the unlimited run failed"
    cmp -s out/val.bin first_val.bin && fail "the unlimited run did not replace val.bin"
    rm -rf out  # for expect_error's check, which this case does not use
    ;;
  shards)
    # A split of more than --shard-tokens is written as numbered shards, which hold the
    # split in name order; each holds the limit, the last the rest.
    for i in $(seq 100 199); do echo "line $i"; done >lines.txt  # 900 bytes: 855 train, 45 val
    "$prepare" --out out --shard-tokens 300 lines.txt >stdout.txt 2>stderr.txt ||
      fail "prepare failed: $(cat stderr.txt)"
    [[ "$(cd out && echo *)" == "train_00000.bin train_00001.bin train_00002.bin val.bin" ]] ||
      fail "out holds $(cd out && echo *), not three train shards and val.bin"
    [[ "$(shards_text out/train_0000[0-2].bin out/val.bin)" == "$(cat lines.txt)" ]] ||
      fail "the shards in name order do not hold lines.txt"
    for k in 0 1; do
      [[ $(stat -c %s out/train_0000$k.bin) -eq $((1024 + 2 * 300)) ]] || fail "train_0000$k.bin is not full"
    done
    grep -qF "train_data=out/train_*.bin" stdout.txt || fail "the pattern to train on is not printed: $(cat stdout.txt)"
    # Replaced by a dataset of fewer shards: the old ones go, none left for a glob to read.
    "$prepare" --out out --force lines.txt >/dev/null 2>stderr.txt ||
      fail "the one-shard prepare failed: $(cat stderr.txt)"
    [[ "$(cd out && echo *)" == "train.bin val.bin" ]] || fail "out holds $(cd out && echo *) after one shard a split"
    # And back: train.bin goes when numbered shards replace it, val too when it is split.
    "$prepare" --out out --force --shard-tokens 40 lines.txt >/dev/null 2>stderr.txt || fail "$(cat stderr.txt)"
    [[ -e out/train_00021.bin && ! -e out/train_00022.bin && -e out/val_00001.bin && ! -e out/train.bin &&
       ! -e out/val.bin ]] || fail "out holds $(cd out && echo *) after shards of 40 tokens"
    [[ "$(shards_text out/train_*.bin out/val_*.bin)" == "$(cat lines.txt)" ]] || fail "the 40-token shards lost text"
    rm -rf out
    ;;
  stale_not_shard)
    # A file under a shard's name that is no shard is the user's: --force would remove it,
    # so prepare refuses before it writes anything. The control: a real old shard goes.
    mkdir out && echo "my notes" >out/train_00007.bin
    expect_status_names() { [[ $1 -eq 2 ]] && grep -qF "$2" stderr.txt || fail "exit $1, stderr: $(cat stderr.txt)"; }
    "$prepare" --out out --force good.txt >stdout.txt 2>stderr.txt
    expect_status_names $? "out/train_00007.bin' has a shard's name but no shard's header"
    [[ "$(cat out/train_00007.bin)" == "my notes" && ! -e out/train.bin ]] || fail "the refused run changed out/"
    "$prepare" --out other --shard-tokens 10 good.txt >/dev/null && cp other/train_00001.bin out/train_00007.bin
    "$prepare" --out out --force good.txt >stdout.txt 2>stderr.txt || fail "the control failed: $(cat stderr.txt)"
    [[ "$(cd out && echo *)" == "train.bin val.bin" ]] || fail "the old shard was kept: $(cd out && echo *)"
    rm -rf out
    ;;
  shard_tokens_bad)
    expect_error "--shard-tokens 0 is outside 1..2147483647" --out out --shard-tokens 0 good.txt
    expect_error "--shard-tokens 2147483648 is outside" --out out --shard-tokens 2147483648 good.txt
    expect_error "--shard-tokens '1e6' is not a whole number" --out out --shard-tokens 1e6 good.txt
    expect_error "--shard-tokens '-5' is not a whole number" --out out --shard-tokens -5 good.txt ;;
  threads_bad)
    expect_error "--threads 0 is outside 1..1024" --out out --threads 0 good.txt
    expect_error "--threads 1025 is outside 1..1024" --out out --threads 1025 good.txt ;;
  read_bytes_bad)
    expect_error "--read-bytes 0 is outside 1..1073741824" --out out --read-bytes 0 good.txt
    expect_error "--read-bytes 99999999999999999999 is outside" --out out --read-bytes 99999999999999999999 good.txt
    expect_error "--read-bytes '' is not a whole number" --out out --read-bytes '' good.txt ;;
  read_bytes)
    # The text read a byte, or 5 bytes, at a time, encoded on one thread or three: the
    # same shards, the files' blocks in order.
    for i in $(seq 1 40); do echo "alpha beta $i"; done >a.txt
    for i in $(seq 1 30); do echo "gamma $i"; done >b.txt
    "$prepare" --out whole --threads 1 a.txt b.txt >/dev/null || fail "prepare failed"
    for b in 1 5; do
      for t in 1 3; do
        "$prepare" --out "by_${b}_$t" --read-bytes $b --threads $t a.txt b.txt >/dev/null ||
          fail "prepare --read-bytes $b --threads $t failed"
        cmp -s whole/train.bin "by_${b}_$t/train.bin" && cmp -s whole/val.bin "by_${b}_$t/val.bin" ||
          fail "--read-bytes $b --threads $t wrote other shards"
      done
    done
    # (.lock, like a run directory's, is where one prepare at a time holds the directory.)
    [[ -z "$(ls -A whole | grep -v '^\(train\|val\)\.bin$\|^\.lock$')" ]] ||
      fail "the spool was left behind: $(ls -A whole)" ;;
  locked)
    # One prepare at a time in a directory: while this shell holds its lock (flock(1)
    # takes the same flock(2) lock), a prepare is refused and changes nothing; the
    # control runs once the lock is let go.
    "$prepare" --out out good.txt >/dev/null || fail "the first prepare failed"
    cp out/train.bin first_train.bin
    exec 9>>out/.lock
    flock -n 9 || fail "the test could not take the lock"
    "$prepare" --out out --force good.txt >stdout.txt 2>stderr.txt
    status=$?
    exec 9>&-
    [[ $status -eq 2 ]] && grep -qF "out' is in use by another job" stderr.txt ||
      fail "a locked --out: exit $status, $(cat stderr.txt)"
    cmp -s out/train.bin first_train.bin || fail "the refused run changed out/train.bin"
    "$prepare" --out out --force good.txt >/dev/null 2>stderr.txt || fail "the control failed: $(cat stderr.txt)"
    rm -rf out ;;
  interrupted)
    # Stopped (SIGTERM, as Ctrl-C's SIGINT or a closed terminal's SIGHUP) while the text
    # is encoded: the spool (2 bytes a token) is removed, the old dataset stays. A signal
    # the run was started to ignore (nohup's SIGHUP) stays ignored. The text is read a
    # byte at a time so that the run lasts; it is signalled once its spool exists.
    "$prepare" --out out good.txt >/dev/null || fail "the first prepare failed"
    cp out/train.bin first_train.bin
    head -c 20000000 /dev/zero | tr '\0' 'a' >long.txt
    (trap '' HUP; exec "$prepare" --out out --force --read-bytes 1 long.txt) >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 1 200); do compgen -G "out/tokens.tmp.*" >/dev/null && break; sleep 0.05; done
    compgen -G "out/tokens.tmp.*" >/dev/null || fail "no spool appeared"
    kill -HUP $pid
    sleep 0.2
    kill -0 $pid 2>/dev/null || fail "SIGHUP, ignored when the run started, ended it"
    kill -TERM $pid
    wait $pid
    status=$?
    [[ $status -eq 143 ]] || fail "the stopped run exited $status, not 143 (SIGTERM)"
    ! compgen -G "out/tokens.tmp.*" >/dev/null || fail "the spool was left: $(ls out)"
    cmp -s out/train.bin first_train.bin || fail "the interrupted run changed out/train.bin"
    rm -rf out ;;
  made_dirs)
    # A run that fails after it made --out removes it, and the parents it made, again,
    # however the path is spelled. (One byte of text is found too little once it is
    # encoded, after the directory is made.)
    printf 'x' >one.txt
    for out in new/a/b pa/../pb; do
      "$prepare" --out $out one.txt >stdout.txt 2>stderr.txt
      status=$?
      [[ $status -eq 2 ]] && grep -qF "too little text" stderr.txt || fail "--out $out: exit $status, $(cat stderr.txt)"
      [[ ! -e new && ! -e pa && ! -e pb ]] || fail "the failed run with --out $out left $(ls -d new pa pb 2>/dev/null)"
    done
    # --out a link to nowhere is named as one; DIR/ is DIR in what is printed.
    ln -s nowhere linked_out
    expect_error "--out 'linked_out' is a symbolic link to 'nowhere', which does not exist" --out linked_out good.txt
    [[ ! -e nowhere ]] || fail "the link's target was made"
    "$prepare" --out slash/ --shard-tokens 10 good.txt >stdout.txt 2>stderr.txt || fail "$(cat stderr.txt)"
    grep -qF "train_data=slash/train_*.bin" stdout.txt || fail "DIR/ printed as is: $(cat stdout.txt)"
    rm -rf slash ;;
  glob_strays)
    # A file of the user's that the printed glob matches is named in a warning.
    mkdir out && echo "mine" >out/train_orig.bin
    "$prepare" --out out --shard-tokens 10 good.txt >stdout.txt 2>stderr.txt || fail "$(cat stderr.txt)"
    grep -qF "warning: out/train_orig.bin matches train_*.bin but is no shard of this dataset" stdout.txt ||
      fail "no warning: $(cat stdout.txt)"
    grep -qF "warning: out/train_0000" stdout.txt && fail "a shard of the dataset was warned of"
    rm -rf out ;;
  tmp_names_untouched)
    # Files of the user's under the names a writer might pick for its temporary files (one
    # of them a symlink to another file) are neither truncated nor written through: the
    # shards are written under names of prepare's own.
    mkdir out
    echo "my notes" >out/train.bin.tmp
    echo "precious" >precious.txt
    ln -s ../precious.txt out/val.bin.tmp
    "$prepare" --out out good.txt >/dev/null 2>stderr.txt || fail "prepare failed: $(cat stderr.txt)"
    [[ "$(cat out/train.bin.tmp)" == "my notes" ]] || fail "out/train.bin.tmp was changed"
    [[ "$(cat precious.txt)" == "precious" ]] || fail "precious.txt was written through out/val.bin.tmp"
    [[ -f out/val.bin && ! -L out/val.bin ]] || fail "out/val.bin is not a file of its own"
    [[ "$(shard_text out/train.bin)$(shard_text out/val.bin)" == "$(cat good.txt)" ]] ||
      fail "the shards do not hold good.txt"
    rm -rf out/train.bin out/val.bin
    ;;
  help)
    "$prepare" --help >stdout.txt 2>stderr.txt
    status=$?
    [[ $status -eq 0 ]] || fail "--help exited $status"
    grep -q "usage: prepare" stdout.txt || fail "--help printed no usage"
    # --help wins wherever it stands, beside a flag that would be refused.
    "$prepare" --frobnicate --help >stdout.txt 2>stderr.txt || fail "--frobnicate --help exited $?"
    grep -q "usage: prepare" stdout.txt || fail "--frobnicate --help printed no usage"
    ;;
  round_trip)
    # Two files, concatenated in the order given, split into train + val.
    for i in $(seq 1 40); do echo "alpha $i"; done >a.txt
    for i in $(seq 1 40); do echo "beta $i"; done >b.txt
    "$prepare" --out out --val-fraction 0.2 a.txt b.txt >stdout.txt 2>stderr.txt
    status=$?
    cat stdout.txt stderr.txt
    [[ $status -eq 0 ]] || fail "prepare exited $status"
    shard_text out/train.bin >train.txt
    shard_text out/val.bin >val.txt
    cat a.txt b.txt >expected.txt
    cat train.txt val.txt | cmp -s - expected.txt || fail "train + val != a.txt + b.txt"
    [[ -s val.txt ]] || fail "val is empty"
    total=$(stat -c %s expected.txt)
    train_bytes=$(stat -c %s out/train.bin)
    val_bytes=$(stat -c %s out/val.bin)
    [[ $((train_bytes + val_bytes)) -eq $((2048 + 2 * total)) ]] ||
      fail "shard sizes $train_bytes + $val_bytes do not hold $total tokens"
    grep -q "val:" stdout.txt || fail "no token counts printed"
    ;;
  newline_cut)
    # 20 lines of 8 bytes; F = 0.23 puts the nominal cut at byte 123, inside line 16,
    # so val must start at the next line start, byte 128: the last 4 lines.
    for i in $(seq 10 29); do echo "line $i"; done >lines.txt
    "$prepare" --out out --val-fraction 0.23 lines.txt >/dev/null || fail "prepare failed"
    shard_text out/val.bin >val.txt
    tail -n 4 lines.txt | cmp -s - val.txt || fail "val is not the last 4 lines: $(cat val.txt)"
    # Without any newline after the cut, the nominal cut stays: 12 bytes, F = 0.25.
    printf 'abcdefghijkl' >oneline.txt
    "$prepare" --out out2 --val-fraction 0.25 oneline.txt >/dev/null || fail "prepare failed"
    [[ $(shard_text out2/val.bin) == "jkl" ]] || fail "val is '$(shard_text out2/val.bin)', not 'jkl'"
    ;;
  files_from)
    # --files-from LIST: LIST's files where the flag stands among the others, empty lines
    # skipped; a list that cannot be read, or that names a missing file or one given
    # already, is refused before anything is read.
    for name in a b c d; do for i in 1 2 3; do echo "$name line $i"; done >"$name.txt"; done
    printf 'b.txt\n\nc.txt\n' >list.txt
    "$prepare" --out out a.txt --files-from list.txt d.txt >stdout.txt 2>stderr.txt ||
      fail "prepare failed: $(cat stderr.txt)"
    [[ "$(shards_text out/train.bin out/val.bin)" == "$(cat a.txt b.txt c.txt d.txt)" ]] ||
      fail "the shards do not hold a, b, c, d in that order"
    rm -rf out
    expect_error "--files-from 'no_list.txt': cannot open it" --out out --files-from no_list.txt
    printf 'b.txt\nnot_there.txt\n' >list.txt
    expect_error "input 'not_there.txt': no such file" --out out --files-from list.txt
    printf './a.txt\n' >list.txt
    expect_error "input './a.txt' is given twice ('a.txt')" --out out a.txt --files-from list.txt
    : >list.txt
    expect_error "no input files given" --out out --files-from list.txt ;;
  many_files)
    # Past 100 files, a progress line every thousand and one at the end, not one a file.
    for i in $(seq 1 150); do echo "text of file $i" >"f$i.txt"; done
    "$prepare" --out out $(for i in $(seq 1 150); do echo "f$i.txt"; done) >stdout.txt 2>stderr.txt ||
      fail "prepare failed: $(cat stderr.txt)"
    grep -qx "150 of 150 files: [0-9]* tokens" stdout.txt || fail "no closing progress line: $(head -3 stdout.txt)"
    [[ $(wc -l <stdout.txt) -eq 3 ]] || fail "$(wc -l <stdout.txt) lines printed, not 3: $(head -3 stdout.txt)"
    rm -rf out ;;
  *) fail "unknown case $case_name" ;;
esac

[[ $failures -eq 0 ]] && echo "PASS: $case_name"
exit $(( failures > 0 ))
