# Sourced by the tests of this directory, which define fail() and count failures.
# refused NAME NEEDLE CMD...: CMD must exit 2 (bad input) with NEEDLE in its output.
refused() {
  local name=$1 needle=$2 status=0
  shift 2
  "$@" > out.txt 2>&1 || status=$?
  if [ "$status" -ne 2 ]; then fail "[$name]: exit status $status, expected 2"; sed 's/^/    /' out.txt | tail -3
  elif ! grep -qF -- "$needle" out.txt; then fail "[$name]: no '$needle' in:"; sed 's/^/    /' out.txt | head -3
  else echo "ok   [$name]: $(grep -F -m1 -- "$needle" out.txt)"; fi
}
