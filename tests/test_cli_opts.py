#!/usr/bin/env python3
"""The option table walked through the binary: every option of every command that
`bitspark help --options` lists parses (BITSPARK_OPTS_CHECK=1 stops each command right after
parsing), appears under every spelling in that command's help, and refuses a value out of its
range (or, for text values, a missing one). Then the drifts the table removed: serve takes what
run takes with the same ranges, --seed -1 is random everywhere, drafter options need -md."""
import os
import re
import subprocess
import sys

B = os.environ.get("BITSPARK")
if not B or not os.path.exists(B):
    print("skipped: BITSPARK not set")
    sys.exit(77)

ARGV = {"antidoom-mine": ["antidoom", "mine"], "antidoom-eval": ["antidoom", "eval"], "lora": ["lora", "merge"],
        "bench-spec": ["bench", "--spec"], "bench-mmproj": ["bench", "--mmproj", "x"],
        "bench-grammar": ["bench", "--grammar", "x"]}
HELP = {"antidoom-mine": "antidoom", "antidoom-eval": "antidoom", "bench-spec": "bench", "bench-mmproj": "bench",
        "bench-grammar": "bench"}
fails = 0


def bad(msg):
    global fails
    fails += 1
    print("FAIL " + msg)


def run(args, check=True):
    env = dict(os.environ)
    if check:
        env["BITSPARK_OPTS_CHECK"] = "1"
    else:
        env.pop("BITSPARK_OPTS_CHECK", None)
    p = subprocess.run([B] + args, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=60)
    return p.returncode, p.stdout, p.stderr


rows = []
for line in run(["help", "--options"], check=False)[1].splitlines():
    cmd, names, typ, lo, hi, flo, fhi, choices, example = line.split("\t")
    rows.append((cmd, [n.strip() for n in names.split(",")], typ, int(lo), int(hi), float(flo), float(fhi),
                 choices or example))
cmds = {r[0] for r in rows}
# every command that takes options is in the table (devices takes none)
want = {"run", "chat", "serve", "antidoom-mine", "antidoom-eval", "logits", "draft-logits", "lora", "mmproj-embed",
        "tokenize", "detokenize", "synth", "inspect", "convert", "quantize", "bench", "bench-spec", "bench-mmproj",
        "bench-grammar"}
if want - set(cmds):
    bad(f"commands missing from the table: {sorted(want - set(cmds))}")
if len(rows) < 100:
    bad(f"the table lists {len(rows)} options of {len(cmds)} commands")

helps = {c: run(["help", HELP.get(c, ARGV.get(c, [c])[0])], check=False)[1] for c in cmds | want}


def valid(typ, lo, hi, flo, fhi, choices):
    if typ in ("int", "int|auto"):
        return [str(lo)]
    if typ == "float":
        return [str(flo if flo or fhi else 0.5)]
    if typ == "choice":
        return [choices.split("|")[-1]]
    if typ == "str2":
        return ["x", "1"]
    return [] if typ == "flag" else [choices or "x"]   # choices: the row's example


def invalid(typ, lo, hi, flo, fhi, choices):
    """(value, what the error must say) pairs."""
    if typ in ("int", "int|auto"):
        out = [(str(lo - 1), "out of range"), ("1x", "not an integer")]
        return out + ([(str(hi + 1), "out of range")] if hi < 2**63 - 1 else [])   # else: past a long
    if typ == "float":
        out = [("x1", "not a number")]
        if flo or fhi:
            out.append((str(fhi + 1), "out of range"))
        return out
    if typ == "choice":
        return [("bogus", "expected")]
    return []


n_checked = 0
for cmd, names, typ, lo, hi, flo, fhi, choices in rows:
    pre = ARGV.get(cmd, [cmd])
    for name in names:
        n_checked += 1
        if not re.search(r"(^|[\s,])" + re.escape(name) + r"([\s,]|$)", helps[cmd], re.M):
            bad(f"{cmd}: {name} is not in its help")
        rc, out, err = run(pre + [name] + valid(typ, lo, hi, flo, fhi, choices))
        if rc != 0 or "options ok" not in out:
            bad(f"{cmd} {name} {valid(typ, lo, hi, flo, fhi, choices)}: rc={rc} {err.strip()}")
        for v, why in invalid(typ, lo, hi, flo, fhi, choices):
            rc, out, err = run(pre + [name, v])
            if rc == 0 or why not in err or name not in err:
                bad(f"{cmd} {name} {v}: accepted or unclear (rc={rc}): {err.strip()}")
        if typ not in ("flag",):
            rc, out, err = run(pre + [name])
            if rc == 0 or "needs" not in err:
                bad(f"{cmd} {name} without a value: rc={rc} {err.strip()}")
    rc, out, err = run(pre + ["--no-such-option"])
    if rc == 0 or "unknown option" not in err:
        bad(f"{cmd}: an unknown option is not refused: {err.strip()}")
print(f"ok   {n_checked} option spellings of {len(cmds)} commands: parse, in help, out-of-range refused")

# the drifts one table removed
same = ["-c 8", "-t 1", "--draft-max 4", "--draft-no-conf", "--draft-share-embeddings", "-q", "--seed -1",
        "--ctx-size 8", "--draft 2", "--device auto"]
for c in ("run", "chat", "serve"):
    for a in same:
        rc, out, err = run([c] + a.split())
        if rc != 0:
            bad(f"{c} {a}: {err.strip()}")
for c in ("run", "serve", "chat"):
    rc, out, err = run([c, "-m", "x.gguf", "-p", "hi", "--draft-max", "2"] if c == "run" else [c, "-m", "x.gguf", "--draft-max", "2"], check=False)
    if rc == 0 or "need a drafter" not in err:
        bad(f"{c} --draft-max without -md: rc={rc} {err.strip()}")
for c in ("logits", "draft-logits", "lora", "mmproj-embed", "antidoom-mine"):
    h = helps[c]
    if "-o, --output, --out" not in h:
        bad(f"{c}: -o's long form is not --output (alias --out)")
if not re.search(r"--threads N\s+threads \(all cores\)", helps["logits"]):
    bad("logits -t does not default to all cores")
if "--device D" not in helps["draft-logits"] or "(auto)" not in helps["draft-logits"]:
    bad("draft-logits --device does not default to auto")
rc, out, err = run(["synth", "--preset", "mmproj-tiny", "--dry-run"], check=False)
if rc != 0 or "# tensors" not in out:
    bad(f"synth --preset mmproj-tiny --dry-run: rc={rc} {err.strip()}")
print("ok   serve takes run's options and ranges; --seed -1; drafter options need -md; one -o; defaults")

if fails:
    print(f"{fails} failure(s)")
    sys.exit(1)
print("all ok")
