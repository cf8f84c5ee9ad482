"""gguf_same.py A.gguf B.gguf [--meta] [--ignore-key K]...: exit 0 iff every tensor of B is in A with
the same type, shape and bytes (and A has no others); with --meta also the same metadata values.
Prints what differs. Used by the quantize / convert tests."""
import sys
import os

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_reader import GGUF  # noqa: E402

args = sys.argv[1:]
meta = '--meta' in args
ignore = {args[i + 1] for i, a in enumerate(args) if a == '--ignore-key'}
paths = [a for i, a in enumerate(args) if not a.startswith('--') and (i == 0 or args[i - 1] != '--ignore-key')]
a, b = GGUF(paths[0]), GGUF(paths[1])
bad = []
for n, t in b.tensors.items():
    u = a.tensors.get(n)
    if u is None or u.type_id != t.type_id or list(u.ne) != list(t.ne) or bytes(a.raw(n)) != bytes(b.raw(n)):
        bad.append(n)
bad += [n for n in a.tensors if n not in b.tensors]
if meta:
    bad += ['meta:' + k for k in set(a.meta) | set(b.meta) if k not in ignore and a.meta.get(k) != b.meta.get(k)]
print('%s vs %s: %d tensors, %d differ %s' % (os.path.basename(paths[0]), os.path.basename(paths[1]),
                                              len(b.tensors), len(bad), bad[:6]))
sys.exit(1 if bad else 0)
