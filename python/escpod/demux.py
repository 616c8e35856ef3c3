"""The demultiplexer from Python: the library entry points `escpod demux` and its stages use,
so results equal the CLI's. Tables come back as dicts of numpy arrays (column name -> array;
`pandas.DataFrame(result)` makes a frame).

    calls = escpod.demux.demux(["run/"], model="WDX4_rna004_v1_0.json")
    bounds = escpod.demux.detect(["run/"], model=...)
    fps = escpod.demux.fingerprint(["run/"], bounds, model=...)
    calls = escpod.demux.classify(fps, model=...)

Signals held in memory (int16 ADC arrays with their calibration, as ReadRecord.signal and
ReadRecord.calibration give them) go through the same entry points: detect_signals,
fingerprint_signals and demux_signals write them to a temporary POD5 file first, so their
results are those of the CLI on a file holding the same reads.
"""
import contextlib
import csv
import datetime
import io
import os
import tempfile
import uuid
import warnings
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Union

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


def describe(model: PathLike, cnn_model: PathLike = "", config: PathLike = "") -> str:
    """What `escpod demux --info` prints for a model (`config`: a WarpDemuX .joblib model's
    signal-processing TOML, as `--config`)."""
    return _core.describe_model(str(model), str(config), str(cnn_model))


def bam_demux(bam: PathLike, classifications=None, pod5=None, annotation: str = "barcode",
              output: Optional[PathLike] = None, out_dir: Optional[PathLike] = None, prefix: str = "barcode",
              reference: Optional[PathLike] = None, missing_ids: Optional[PathLike] = None, threads: int = 0,
              memory_mib: int = 64, force: bool = False) -> dict:
    """`escpod bam-demux`: the calls (`classifications`: a CSV path or a list of them; or `pod5`:
    POD5 files/folders whose .p5s sidecars hold the label column `annotation`) onto the records
    of `bam` (dorado's BC/RG conventions, docs/formats.md); writes `output` (every record, tagged)
    and/or `out_dir` (one <prefix>_<label>.bam per label). Returns the counts (records and reads
    per label, records without a call, calls without a record, files written)."""
    if isinstance(classifications, (str, os.PathLike)):
        classifications = [classifications]
    if isinstance(pod5, (str, os.PathLike)):
        pod5 = [pod5]
    return _core.bam_demux_file(
        str(bam), [str(c) for c in classifications or []], [str(p) for p in pod5 or []], annotation,
        str(output or ""), str(out_dir or ""), prefix, str(reference or ""), str(missing_ids or ""),
        threads, memory_mib, force)


def export_model(model: PathLike, config: PathLike = "") -> str:
    """`escpod demux export-model`: a WarpDemuX .joblib model (with its signal-processing config)
    as our model JSON text."""
    return _core.export_model(str(model), str(config))


# The CRF head's keyword options of demux() and basecall(), as `escpod demux`'s flags, with their
# defaults (None: the model's or escapepod's default).
_CRF_OPTIONS = {
    "decoder": "", "crf_window": "", "crf_norm": "window", "barcodes": "", "min_margin": 0,
    "min_baseq": None, "min_mean_post": None, "min_crf_margin": None, "min_crf_prob": None,
    "ref_scores": False, "crf_batch": None, "encoder_precision": "f32",
}


def _crf_request(caller: str, options: dict):
    """The CRF head's request from `caller`'s keyword options, as the CLI's flags fill it: NaN / -1
    where an option is None (unknown names are a TypeError naming the caller)."""
    unknown = sorted(set(options) - set(_CRF_OPTIONS))
    if unknown:
        raise TypeError(f"{caller}() got unexpected keyword argument(s): {', '.join(unknown)}")
    o = {**_CRF_OPTIONS, **options}
    crf = _core.CrfHeadRequest()
    crf.decoder, crf.window, crf.norm, crf.barcodes = o["decoder"], o["crf_window"], o["crf_norm"], str(o["barcodes"])
    crf.precision, crf.min_margin, crf.ref_scores = o["encoder_precision"], int(o["min_margin"]), bool(o["ref_scores"])
    crf.min_baseq, crf.min_mean_post, crf.min_crf_margin, crf.min_crf_prob = (
        float("nan") if o[k] is None else float(o[k])
        for k in ("min_baseq", "min_mean_post", "min_crf_margin", "min_crf_prob"))
    crf.window_batch = -1 if o["crf_batch"] is None else int(o["crf_batch"])
    # The options given (as the CLI spells them): refused for a model that is not a CRF folder.
    crf.given = [f"--{k.replace('_', '-')}" for k, v in options.items() if v is not None]
    return crf


