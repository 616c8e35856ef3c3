"""The demultiplexer from Python: the library entry points `escpod demux` and its stages use,
so results equal the CLI's. Tables come back as dicts of numpy arrays (column name -> array;
`pandas.DataFrame(result)` makes a frame).

    calls = escpod.demux.demux(["run/"], model="WDX4_rna004_v1_0.json")
    bounds = escpod.demux.detect(["run/"], model=...)
    fps = escpod.demux.fingerprint(["run/"], bounds, model=...)
    calls = escpod.demux.classify(fps, model=...)
"""
import csv
import io
import os
import tempfile
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Union

import numpy as np

from . import _core

PathLike = Union[str, os.PathLike]


def _inputs(inputs) -> List[str]:
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    return [str(p) for p in inputs]


def _column(values: List[str]) -> np.ndarray:
    for kind in (np.int64, np.float64):
        try:
            return np.array([kind(v) if v != "" else (np.nan if kind is np.float64 else 0) for v in values], dtype=kind)
        except ValueError:
            continue
    return np.array(values, dtype=object)


def parse_table(text: str) -> Dict[str, np.ndarray]:
    """A CSV table as written by the CLI -> {column: numpy array} (ints, floats or strings)."""
    rows = [r for r in csv.reader(io.StringIO(text)) if r]
    if not rows:
        return {}
    header = rows[0]
    header[0] = header[0].lstrip("#")
    body = [r for r in rows[1:] if not r[0].startswith("#")]
    return {name: _column([r[i] for r in body]) for i, name in enumerate(header)}


def _write_table(table: Dict[str, np.ndarray], path: str) -> None:
    names = list(table)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(names)
        n = len(table[names[0]]) if names else 0
        cols = [table[c].tolist() for c in names]
        for i in range(n):
            w.writerow([c[i] for c in cols])


def describe(model: PathLike, cnn_model: PathLike = "") -> str:
    """What `escpod demux --info` prints for a model."""
    return _core.describe_model(str(model), str(cnn_model))


def demux(
    inputs,
    model: PathLike,
    out_dir: Optional[PathLike] = None,
    method: str = "",
    cnn_model: PathLike = "",
    dtw_precision: str = "float32",
    prefix: str = "barcode",
    threads: int = 0,
    report: Optional[dict] = None,
) -> Dict[str, np.ndarray]:
    """`escpod demux`: detect, fingerprint and classify every read of `inputs` (files or folders);
    returns the classifications table (read_id, barcode, ... as the CLI's --classifications CSV).
    With out_dir, also writes one POD5 per label there. `report` (a dict) receives the counts."""
    with tempfile.TemporaryDirectory(prefix="escpod-demux-") as tmp:
        calls = os.path.join(tmp, "calls.csv")
        (rep,) = _core.demux_files(
            _inputs(inputs), str(model), str(out_dir or ""), calls, method, str(cnn_model),
            dtw_precision, prefix, threads,
        )
        with open(calls) as f:
            table = parse_table(f.read())
    if report is not None:
        report.update(rep)
    return table


def detect(inputs, model: PathLike, method: str = "", cnn_model: PathLike = "",
           emit_llr_delta: bool = False, threads: int = 0) -> Dict[str, np.ndarray]:
    """`escpod demux detect`: adapter boundaries per read (the boundaries CSV's columns)."""
    text = _core.detect_files(_inputs(inputs), str(model), method, str(cnn_model), emit_llr_delta, threads)
    return parse_table(text)


def fingerprint(inputs, boundaries, model: PathLike = "", method: str = "",
                emit_dwell: bool = False, threads: int = 0) -> Dict[str, np.ndarray]:
    """`escpod demux fingerprint`: fingerprints (read_id, fp_0..) of the reads `boundaries` (a
    table from detect(), or a boundaries CSV path) names."""
    with tempfile.TemporaryDirectory(prefix="escpod-fp-") as tmp:
        if isinstance(boundaries, dict):
            path = os.path.join(tmp, "boundaries.csv")
            _write_table(boundaries, path)
        else:
            path = str(boundaries)
        text = _core.fingerprint_files(_inputs(inputs), path, str(model), method, emit_dwell, threads)
    return parse_table(text)


def classify(fingerprints, model: PathLike, probabilities: bool = False,
             dtw_precision: str = "float32", threads: int = 0) -> Dict[str, np.ndarray]:
    """`escpod demux classify`: calls (read_id, barcode, confidence, is_confident) from
    a fingerprint table (from fingerprint(), or a CSV/Parquet path)."""
    with tempfile.TemporaryDirectory(prefix="escpod-cls-") as tmp:
        if isinstance(fingerprints, dict):
            path = os.path.join(tmp, "fingerprints.csv")
            table = dict(fingerprints)
            _write_table(table, path)
        else:
            path = str(fingerprints)
        text = _core.classify_file(path, str(model), probabilities, dtw_precision, threads)
    return parse_table(text)
