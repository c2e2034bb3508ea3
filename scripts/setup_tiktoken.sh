#!/usr/bin/env bash
# Fetches, from PyPI, what the comparison of this project's GPT-2 tokenizer with
# tiktoken needs (tests/tokenizer/vs_tiktoken.sh, and tokenizer_unicode_table, which
# reads tiktoken's letter and number classes), into third_party_local/pypi/ (ignored
# by git): a virtual environment with tiktoken, and GPT-2's ranks, r50k_base.tiktoken,
# as the openai-whisper package ships them (whisper/assets/gpt2.tiktoken; tiktoken
# itself downloads them from a host that is not a package registry). Only the file is
# taken from the package; nothing of it is installed.
#
#   scripts/setup_tiktoken.sh            logs the directory; a no-op when present
#
# Needs python3-venv (scripts/setup.sh installs it with the test packages) and PyPI.
# Without them it warns and exits 0: the two tests then report "skipped".
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
takes_no_arguments "$@"
dir="$GPT_ROOT/third_party_local/pypi"
python="$dir/venv/bin/python"
ranks="$dir/gpt2.tiktoken"
if [[ -x "$python" && -f "$ranks" ]] && "$python" -c 'import tiktoken' 2> /dev/null; then
  log "tiktoken and GPT-2's ranks: present in ${dir#"$GPT_ROOT"/}"
  exit 0
fi
skip() {
  warn "$* (the tokenizer's comparison with tiktoken will report skipped)"
  exit 0
}
log "fetching tiktoken and GPT-2's ranks from PyPI into ${dir#"$GPT_ROOT"/}"
rm -rf "$dir" && mkdir -p "$dir"
/usr/bin/python3 -m venv "$dir/venv" > /dev/null 2>&1 || skip "cannot make a virtual environment (python3-venv missing?)"
"$dir/venv/bin/pip" install -q --disable-pip-version-check tiktoken==0.14.0 > "$dir/pip.log" 2>&1 ||
  skip "pip install tiktoken failed ($(tail -1 "$dir/pip.log"))"
"$dir/venv/bin/pip" download -q --disable-pip-version-check --no-deps --no-binary :all: -d "$dir/download" \
  openai-whisper==20250625 >> "$dir/pip.log" 2>&1 || skip "pip download openai-whisper failed ($(tail -1 "$dir/pip.log"))"
tar -xzf "$dir"/download/openai_whisper-20250625.tar.gz -O openai_whisper-20250625/whisper/assets/gpt2.tiktoken \
  > "$ranks.tmp" || skip "the openai-whisper package has no whisper/assets/gpt2.tiktoken"
mv "$ranks.tmp" "$ranks"
rm -rf "$dir/download"
log "tiktoken $("$python" -c 'import tiktoken; print(tiktoken.__version__)' 2> /dev/null || echo '?') and $(wc -l < "$ranks") ranks in ${dir#"$GPT_ROOT"/}"
