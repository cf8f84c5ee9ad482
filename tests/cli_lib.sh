# cli_lib.sh: sourced by the CLI test scripts as `source "$(dirname "$0")/cli_lib.sh" NAME`.
# Sets B (the bitspark binary), a scratch directory T (removed at exit) and fail=0, and defines
# ok / bad, which print a check's result (bad also records the failure in $fail).
set -u
B=${BITSPARK:?} T=${BS_TMP:-/tmp}/$1.$$
mkdir -p "$T"
trap 'rm -rf "$T"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
