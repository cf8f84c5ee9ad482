"""Small independent GGUF reader and dequantizers (numpy), for the float64 reference in tests/.

Written from the format descriptions in ../shared/reference (prism-fork.md §1-2), not from the C
code, so that it is a second, independent reading of the files.

    g = GGUF(path)
    g.meta['qwen35.block_count']          -> python scalar / str / list
    g.tensors['blk.0.attn_qkv.weight']    -> TensorInfo(name, ne, type, offset, nbytes)
    g.get('blk.0.attn_qkv.weight')        -> float64 numpy array, shape reversed from ne
                                             (ne = {in, out} gives shape (out, in))
"""
import struct
import numpy as np

GGUF_MAGIC = b'GGUF'

# ggml type id -> (name, elements per block, bytes per block). Id 42 is ambiguous (Q2_0 with
# 128-element 34-byte blocks in the prism fork, 64-element 18-byte blocks upstream) and is told
# apart by the tensor's byte size in _resolve_q2_0.
F32, F16, Q4_1, Q8_0, Q6_K, BF16, Q1_0, Q2_0, PTQ1_0 = 0, 1, 3, 8, 14, 30, 41, 42, 143
TYPES = {
    F32: ('F32', 1, 4),
    F16: ('F16', 1, 2),
    BF16: ('BF16', 1, 2),
    Q8_0: ('Q8_0', 32, 34),
    Q4_1: ('Q4_1', 32, 20),
    Q6_K: ('Q6_K', 256, 210),
    Q1_0: ('Q1_0', 128, 18),
    PTQ1_0: ('PTQ1_0', 128, 28),
}
Q2_0_G128 = ('Q2_0', 128, 34)
Q2_0_G64 = ('Q2_0_G64', 64, 18)

# GGUF metadata value types
_SCALARS = {0: '<B', 1: '<b', 2: '<H', 3: '<h', 4: '<I', 5: '<i', 6: '<f', 7: '<?',
            10: '<Q', 11: '<q', 12: '<d'}
_STRING, _ARRAY = 8, 9


class GGUFError(Exception):
    pass


class TensorInfo:
    def __init__(self, name, ne, type_id, offset):
        self.name, self.ne, self.type_id, self.offset = name, ne, type_id, offset
        self.n_elements = int(np.prod(ne, dtype=np.int64))
        self.fmt = None      # (name, block elements, block bytes), set once sizes are known
        self.nbytes = None

    def __repr__(self):
        return 'TensorInfo(%s, ne=%s, %s)' % (self.name, self.ne, self.fmt[0] if self.fmt else self.type_id)


class _Cursor:
    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def take(self, n):
        if n < 0 or self.pos + n > len(self.buf):
            raise GGUFError('truncated file at offset %d' % self.pos)
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def unpack(self, fmt):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self):
        n = self.unpack('<Q')
        return bytes(self.take(n)).decode('utf-8', errors='replace')

    def value(self, vtype, depth=0):
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY and depth < 4:
            etype, n = self.unpack('<I'), self.unpack('<Q')
            if etype in _SCALARS:
                size = struct.calcsize(_SCALARS[etype])
                raw = self.take(n * size)
                return list(np.frombuffer(raw, dtype=np.dtype(_SCALARS[etype])).tolist())
            return [self.value(etype, depth + 1) for _ in range(n)]
        raise GGUFError('bad metadata value type %d' % vtype)


