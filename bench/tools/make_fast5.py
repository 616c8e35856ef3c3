#!/usr/bin/env python3
"""Writes multi-read FAST5 files for tests and benchmarks from an existing multi-read FAST5:
every read of SOURCE copied COPIES times (copy 0 keeps the read ids, later copies get new ids
derived from copy number and old id), signal stored with the HDF5 VBZ filter (the layout
MinKNOW writes) or gzip, one read per HDF5 chunk.

  make_fast5.py SOURCE OUT.fast5 [--copies N] [--compression vbz|gzip] [--files K] [--chunk S]
With --files K, OUT is a folder receiving K files (reads dealt round-robin)."""
import argparse
import pathlib
import uuid

import h5py
import vbz_h5py_plugin  # noqa: F401  (registers the VBZ filter with h5py's HDF5)

VBZ_ID = 32020
VBZ_OPTS = (0, 2, 1, 1)  # version 0, int16, delta zigzag, zstd level 1 (MinKNOW's settings)


def copy_attrs(src, dst):
    for k, v in src.attrs.items():
        dst.attrs[k] = v


def copy_read(src_read, out, new_id, compression, chunk):
    name = f"read_{new_id}"
    g = out.create_group(name)
    copy_attrs(src_read, g)
    for sub in ("channel_id", "context_tags", "tracking_id"):
        s = src_read[sub]
        d = g.create_group(sub)
        copy_attrs(s, d)
    raw = g.create_group("Raw")
    copy_attrs(src_read["Raw"], raw)
    raw.attrs["read_id"] = new_id.encode()
    sig = src_read["Raw/Signal"][()]
    kw = dict(compression=VBZ_ID, compression_opts=VBZ_OPTS) if compression == "vbz" else dict(compression="gzip", compression_opts=1)
    raw.create_dataset("Signal", data=sig, chunks=(min(chunk, len(sig)) if chunk else len(sig),), **kw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("source")
    ap.add_argument("out")
    ap.add_argument("--copies", type=int, default=1)
    ap.add_argument("--compression", default="vbz", choices=["vbz", "gzip"])
    ap.add_argument("--files", type=int, default=0)
    ap.add_argument("--chunk", type=int, default=0, help="samples per HDF5 chunk (default: whole read)")
    a = ap.parse_args()
    out = pathlib.Path(a.out)
    n_files = max(1, a.files)
    if a.files:
        out.mkdir(parents=True, exist_ok=True)
        paths = [out / f"batch_{i}.fast5" for i in range(n_files)]
    else:
        paths = [out]
    outs = [h5py.File(p, "w") for p in paths]
    for f in outs:
        f.attrs["file_type"] = b"multi-read"
        f.attrs["file_version"] = b"2.2"
    k = 0
    with h5py.File(a.source, "r") as src:
        names = [n for n in src.keys() if n.startswith("read_")]
        for c in range(a.copies):
            for n in names:
                old = n[len("read_"):]
                new_id = old if c == 0 else str(uuid.uuid5(uuid.NAMESPACE_OID, f"{c}:{old}"))
                copy_read(src[n], outs[k % n_files], new_id, a.compression, a.chunk)
                k += 1
    for f in outs:
        f.close()


if __name__ == "__main__":
    main()