def _table_path(table, tmp: str, name: str) -> str:
    """A table (dict of columns) written as CSV into `tmp`, or a path as given."""
    if isinstance(table, dict):
        path = os.path.join(tmp, name)
        _write_table(table, path)
        return path
    return str(table)


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
    config: PathLike = "",
    cnn_precision: str = "float32",
    **crf_options,
) -> Dict[str, np.ndarray]:
    """`escpod demux`: detect, fingerprint and classify every read of `inputs` (files or folders);
    returns the classifications table (read_id, barcode, ... as the CLI's --classifications CSV).
    With out_dir, also writes one POD5 per label there. `report` (a dict) receives the counts.

    `model` is a WarpDemuX / GBM JSON file, WarpDemuX's own .joblib model file (its
    signal-processing config found as WarpDemuX would, or given as `config`), or a CTC-CRF model
    folder (SeqTagger or escapepod bundle). `crf_options` are the CRF head's, as `escpod demux`'s flags (None, or left out: the
    model's or escapepod's default): `decoder` ("posterior" / "beam"), `crf_window`
    ("before-boundary" / "rolling-start"), `crf_norm`, `barcodes` (a references CSV), the gates
    `min_margin`, `min_baseq`, `min_mean_post`, `min_crf_margin`, `min_crf_prob`, `ref_scores`,
    `crf_batch` (windows per encoder call) and `encoder_precision` ("f32", "f32-fma", "bf16", "int8").
    `cnn_precision` is the boundary CNN's arithmetic, as --cnn-precision: "float32" or "bfloat16"."""
    crf = _crf_request("demux", crf_options)
    with tempfile.TemporaryDirectory(prefix="escpod-demux-") as tmp:
        calls = os.path.join(tmp, "calls.csv")
        (rep,) = _core.demux_files(
            _inputs(inputs), str(model), str(config), str(out_dir or ""), calls, method, str(cnn_model),
            dtw_precision, prefix, threads, crf, cnn_precision,
        )
        with open(calls) as f:
            table = parse_table(f.read())
    if report is not None:
        report.update(rep)
    return table


def basecall(
    inputs,
    boundaries,
    model: PathLike,
    threads: int = 0,
    report: Optional[dict] = None,
    **crf_options,
) -> Dict[str, np.ndarray]:
    """`escpod demux basecall`: the CTC-CRF head on the reads `boundaries` (a table from detect(),
    or a boundaries CSV path) names; returns the basecall table (read_id, barcode, confidence,
    best_dist, second_best_dist, adapter_end, decoded_len, decoded_seq [, baseq] [, crf_logp,
    crf_margin, crf_best, mean_logpost]) as the CLI's CSV. `model` is a CRF model folder;
    `crf_options` are the head's, as demux()'s. `report` (a dict) receives the counts."""
    crf = _crf_request("basecall", crf_options)
    with tempfile.TemporaryDirectory(prefix="escpod-bc-") as tmp:
        path = _table_path(boundaries, tmp, "boundaries.csv")
        text, rep = _core.basecall_files(_inputs(inputs), path, str(model), threads, crf)
    if report is not None:
        report.update(rep)
    return parse_table(text)


def detect(inputs, model: PathLike, method: str = "", cnn_model: PathLike = "",
           emit_llr_delta: bool = False, threads: int = 0, config: PathLike = "",
           cnn_precision: str = "float32") -> Dict[str, np.ndarray]:
    """`escpod demux detect`: adapter boundaries per read (the boundaries CSV's columns);
    `cnn_precision` as --cnn-precision ("float32" or "bfloat16")."""
    text = _core.detect_files(_inputs(inputs), str(model), str(config), method, str(cnn_model), emit_llr_delta,
                              threads, cnn_precision)
    return parse_table(text)


def fingerprint(inputs, boundaries, model: PathLike = "", method: str = "",
                emit_dwell: bool = False, threads: int = 0, config: PathLike = "") -> Dict[str, np.ndarray]:
    """`escpod demux fingerprint`: fingerprints (read_id, fp_0..) of the reads `boundaries` (a
    table from detect(), or a boundaries CSV path) names."""
    with tempfile.TemporaryDirectory(prefix="escpod-fp-") as tmp:
        path = _table_path(boundaries, tmp, "boundaries.csv")
        text = _core.fingerprint_files(_inputs(inputs), path, str(model), str(config), method, emit_dwell, threads)
    return parse_table(text)


def classify(fingerprints, model: PathLike, probabilities: bool = False,
             dtw_precision: str = "float32", threads: int = 0, config: PathLike = "") -> Dict[str, np.ndarray]:
    """`escpod demux classify`: the classifications table demux() returns (read_id, barcode,
    confidence, adapter_start, adapter_end, detector, reason, then the head's columns: the DTW-SVM
    head's per-class probabilities), from a fingerprint table (from fingerprint(), or a
    CSV/Parquet path), with the model's head (DTW-SVM or GBM). The boundary and detector cells are
    empty: a fingerprint table does not hold them. `probabilities` is deprecated (always written)."""
    if probabilities:
        warnings.warn("probabilities= is deprecated: the head's columns are always in the table",
                      DeprecationWarning, stacklevel=2)
    with tempfile.TemporaryDirectory(prefix="escpod-cls-") as tmp:
        path = _table_path(fingerprints, tmp, "fingerprints.csv")
        text = _core.classify_file(path, str(model), str(config), dtw_precision, threads)
    return parse_table(text)