class GGUF:
    def __init__(self, path):
        with open(path, 'rb') as f:
            self.buf = memoryview(f.read())
        c = _Cursor(self.buf)
        if bytes(c.take(4)) != GGUF_MAGIC:
            raise GGUFError('%s: not a GGUF file' % path)
        self.version = c.unpack('<I')
        if self.version not in (2, 3):
            raise GGUFError('unsupported GGUF version %d' % self.version)
        n_tensors, n_kv = c.unpack('<Q'), c.unpack('<Q')
        self.meta = {}
        for _ in range(n_kv):
            key = c.string()
            self.meta[key] = c.value(c.unpack('<I'))
        self.tensors = {}
        order = []
        for _ in range(n_tensors):
            name = c.string()
            n_dims = c.unpack('<I')
            if not 1 <= n_dims <= 4:
                raise GGUFError('%s: %d dims' % (name, n_dims))
            ne = [c.unpack('<Q') for _ in range(n_dims)]
            t = TensorInfo(name, ne, c.unpack('<I'), c.unpack('<Q'))
            self.tensors[name] = t
            order.append(t)
        align = int(self.meta.get('general.alignment', 32))
        self.data_offset = (c.pos + align - 1) // align * align
        self._sizes(order)

    def _sizes(self, order):
        """Byte size of each tensor. Q2_0 (id 42) has two layouts of the same id; a file uses one,
        so pick the layout whose sizes fit the gaps between consecutive tensors (data of the next
        tensor starts at the next aligned offset) for every id-42 tensor of the file."""
        by_off = sorted(order, key=lambda t: t.offset)
        data_len = len(self.buf) - self.data_offset
        gaps = {}
        for i, t in enumerate(by_off):
            end = by_off[i + 1].offset if i + 1 < len(by_off) else data_len
            gaps[t.name] = (end - t.offset, i + 1 == len(by_off))
        q2 = [t for t in order if t.type_id == Q2_0]
        q2_fmt = None
        if q2:
            fits = [f for f in (Q2_0_G128, Q2_0_G64) if all(self._fits(t, f, *gaps[t.name]) for t in q2)]
            if len(fits) != 1:
                raise GGUFError('Q2_0 tensor sizes match %s layout' % ('both the 128- and the 64-group' if fits else 'neither'))
            q2_fmt = fits[0]
        for t in order:
            if t.type_id == Q2_0:
                t.fmt = q2_fmt
            elif t.type_id in TYPES:
                t.fmt = TYPES[t.type_id]
            else:
                raise GGUFError('%s: unsupported ggml type %d' % (t.name, t.type_id))
            _, be, bb = t.fmt
            if t.ne[0] % be:
                raise GGUFError('%s: row of %d not a multiple of block %d' % (t.name, t.ne[0], be))
            t.nbytes = t.n_elements // be * bb
            if t.nbytes > gaps[t.name][0]:
                raise GGUFError('%s: data runs past the next tensor / end of file' % t.name)

    def _fits(self, t, fmt, avail, last):
        _, be, bb = fmt
        if t.ne[0] % be:
            return False
        size = t.n_elements // be * bb
        align = int(self.meta.get('general.alignment', 32))
        return size <= avail and (last or avail - size < align)

    def raw(self, name):
        t = self.tensors[name]
        start = self.data_offset + t.offset
        return np.frombuffer(self.buf[start:start + t.nbytes], dtype=np.uint8)

    def get(self, name):
        """Dequantized tensor as float64, numpy shape = reversed ne."""
        t = self.tensors[name]
        flat = dequantize(t.fmt[0], self.raw(name), t.n_elements)
        return flat.reshape(tuple(reversed(t.ne)))

    def type_name(self, name):
        return self.tensors[name].fmt[0]


def _f16(b):
    return b.copy().view('<f2').astype(np.float64)


