#!/usr/bin/env python3
"""One timing of the escpod package's signal paths, in this process, for A/B runs of two builds of
the module (the other one put first on PYTHONPATH): prints JSON {wall, cpu, n, rss}.

    python_signals_ab.py TASK DIR [IDS]
      TASK  file_iter   Reader(first file).iter_signals(pa=True, threads=2), every signal used
            file_get    Reader(first file).get_signals(pa=True, threads=2)
            ids_get     DatasetReader(DIR's *.pod5).get_signals(ids in IDS, pa=True, threads=2)
            ids_iter    the same streamed with iter_signals
      DIR   a folder of POD5 files (e.g. make_dataset ... -o DIR/part -n 60000 -k 4)
      IDS   a text file of read ids, one per line (the ids_* tasks)

Alternate the builds in fresh processes and compare medians, e.g.
    for i in 1 2 3 4 5; do PYTHONPATH=/tmp/old_site python python_signals_ab.py file_iter DIR; \\
                           python python_signals_ab.py file_iter DIR; done
(an old build installed with `pip install --no-deps --target /tmp/old_site .`, with a link to the
venv's pyarrow beside it).
"""
import glob
import json
import resource
import sys
import time

import escpod


def main():
    task, folder = sys.argv[1], sys.argv[2]
    files = sorted(glob.glob(f"{folder}/*.pod5"))
    t0, c0 = time.perf_counter(), time.process_time()
    n = 0
    if task in ("file_iter", "file_get"):
        with escpod.Reader(files[0]) as r:
            signals = r.iter_signals(pa=True, threads=2) if task == "file_iter" else r.get_signals(pa=True, threads=2)
            for s in signals:
                n += len(s)
    else:
        ids = [line.strip() for line in open(sys.argv[3]) if line.strip()]
        with escpod.DatasetReader(files, threads=2) as ds:
            signals = ds.get_signals(ids, pa=True, threads=2) if task == "ids_get" else \
                ds.iter_signals(ids, pa=True, threads=2)
            for s in signals:
                n += len(s)
    print(json.dumps({"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0, "n": n,
                      "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))


if __name__ == "__main__":
    main()
