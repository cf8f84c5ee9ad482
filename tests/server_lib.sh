# server_lib.sh: sourced by tests/test_server_*.sh. Starts `bitspark serve` on a free loopback
# port, installs the pinned npm clients (tests/node/package-lock.json) once into $BS_TMP, and
# offers ok/bad reporting. Needs BITSPARK and BS_TMP (ctest sets them) and BS_SRC.
set -u
B=${BITSPARK:?} SRC=${BS_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
T=${BS_TMP:-/tmp}/srv.$$.$RANDOM
mkdir -p "$T"
fail=0
SERVER_PIDS=()
# a sanitizer build (-O0, ASan) runs the same checks on less traffic
SANITIZED=0
grep -q __asan_init "$B" 2>/dev/null && SANITIZED=1
export BS_SANITIZED=$SANITIZED
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
cleanup() {
    # SIGTERM drains (in-flight requests may finish); a second one after a moment cancels them
    for p in "${SERVER_PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${SERVER_PIDS[@]}"; do
        for _ in $(seq 1 20); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill "$p" 2>/dev/null; wait "$p" 2>/dev/null
    done
    rm -rf "$T"
}
trap cleanup EXIT

# synth_model NAME ARGS...: a synthetic model cached across the tests of one build
synth_model() {
    local name=$1; shift
    local out=${BS_TMP:-/tmp}/$name.gguf
    if [ ! -s "$out" ]; then
        "$B" synth "$@" -o "$out.tmp.$$" >/dev/null 2>&1 && mv "$out.tmp.$$" "$out" || { echo "FAIL synth $name"; exit 1; }
    fi
    echo "$out"
}

# start_server VAR ARGS...: start serve with ARGS on a free port; sets $VAR to the base URL
# and ${VAR}_PID; fails the test if it does not come up within 60 s.
start_server() {
    local var=$1; shift
    local log="$T/server.$var.log"
    "$B" serve --port 0 "$@" >"$log" 2>&1 &
    local pid=$!
    SERVER_PIDS+=("$pid")
    local url=""
    for _ in $(seq 1 600); do
        url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$log" | head -1)
        [ -n "$url" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if [ -z "$url" ]; then echo "FAIL server did not start: $(cat "$log")"; exit 1; fi
    printf -v "$var" '%s' "$url"
    printf -v "${var}_PID" '%s' "$pid"
}

# node_deps: the pinned openai / playwright-core packages, installed once per build dir
node_deps() {
    NODE_DIR=${BS_TMP:-/tmp}/node-deps
    mkdir -p "$NODE_DIR"
    exec 9>"$NODE_DIR.lock"   # ctest -j: one installer at a time
    flock 9
    if [ ! -f "$NODE_DIR/node_modules/openai/package.json" ] ||
       ! cmp -s "$SRC/tests/node/package-lock.json" "$NODE_DIR/package-lock.json"; then
        mkdir -p "$NODE_DIR"
        cp "$SRC/tests/node/package.json" "$SRC/tests/node/package-lock.json" "$NODE_DIR/"
        (cd "$NODE_DIR" && npm ci --no-audit --no-fund --silent >/dev/null 2>&1) ||
            { echo "FAIL npm ci (tests/node): node, npm and the npm registry are needed"; exit 1; }
    fi
    flock -u 9
    export BS_NODE_DIR=$NODE_DIR
}

finish() {
    [ $fail -eq 0 ] && echo "all passed" || echo "some checks failed"
    exit $fail
}
