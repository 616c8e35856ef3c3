"""The Python API from the installed wheel (tests/wheel/in_root.sh): read POD5 files with
escpod.Reader, demultiplex with escpod.demux.demux, and check that every shared library the
process mapped while doing so lies inside the venv or in the manylinux policy's system list.
Usage: python smoke.py IN_DIR DEMO_DIR CONVERTED_POD5"""
import csv
import re
import sys
from pathlib import Path

SYSTEM_OK = re.compile(r"^/(usr/)?lib(64)?/(x86_64-linux-gnu/)?"
                       r"(libc|libm|libdl|librt|libpthread|libresolv|libutil|ld-linux-x86-64"
                       r"|libstdc\+\+|libgcc_s|libz)\.so")


def mapped_libraries() -> set:
    with open("/proc/self/maps") as maps:
        return {fields[5] for fields in (line.split() for line in maps)
                if len(fields) >= 6 and ".so" in fields[5]}


def main() -> None:
    in_dir, demo, converted = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    # What the interpreter and the declared dependencies load is theirs, not the wheel's: numpy,
    # pyarrow, and the standard library's shutil (which loads _bz2/_lzma and Debian's
    # libbz2/liblzma at import) are imported before the snapshot.
    import shutil  # noqa: F401
    import tempfile  # noqa: F401

    import numpy as np
    import pyarrow  # noqa: F401

    before = mapped_libraries()
    import escpod
    import escpod.demux

    print("escpod", escpod.__version__, "from", Path(escpod.__file__).parent)
    # One version: the package's, the wheel's metadata and the escpod command's.
    import importlib.metadata
    import subprocess
    command = subprocess.run(["escpod", "--version"], capture_output=True, text=True, check=True).stdout
    assert escpod.__version__ == importlib.metadata.version("escpod"), importlib.metadata.version("escpod")
    assert command.splitlines()[0] == f"escpod {escpod.__version__}", command

    # The FAST5 conversion's signal against the official pod5 conversion of the same file.
    with escpod.Reader(converted) as ours, escpod.Reader(in_dir / "real/multi_fast5_zip_v3.pod5") as official:
        a = {str(r.read_id): r.signal.copy() for r in ours.reads()}
        b = {str(r.read_id): r.signal.copy() for r in official.reads()}
    assert a.keys() == b.keys() and len(a) == 10, (len(a), len(b))
    assert all(np.array_equal(a[k], b[k]) for k in a)
    print(f"Reader: {len(a)} converted reads, signals equal to the official conversion's")

    # The demo's test reads through the library; the calls equal the CLI's calls.csv.
    table = escpod.demux.demux([str(demo / "test.pod5")], str(demo / "model.json"), threads=2)
    with open(demo / "calls.csv") as f:
        cli = {row["read_id"]: row["barcode"] for row in csv.DictReader(f)}
    api = dict(zip((str(r) for r in table["read_id"]), (str(b) for b in table["barcode"])))
    assert api == cli and len(api) == 3000, (len(api), len(cli))
    counts = {b: list(api.values()).count(b) for b in sorted(set(api.values()))}
    print(f"escpod.demux.demux: {len(api)} calls, equal to the CLI's: {counts}")

    loaded = mapped_libraries() - before
    outside = sorted(p for p in loaded if not p.startswith(sys.prefix + "/") and not SYSTEM_OK.match(p))
    assert not outside, f"libraries mapped from outside the venv: {outside}"
    print(f"/proc/self/maps: {len(loaded)} libraries loaded by importing and running escpod, all "
          "inside the venv or glibc/libstdc++/libgcc_s/libz")


main()
