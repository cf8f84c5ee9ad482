# cli_lib.sh: sourced by the CLI test scripts as `source "$(dirname "$0")/cli_lib.sh" NAME`.
# Sets B (the bitspark binary), a scratch directory T (removed at exit) and fail=0, and defines
# ok / bad, which print a check's result (bad also records the failure in $fail), and
# expect_error NAME PATTERN CMD... (a clean failure: non-zero exit, no signal, PATTERN on stderr).
set -u
B=${BITSPARK:?} T=${BS_TMP:-/tmp}/$1.$$
mkdir -p "$T"
trap 'rm -rf "$T"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
expect_error() {  # expect_error NAME PATTERN CMD...: non-zero exit and PATTERN on stderr
    local name=$1 pat=$2; shift 2
    "$@" >"$T/out" 2>"$T/err" </dev/null; local rc=$?
    if [ $rc -eq 0 ] || [ $rc -gt 128 ] || ! grep -q -- "$pat" "$T/err"; then
        bad "$name: rc=$rc stderr=[$(cat "$T/err")]"
    else ok "$name"; fi
}
