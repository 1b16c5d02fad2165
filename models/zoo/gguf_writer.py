"""Minimal GGUF v3 writer (and a reader for checking what was written).

Layout: header (magic, version 3, tensor count, metadata count), metadata
key/value pairs, tensor infos (name, dims with dims[0] contiguous, type,
offset into the data section), padding to the alignment, tensor data (each
tensor starting at a multiple of the alignment). Tensor types: F32, F16, Q8_0.
"""

import struct

import numpy as np

GGUF_MAGIC = 0x46554747
ALIGNMENT = 32

# metadata value types
T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STRING, T_ARRAY, T_U64, T_I64, T_F64 = range(13)
_SCALAR_FMT = {T_U8: "<B", T_I8: "<b", T_U16: "<H", T_I16: "<h", T_U32: "<I", T_I32: "<i", T_F32: "<f",
               T_BOOL: "<?", T_U64: "<Q", T_I64: "<q", T_F64: "<d"}

# tensor types
F32, F16, Q8_0 = 0, 1, 8
QK8_0 = 32


def quantize_q8_0(x):
    """Rows of float32 -> Q8_0 bytes: per 32 values an f16 scale d = absmax/127, then int8 round(x/d)."""
    x = np.asarray(x, dtype=np.float32)
    assert x.shape[-1] % QK8_0 == 0, "Q8_0 needs rows that are a multiple of 32 values"
    blocks = x.reshape(-1, QK8_0)
    amax = np.abs(blocks).max(axis=1, keepdims=True)
    d = (amax / 127.0).astype(np.float32)
    d16 = d.astype(np.float16)
    inv = np.divide(1.0, d, out=np.zeros_like(d), where=d != 0)
    q = np.clip(np.rint(blocks * inv), -127, 127).astype(np.int8)
    out = np.empty((blocks.shape[0], 34), dtype=np.uint8)
    out[:, :2] = d16.view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def dequantize_q8_0(data, n):
    raw = np.frombuffer(data, dtype=np.uint8, count=(n // QK8_0) * 34).reshape(-1, 34)
    d = raw[:, :2].copy().view(np.float16).astype(np.float32)
    q = raw[:, 2:].copy().view(np.int8).astype(np.float32)
    return (q * d).reshape(-1)


def tensor_nbytes(ttype, n):
    return {F32: 4 * n, F16: 2 * n, Q8_0: (n // QK8_0) * 34}[ttype]


def _string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


class GgufWriter:
    def __init__(self):
        self.kv = []  # (key, type, value, element type for arrays)
        self.tensors = []  # (name, dims, type, bytes)

    def add(self, key, vtype, value, elem_type=None):
        self.kv.append((key, vtype, value, elem_type))

    def add_string(self, key, value):
        self.add(key, T_STRING, value)

    def add_u32(self, key, value):
        self.add(key, T_U32, int(value))

    def add_f32(self, key, value):
        self.add(key, T_F32, float(value))

    def add_bool(self, key, value):
        self.add(key, T_BOOL, bool(value))

    def add_array(self, key, elem_type, values):
        self.add(key, T_ARRAY, list(values), elem_type)

    def add_tensor(self, name, array, ttype):
        """array: numpy, PyTorch order (slowest dimension first); stored with dims reversed."""
        a = np.ascontiguousarray(array, dtype=np.float32)
        dims = list(reversed(a.shape))
        if ttype == F32:
            data = a.tobytes()
        elif ttype == F16:
            data = a.astype(np.float16).tobytes()
        elif ttype == Q8_0:
            data = quantize_q8_0(a)
        else:
            raise ValueError(f"unsupported tensor type {ttype}")
        self.tensors.append((name, dims, ttype, data))

    @staticmethod
    def _value(vtype, value, elem_type):
        if vtype == T_STRING:
            return _string(value)
        if vtype == T_ARRAY:
            out = [struct.pack("<IQ", elem_type, len(value))]
            if elem_type == T_STRING:
                out.extend(_string(v) for v in value)
            else:
                out.append(np.asarray(value, dtype=np.dtype(_SCALAR_FMT[elem_type][1:]).newbyteorder("<")).tobytes())
            return b"".join(out)
        return struct.pack(_SCALAR_FMT[vtype], value)

    def write(self, path):
        head = [struct.pack("<IIQQ", GGUF_MAGIC, 3, len(self.tensors), len(self.kv))]
        for key, vtype, value, elem_type in self.kv:
            head.append(_string(key) + struct.pack("<I", vtype) + self._value(vtype, value, elem_type))
        offset = 0
        for name, dims, ttype, data in self.tensors:
            head.append(_string(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
                        + struct.pack("<IQ", ttype, offset))
            offset += (len(data) + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
        header = b"".join(head)
        with open(path, "wb") as f:
            f.write(header)
            f.write(b"\0" * (-len(header) % ALIGNMENT))
            for _, _, _, data in self.tensors:
                f.write(data)
                f.write(b"\0" * (-len(data) % ALIGNMENT))


def read_gguf(path):
    """Returns (metadata dict, {name: (dims, type, float32 array in PyTorch order)})."""
    with open(path, "rb") as f:
        buf = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        vals = struct.unpack_from(fmt, buf, pos)
        pos += struct.calcsize(fmt)
        return vals if len(vals) > 1 else vals[0]

    def string():
        nonlocal pos
        n = take("<Q")
        s = buf[pos:pos + n].decode("utf-8")
        pos += n
        return s

    def value(vtype):
        if vtype == T_STRING:
            return string()
        if vtype == T_ARRAY:
            et, n = take("<I"), take("<Q")
            return [value(et) for _ in range(n)]
        return take(_SCALAR_FMT[vtype])

    magic, version, n_tensors, n_kv = take("<IIQQ")
    assert magic == GGUF_MAGIC and version == 3, "not a GGUF v3 file"
    meta = {}
    for _ in range(n_kv):
        key = string()
        meta[key] = value(take("<I"))
    infos = []
    for _ in range(n_tensors):
        name = string()
        nd = take("<I")
        dims = [take("<Q") for _ in range(nd)]
        ttype, off = take("<IQ")
        infos.append((name, dims, ttype, off))
    align = meta.get("general.alignment", ALIGNMENT)
    base = (pos + align - 1) // align * align
    tensors = {}
    for name, dims, ttype, off in infos:
        n = int(np.prod(dims))
        start = base + off
        raw = buf[start:start + tensor_nbytes(ttype, n)]
        if ttype == F32:
            arr = np.frombuffer(raw, dtype=np.float32).copy()
        elif ttype == F16:
            arr = np.frombuffer(raw, dtype=np.float16).astype(np.float32)
        elif ttype == Q8_0:
            arr = dequantize_q8_0(raw, n)
        else:
            raise ValueError(f"{name}: unsupported type {ttype}")
        tensors[name] = (dims, ttype, arr.reshape(list(reversed(dims))))
    return meta, tensors