def dequantize(fmt, raw, n):
    """raw uint8 bytes -> float64 vector of n elements."""
    if fmt == 'F32':
        return raw.view('<f4').astype(np.float64)
    if fmt == 'F16':
        return raw.view('<f2').astype(np.float64)
    if fmt == 'BF16':
        u = raw.view('<u2').astype(np.uint32) << 16
        return u.view('<f4').astype(np.float64)
    if fmt == 'Q8_0':
        b = raw.reshape(-1, 34)
        return (_f16(b[:, 0:2]) * b[:, 2:].view(np.int8).astype(np.float64)).reshape(n)
    if fmt == 'Q4_1':
        b = raw.reshape(-1, 20)
        d, m, qs = _f16(b[:, 0:2]), _f16(b[:, 2:4]), b[:, 4:]
        q = np.concatenate([qs & 15, qs >> 4], axis=1).astype(np.float64)   # j and j+16
        return (q * d + m).reshape(n)
    if fmt == 'Q1_0':
        b = raw.reshape(-1, 18)
        d = _f16(b[:, 0:2])
        bits = np.unpackbits(b[:, 2:], axis=1, bitorder='little').astype(np.float64)
        return (d * (2.0 * bits - 1.0)).reshape(n)
    if fmt in ('Q2_0', 'Q2_0_G64'):
        bb = 34 if fmt == 'Q2_0' else 18
        b = raw.reshape(-1, bb)
        d, qs = _f16(b[:, 0:2]), b[:, 2:]
        # weight j: bits 2*(j%4).. of qs[j/4]
        codes = np.stack([(qs >> (2 * s)) & 3 for s in range(4)], axis=2).reshape(b.shape[0], -1)
        return (d * (codes.astype(np.float64) - 1.0)).reshape(n)
    if fmt == 'Q6_K':
        return _dequant_q6_k(raw.reshape(-1, 210)).reshape(n)
    if fmt == 'PTQ1_0':
        return _dequant_ptq1_0(raw.reshape(-1, 28)).reshape(n)
    raise GGUFError('no dequantizer for %s' % fmt)


def _dequant_ptq1_0(b):
    """PrismML's PTQ1_0: {u8 qs[24]; u8 qh[2]; f16 d} per 128 weights, value (trit - 1) * d.
    A byte q stores v = t0*81 + t1*27 + t2*9 + t3*3 + t4 (qh: four trits, times 3) as
    ceil(v * 256 / 243), so v = floor(q * 243 / 256) and the trits are v's base-3 digits, most
    significant first (the same trits as ggml's ((u8)(q * 3^n) * 3) >> 8, for every byte).
    Trit n of qs[m] is element 16n + m (m < 16), of qs[16 + m] element 80 + 8n + m (m < 8), of
    qh[h] element 120 + 2n + h (n < 4)."""
    v = (b[:, 0:26].astype(np.int64) * 243) >> 8
    digits = np.stack([(v // 3 ** (4 - k)) % 3 for k in range(5)], axis=2)    # (blocks, 26, trit)
    nb = b.shape[0]
    t = np.concatenate([digits[:, 0:16, :].transpose(0, 2, 1).reshape(nb, 80),
                        digits[:, 16:24, :].transpose(0, 2, 1).reshape(nb, 40),
                        digits[:, 24:26, 0:4].transpose(0, 2, 1).reshape(nb, 8)], axis=1)
    return _f16(b[:, 26:28]) * (t.astype(np.float64) - 1.0)


def _dequant_q6_k(b):
    ql, qh = b[:, 0:128].astype(np.int32), b[:, 128:192].astype(np.int32)
    sc = b[:, 192:208].view(np.int8).astype(np.float64)
    d = _f16(b[:, 208:210])
    out = np.empty((b.shape[0], 256))
    for half in range(2):
        L, H, S = ql[:, 64 * half:64 * half + 64], qh[:, 32 * half:32 * half + 32], sc[:, 8 * half:8 * half + 8]
        lo, hi = L[:, 0:32], L[:, 32:64]
        q1 = ((lo & 15) | (((H >> 0) & 3) << 4)) - 32
        q2 = ((hi & 15) | (((H >> 2) & 3) << 4)) - 32
        q3 = ((lo >> 4) | (((H >> 4) & 3) << 4)) - 32
        q4 = ((hi >> 4) | (((H >> 6) & 3) << 4)) - 32
        is_ = np.arange(32) // 16                          # scale index within the 128-half
        base = 128 * half
        for k, q in enumerate((q1, q2, q3, q4)):
            out[:, base + 32 * k: base + 32 * k + 32] = d * S[:, is_ + 2 * k] * q
    return out


if __name__ == '__main__':
    import sys
    g = GGUF(sys.argv[1])
    for k, v in g.meta.items():
        if isinstance(v, list) and len(v) > 8:
            v = '[%d items]' % len(v)
        print('%s = %r' % (k, v))
    for t in g.tensors.values():
        print(t.name, t.ne, t.fmt[0], t.offset, t.nbytes)
