"""Minimal GGUF v3 writer (numpy) for the trained models: metadata of the usual value types and
tensors in F32, F16, BF16, Q1_0 (type 41: 128-element blocks of {fp16 d, 16 bytes of sign bits,
LSB first; bit set = +d, clear = -d}) or Q2_0 (type 42, PrismML's legacy group-128 layout, the
one bitspark's src/quant_q2_0.c reads: 34-byte blocks of {fp16 d = max|w|, 32 bytes of 2-bit
codes c = round(w/d) + 1, weight j in bits 2*(j%4) of byte j/4}; code c means (c-1)*d).

    w = GGUFWriter()
    w.add('general.architecture', 'qwen35')          # type picked from the python value
    w.add('qwen35.rope.dimension_sections', [2, 2, 2, 0], 'i32')
    w.tensor('token_embd.weight', array, 'q1_0')     # array shape (out, in) -> ne {in, out}
    w.write(path)
"""
import struct
import numpy as np

F32, F16, BF16, Q1_0, Q2_0 = 0, 1, 30, 41, 42
ALIGN = 32
_VT = {'u8': 0, 'i8': 1, 'u16': 2, 'i16': 3, 'u32': 4, 'i32': 5, 'f32': 6, 'bool': 7,
       'str': 8, 'arr': 9, 'u64': 10, 'i64': 11, 'f64': 12}
_FMT = {'u8': '<B', 'i8': '<b', 'u16': '<H', 'i16': '<h', 'u32': '<I', 'i32': '<i', 'f32': '<f',
        'bool': '<?', 'u64': '<Q', 'i64': '<q', 'f64': '<d'}


def _s(x):
    b = x.encode('utf-8')
    return struct.pack('<Q', len(b)) + b


def quantize_q1_0(w):
    """Rows of w (out, in) -> Q1_0 bytes. d = mean |w| of each 128-group, stored as fp16; a
    weight >= 0 becomes +d. This is exactly what QAT's forward uses (model.binarize)."""
    out, n = w.shape
    assert n % 128 == 0, 'Q1_0 rows must be a multiple of 128'
    g = w.reshape(out, n // 128, 128).astype(np.float32)
    d = np.abs(g).mean(axis=2).astype(np.float16)
    bits = np.packbits((g >= 0).astype(np.uint8), axis=2, bitorder='little')   # (out, nb, 16)
    blk = np.concatenate([d.view(np.uint8).reshape(out, n // 128, 2), bits], axis=2)
    return blk.tobytes()


def quantize_q2_0(w):
    """Rows of w (out, in) -> legacy Q2_0 bytes (ggml's quantize_row_q2_0_ref: d = max|w| per
    128-group as fp16, c = clamp(round(w/d) + 1, 0, 3), round half away from zero). Lossless for
    the ternary QAT weights {-s, 0, +s} with s an fp16 value (model.binarize 'q2_0')."""
    out, n = w.shape
    assert n % 128 == 0, 'Q2_0 rows must be a multiple of 128'
    g = w.reshape(out, n // 128, 128).astype(np.float32)
    amax = np.abs(g).max(axis=2)
    inv = np.where(amax > 0, 1.0 / np.where(amax > 0, amax, 1), 0).astype(np.float32)
    x = g * inv[:, :, None]
    c = np.clip(np.sign(x) * np.floor(np.abs(x) + 0.5) + 1, 0, 3).astype(np.uint8)
    c = c.reshape(out, n // 128, 32, 4)
    packed = c[..., 0] | (c[..., 1] << 2) | (c[..., 2] << 4) | (c[..., 3] << 6)
    d = amax.astype(np.float16).view(np.uint8).reshape(out, n // 128, 2)
    return np.concatenate([d, packed.astype(np.uint8)], axis=2).tobytes()


def to_bf16_bits(a):
    """float32 -> bf16 bit patterns (uint16), round to nearest even."""
    u = np.ascontiguousarray(a, dtype='<f4').view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype('<u2')


def from_bf16_bits(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


def dequantize_q1_0(w):
    """The float values a Q1_0 tensor made from w holds (fp16-rounded scale times sign)."""
    out, n = w.shape
    g = w.reshape(out, n // 128, 128).astype(np.float32)
    d = np.abs(g).mean(axis=2).astype(np.float16).astype(np.float32)
    return (np.where(g >= 0, 1.0, -1.0) * d[:, :, None]).reshape(out, n)


class GGUFWriter:
    def __init__(self):
        self.kv = []
        self.tensors = []

    def add(self, key, value, vtype=None):
        if vtype is None:
            if isinstance(value, bool):
                vtype = 'bool'
            elif isinstance(value, int):
                vtype = 'u32'
            elif isinstance(value, float):
                vtype = 'f32'
            elif isinstance(value, str):
                vtype = 'str'
            else:
                raise ValueError('give a type for %s' % key)
        self.kv.append((key, value, vtype))

    def tensor(self, name, arr, kind='f32'):
        arr = np.ascontiguousarray(arr)
        ne = list(arr.shape[::-1])
        if kind == 'f32':
            data, t = arr.astype('<f4').tobytes(), F32
        elif kind == 'f16':
            data, t = arr.astype('<f2').tobytes(), F16
        elif kind == 'bf16':
            data, t = to_bf16_bits(arr).tobytes(), BF16
        elif kind == 'q1_0':
            data, t = quantize_q1_0(arr.reshape(-1, arr.shape[-1])), Q1_0
        elif kind == 'q2_0':
            data, t = quantize_q2_0(arr.reshape(-1, arr.shape[-1])), Q2_0
        else:
            raise ValueError(kind)
        self.tensors.append((name, ne, t, data))

    def _value(self, v, vtype):
        if vtype == 'str':
            return _s(v)
        if vtype.startswith('arr_'):
            et = vtype[4:]
            head = struct.pack('<IQ', _VT[et], len(v))
            if et == 'str':
                return head + b''.join(_s(x) for x in v)
            return head + np.asarray(v, dtype=np.dtype(_FMT[et])).tobytes()
        return struct.pack(_FMT[vtype], v)

    def write(self, path):
        out = bytearray(b'GGUF' + struct.pack('<IQQ', 3, len(self.tensors), len(self.kv)))
        for k, v, vt in self.kv:
            if isinstance(v, (list, tuple)) and not vt.startswith('arr_'):
                vt = 'arr_' + vt
            out += _s(k) + struct.pack('<I', _VT['arr'] if vt.startswith('arr_') else _VT[vt])
            out += self._value(v, vt)
        off = 0
        for name, ne, t, data in self.tensors:
            out += _s(name) + struct.pack('<I', len(ne)) + struct.pack('<%dQ' % len(ne), *ne)
            out += struct.pack('<IQ', t, off)
            off += (len(data) + ALIGN - 1) // ALIGN * ALIGN
        out += b'\0' * (-len(out) % ALIGN)
        for _, _, _, data in self.tensors:
            out += data + b'\0' * (-len(data) % ALIGN)
        with open(path, 'wb') as f:
            f.write(out)