# ---- signals held in memory ---------------------------------------------------------------

def _calibrations(calibration, n: int) -> np.ndarray:
    """(offset, scale) per read, from one pair or n pairs."""
    cal = np.asarray(calibration, dtype=np.float64)
    if cal.shape == (2,):
        cal = np.tile(cal, (n, 1))
    if cal.shape != (n, 2):
        raise ValueError(f"calibration: one (offset, scale) pair or one per signal ({n}), got shape {cal.shape}")
    return cal


def _read_ids(read_ids, n: int) -> List[uuid.UUID]:
    """The given ids (UUIDs or strings), or ids that are the signals' positions: UUID(int=i)."""
    if read_ids is None:
        return [uuid.UUID(int=i) for i in range(n)]
    ids = [x if isinstance(x, uuid.UUID) else uuid.UUID(str(x)) for x in read_ids]
    if len(ids) != n:
        raise ValueError(f"read_ids: {len(ids)} ids for {n} signals")
    if len(set(ids)) != n:
        raise ValueError("read_ids: an id is given twice")
    return ids


@contextlib.contextmanager
def signals_as_pod5(signals: Sequence[np.ndarray], calibration, read_ids=None,
                    sample_rate: int = 4000) -> Iterator[str]:
    """Writes `signals` (int16 ADC arrays) to a temporary POD5 file and yields its path; the file
    is removed when the block ends. calibration: one (offset, scale) pair for all, or one per
    signal (pA = (adc + offset) * scale). read_ids: one per signal (UUIDs or strings); by default
    UUID(int=i) for the i-th signal, so a result row's read_id gives back its position
    (uuid.UUID(row).int). sample_rate: Hz, recorded in the file's run information (the
    detectors read it from there)."""
    from .pod5_types import Calibration, EndReason, EndReasonEnum, Pore, Read, RunInfo
    from .writer import Writer

    signals = list(signals)
    for i, s in enumerate(signals):
        a = np.asarray(s)
        if a.dtype != np.int16 or a.ndim != 1:
            raise TypeError(f"signal {i}: a 1-d int16 array of ADC counts is needed (got {a.dtype}, "
                            f"{a.ndim}-d); picoamp floats cannot be stored exactly: pass the raw signal "
                            "and its calibration")
    cal = _calibrations(calibration, len(signals))
    ids = _read_ids(read_ids, len(signals))
    if int(sample_rate) <= 0:
        raise ValueError(f"sample_rate must be positive, got {sample_rate}")
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    run = RunInfo(acquisition_id="escpod-signals", acquisition_start_time=epoch, adc_max=32767, adc_min=-32768,
                  context_tags={"sample_frequency": str(int(sample_rate))}, experiment_name="",
                  flow_cell_id="", flow_cell_product_code="", protocol_name="", protocol_run_id="",
                  protocol_start_time=epoch, sample_id="", sample_rate=int(sample_rate), sequencing_kit="",
                  sequencer_position="", sequencer_position_type="", software="escpod", system_name="",
                  system_type="", tracking_id={})
    end = EndReason.from_reason_with_default_forced(EndReasonEnum.UNKNOWN)
    with tempfile.TemporaryDirectory(prefix="escpod-signals-") as tmp:
        path = os.path.join(tmp, "signals.pod5")
        with Writer(path) as w:
            for i, (s, read_id) in enumerate(zip(signals, ids)):
                w.add_read(Read(read_id=read_id, pore=Pore(channel=1, well=1, pore_type="not_set"),
                                calibration=Calibration(offset=float(cal[i, 0]), scale=float(cal[i, 1])),
                                read_number=i, start_sample=0, median_before=float("nan"), end_reason=end,
                                run_info=run, signal=np.asarray(s)))
        yield path


def detect_signals(signals: Sequence[np.ndarray], calibration, model: PathLike, read_ids=None,
                   sample_rate: int = 4000, **options) -> Dict[str, np.ndarray]:
    """detect() of signals held in memory (see signals_as_pod5 for signals, calibration,
    read_ids and sample_rate; options as detect())."""
    with signals_as_pod5(signals, calibration, read_ids, sample_rate) as path:
        return detect(path, model=model, **options)


def fingerprint_signals(signals: Sequence[np.ndarray], calibration, boundaries, read_ids=None,
                        sample_rate: int = 4000, **options) -> Dict[str, np.ndarray]:
    """fingerprint() of signals held in memory; `boundaries` from detect_signals() on the same
    signals and read_ids (options as fingerprint())."""
    with signals_as_pod5(signals, calibration, read_ids, sample_rate) as path:
        return fingerprint(path, boundaries, **options)


def demux_signals(signals: Sequence[np.ndarray], calibration, model: PathLike, read_ids=None,
                  sample_rate: int = 4000, **options) -> Dict[str, np.ndarray]:
    """demux() of signals held in memory: the classifications table (options as demux(); with
    out_dir the per-label POD5 files hold these signals)."""
    with signals_as_pod5(signals, calibration, read_ids, sample_rate) as path:
        return demux(path, model=model, **options)
