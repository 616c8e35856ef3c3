#!/usr/bin/env python3
"""Seeds for pod5_recover_fuzz from intact POD5 files (run with .venv/bin/python).

  make_recover_corpus.py OUT_DIR FILE.pod5...

Each seed is the fuzz target's input layout: two little-endian uint32 lengths (reads side file,
run-info side file), then the main file, then the side files. Per input it writes: the whole
file; the file cut inside its reads table, inside its signal table and just before its footer
(no side files); and a killed writer's layout made from its parts (the signal table's stream
without its end as the main file, the embedded reads and run-info Arrow files up to their last
record batch as side files).
"""
import pathlib
import struct
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "conformance"))
import recover_layout as layout  # noqa: E402


def seed(main: bytes, reads: bytes = b"", run_info: bytes = b"") -> bytes:
    return struct.pack("<II", len(reads), len(run_info)) + main + reads + run_info


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for path in map(pathlib.Path, sys.argv[2:]):
        data = path.read_bytes()
        tables = {t.kind: t for t in layout.finished_tables(data)}
        sig, reads = tables["signal"], tables["reads"]
        seeds = {
            "whole": seed(data),
            "cut_reads": seed(data[:(reads.schema_end + reads.batch_ends[-1]) // 2]),
            "cut_signal": seed(data[:sig.batch_ends[0] - 100]),
            "no_footer": seed(data[:len(data) - 40]),
        }
        if "run_info" in tables:
            run = tables["run_info"]
            seeds["killed_writer"] = seed(data[:sig.batch_ends[-1]],
                                          data[reads.start:reads.batch_ends[-1]],
                                          data[run.start:run.batch_ends[-1]])
        for name, blob in seeds.items():
            (out / f"{path.stem}_{name}").write_bytes(blob)


if __name__ == "__main__":
    main()
