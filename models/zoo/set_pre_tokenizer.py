"""Rewrites `tokenizer.ggml.pre` of GGUF files written by gguf_writer.py, in place.

Only the header changes: the tensor data section is copied byte for byte (tensor
offsets are relative to it), so the weights stay identical, and the result is the
file that gguf_writer.py would write with the new name (same key order, same
padding). Used once to rename the zoo's pre-tokenizer from "default" to "gpt-2".

  set_pre_tokenizer.py gpt-2 models/target.gguf models/draft*.gguf
"""

import os
import struct
import sys

import gguf_writer as gw


def rewrite(path, name):
    with open(path, "rb") as f:
        buf = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        vals = struct.unpack_from(fmt, buf, pos)
        pos += struct.calcsize(fmt)
        return vals if len(vals) > 1 else vals[0]

    def skip_value(vtype):
        nonlocal pos
        if vtype == gw.T_STRING:
            n = take("<Q")
            pos += n
        elif vtype == gw.T_ARRAY:
            elem, n = take("<I"), take("<Q")
            for _ in range(n):
                skip_value(elem)
        else:
            pos += struct.calcsize(gw._SCALAR_FMT[vtype])

    magic, version, n_tensors, n_kv = take("<IIQQ")
    assert magic == gw.GGUF_MAGIC and version == 3, f"{path}: not a GGUF v3 file"
    span, alignment = None, gw.ALIGNMENT
    for _ in range(n_kv):
        key = buf[pos + 8:pos + 8 + struct.unpack_from("<Q", buf, pos)[0]].decode()
        skip_value(gw.T_STRING)
        vtype = take("<I")
        start = pos
        if key == "general.alignment":
            alignment = struct.unpack_from(gw._SCALAR_FMT[vtype], buf, pos)[0]
        skip_value(vtype)
        if key == "tokenizer.ggml.pre":
            assert vtype == gw.T_STRING, f"{path}: tokenizer.ggml.pre is not a string"
            span = (start, pos)
    assert span is not None, f"{path}: no tokenizer.ggml.pre"
    for _ in range(n_tensors):
        skip_value(gw.T_STRING)
        n_dims = take("<I")
        pos += 8 * n_dims + 4 + 8
    data_start = (pos + alignment - 1) // alignment * alignment
    header = buf[:span[0]] + gw._string(name) + buf[span[1]:pos]
    out = header + b"\0" * (-len(header) % alignment) + buf[data_start:]
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(out)
    os.replace(tmp, path)
    old = buf[span[0] + 8:span[1]].decode()
    print(f"{path}: tokenizer.ggml.pre {old!r} -> {name!r}, {len(buf[data_start:])} data bytes unchanged")


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    for path in sys.argv[2:]:
        rewrite(path, sys.argv[1])


if __name__ == "__main__":
    main()
