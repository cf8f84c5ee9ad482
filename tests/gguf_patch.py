"""gguf_patch.py: make hostile variants of a good GGUF for the input-checking tests.

    gguf_patch.py alpha IN OUT VALUE          adapter.lora.alpha (f32) set to VALUE ("nan", "inf", 1.5)
    gguf_patch.py key-bytes IN OUT KEY HEX    the metadata key KEY's name overwritten from its
                                              start with the bytes HEX (same length, in place)
    gguf_patch.py tensor-type IN OUT NAME ID  tensor NAME's ggml type set to ID (same element size)
    gguf_patch.py add-tokens IN OUT N         N more tokens ("zz000000".. names; N a multiple of 8) in tokenizer.ggml.tokens
                                              (and token_type), the header kept aligned

Every edit keeps the file's structure valid GGUF: the point is a file a parser accepts whose
content is wrong, not a corrupt one (fuzzing covers those).
"""
import struct
import sys

_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9


class Walk:
    """Positions of the header's parts: kv[key] = (key start, value type, value start, end),
    tensors[name] = (position of the type field), header end."""

    def __init__(self, buf):
        self.buf, self.pos = buf, 4 + 4
        n_tensors, n_kv = self.u('<Q'), self.u('<Q')
        self.kv, self.tensors = {}, {}
        for _ in range(n_kv):
            k0 = self.pos
            key = self.string()
            vt = self.u('<I')
            v0 = self.pos
            self.skip(vt)
            self.kv[key] = (k0, vt, v0, self.pos)
        for _ in range(n_tensors):
            name = self.string()
            nd = self.u('<I')
            self.pos += 8 * nd
            self.tensors[name] = self.pos
            self.pos += 4 + 8
        self.end = self.pos

    def u(self, fmt):
        v = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.u('<Q')
        s = bytes(self.buf[self.pos:self.pos + n]).decode('utf-8', 'replace')
        self.pos += n
        return s

    def skip(self, vt):
        if vt in _SCALAR:
            self.pos += _SCALAR[vt]
        elif vt == _STRING:
            n = self.u('<Q')   # (read before the sum: `pos += u()` would add to the old pos)
            self.pos += n
        elif vt == _ARRAY:
            et, n = self.u('<I'), self.u('<Q')
            for _ in range(n):
                self.skip(et)
        else:
            raise SystemExit('bad value type %d' % vt)


def add_tokens(buf, w, n):
    align = 32
    names = [b'zz%06d' % i for i in range(n)]   # 16 bytes an entry (and 4 of type): N a multiple of 8 keeps 32
    k0, vt, v0, end = w.kv['tokenizer.ggml.tokens']
    new_tok = b''.join(struct.pack('<Q', len(s)) + s for s in names)
    ty = w.kv.get('tokenizer.ggml.token_type')
    new_ty = struct.pack('<%di' % n, *([1] * n)) if ty else b''
    pad = (-(len(new_tok) + len(new_ty))) % align
    if pad:   # the data section must stay where the header's alignment puts it
        raise SystemExit('choose N so that the added bytes are a multiple of %d (they are %d)' % (align, len(new_tok) + len(new_ty)))
    out = bytearray(buf)
    edits = [(end, new_tok, v0 + 4)]
    if ty:
        edits.append((ty[3], new_ty, ty[2] + 4))
    for at, data, count_at in sorted(edits, reverse=True):   # back to front: earlier offsets hold
        out[at:at] = data
        struct.pack_into('<Q', out, count_at, struct.unpack_from('<Q', out, count_at)[0] + n)
    return out


def main(argv):
    op, src, dst = argv[1], argv[2], argv[3]
    buf = bytearray(open(src, 'rb').read())
    w = Walk(buf)
    if op == 'alpha':
        k0, vt, v0, end = w.kv['adapter.lora.alpha']
        struct.pack_into('<f', buf, v0, float(argv[4]))
    elif op == 'key-bytes':
        k0 = w.kv[argv[4]][0]
        raw = bytes.fromhex(argv[5])
        buf[k0 + 8:k0 + 8 + len(raw)] = raw
    elif op == 'tensor-type':
        struct.pack_into('<I', buf, w.tensors[argv[4]], int(argv[5]))
    elif op == 'add-tokens':
        buf = add_tokens(buf, w, int(argv[4]))
    else:
        raise SystemExit('unknown operation ' + op)
    open(dst, 'wb').write(buf)


if __name__ == '__main__':
    main(sys.argv)
