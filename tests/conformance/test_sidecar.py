""".p5s sidecars (docs/formats.md §2): our writer and reader against the
Rust escapepod's (PyPI `escapepod`, its Python API: Reader.build_index() writes an index-only
sidecar keeping existing annotations; annotation()/score()/design()/annotation_names()/
score_names() read them; it has no call that writes an annotation, so sidecars with annotations
in its layout are built here with pyarrow from an index it wrote), the rules of the format with
their errors, and the commands that use sidecars (annotate, demux --annotate, demux split
--sidecar, filter --annotation, view --include, inspect)."""
import csv
import json
import os
import random
import shutil
import signal
import subprocess
import time
import uuid

import escapepod
import numpy as np
import pod5
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from conftest import run

LABELS = ["BC01", "BC02", "BC03"]


@pytest.fixture(scope="module")
def rna_source(shared_data):
    return shared_data / "escapepod/drna/yeast_trna_reads.pod5"


@pytest.fixture
def rna(rna_source, tmp_path):
    """A writable copy of the 180-read real RNA004 file (sidecars are written beside it)."""
    path = tmp_path / "reads.pod5"
    shutil.copy(rna_source, path)
    os.chmod(path, 0o644)
    return path


def ids_of(path):
    with pod5.Reader(path) as r:
        return [str(x.read_id) for x in r.reads()]


def write_labels(path, ids, column="barcode", values=None):
    """read_id,<column> CSV; default labels cycle BC01..BC03 and every 5th read is left out."""
    rows = values if values is not None else {i: LABELS[k % 3] for k, i in enumerate(ids) if k % 5}
    with open(path, "w") as f:
        f.write(f"read_id,{column}\n")
        for i, v in rows.items():
            f.write(f"{i},{v}\n")
    return rows


def sidecar(path):
    return path.parent / (path.name + ".p5s")


def table(path):
    f = ipc.open_file(sidecar(path))
    return f.schema, f.read_all()


def annotate(escpod, path, csv_path, name, *extra, check=True):
    return run([escpod, "annotate", path, "--from", csv_path, "--name", name, *extra], check=check)


def view_columns(escpod, path, names):
    out = run([escpod, "view", path, "--include", ",".join(["read_id", *names])]).stdout.splitlines()
    assert out[0].split("\t") == ["read_id", *names]
    return {line.split("\t")[0]: line.split("\t")[1:] for line in out[1:]}


# ---- round trips and interop ----------------------------------------------------------------


def test_annotate_writes_the_specified_layout_and_escapepod_reads_it(escpod, rna, tmp_path):
    ids = ids_of(rna)
    labels = write_labels(tmp_path / "calls.csv", ids)
    annotate(escpod, rna, tmp_path / "calls.csv", "barcode")
    schema, t = table(rna)
    assert schema.names == ["read_id", "batch_idx", "row_idx", "barcode"]
    assert schema.field("read_id").type == pa.binary(16)
    assert schema.field("read_id").metadata[b"ARROW:extension:name"] == b"minknow.uuid"
    assert not schema.field("read_id").nullable
    assert schema.field("batch_idx").type == pa.uint32() and schema.field("row_idx").type == pa.uint32()
    assert schema.field("barcode").type == pa.dictionary(pa.int32(), pa.utf8())
    md = schema.metadata
    peer = escapepod.Reader(str(rna))
    assert md[b"escapepod:p5s_version"] == b"1"
    assert md[b"escapepod:file_identifier"].decode() == peer.file_identifier
    assert int(md[b"escapepod:pod5_size"]) == rna.stat().st_size
    assert md[b"escapepod:source_name"] == b"reads.pod5" and md[b"escapepod:read_count"] == b"180"
    assert md[b"escapepod:writer"].startswith(b"escpod ")
    # Rows sorted by UUID bytes, one per read, locators pointing at the reads.
    raw = [bytes(x) for x in t.column("read_id").to_pylist()]
    assert raw == sorted(raw) and len(raw) == 180
    assert {str(uuid.UUID(bytes=b)) for b in raw} == set(ids)
    # The peer reads our labels exactly (unassigned reads absent) and our index.
    assert peer.annotation_names() == ["barcode"] and peer.score_names() == []
    assert peer.annotation("barcode") == labels
    assert peer.annotation() == labels
    some = ids[7]
    assert peer.get_read(some).read_id == some
    # Record batches are zstd-compressed: the buffers start with the zstd frame magic.
    assert b"\x28\xb5\x2f\xfd" in sidecar(rna).read_bytes()


def test_scores_round_trip_version_2_and_columns_are_kept(escpod, rna, tmp_path):
    ids = ids_of(rna)
    labels = write_labels(tmp_path / "calls.csv", ids)
    annotate(escpod, rna, tmp_path / "calls.csv", "barcode")
    scores = {i: (k * 0.37 - 20) for k, i in enumerate(ids) if k % 4}
    with open(tmp_path / "q.csv", "w") as f:
        f.write("read_id,value\n" + "".join(f"{i},{v!r}\n" for i, v in scores.items()))
    annotate(escpod, rna, tmp_path / "q.csv", "qscore", "--kind", "score")
    schema, t = table(rna)
    assert schema.names == ["read_id", "batch_idx", "row_idx", "barcode", "qscore"]
    assert schema.field("qscore").type == pa.float32()
    assert schema.metadata[b"escapepod:p5s_version"] == b"2"
    peer = escapepod.Reader(str(rna))
    assert peer.annotation("barcode") == labels, "writing a score lost the label column"
    got = peer.score("qscore")
    assert set(got) == set(scores)
    for i, v in scores.items():
        assert got[i] == float(np.float32(v))
    # Ours prints both, empty cells for absent values, scores in shortest float32 form.
    rows = view_columns(escpod, rna, ["barcode", "qscore"])
    for k, i in enumerate(ids):
        assert rows[i][0] == labels.get(i, "")
        assert rows[i][1] == ("" if i not in scores else rows[i][1])
        if i in scores:
            assert np.float32(float(rows[i][1])) == np.float32(scores[i])
    # Rewriting a label column keeps the score column (column-preserving read-modify-write).
    labels2 = write_labels(tmp_path / "calls2.csv", ids, values={i: "X" for i in ids[:10]})
    annotate(escpod, rna, tmp_path / "calls2.csv", "barcode")
    peer = escapepod.Reader(str(rna))
    assert peer.annotation("barcode") == labels2
    assert set(peer.score("qscore")) == set(scores)


def test_escapepod_index_then_our_annotation_then_its_rebuild(escpod, rna, tmp_path):
    peer = escapepod.Reader(str(rna))
    assert peer.build_index() == 180
    _, before = table(rna)
    peer_md = dict(ipc.open_file(sidecar(rna)).schema.metadata)
    ids = ids_of(rna)
    labels = write_labels(tmp_path / "calls.csv", ids)
    annotate(escpod, rna, tmp_path / "calls.csv", "barcode")
    schema, after = table(rna)
    # Our write kept the peer's index rows and its own metadata key we do not interpret.
    for col in ["read_id", "batch_idx", "row_idx"]:
        assert after.column(col).to_pylist() == before.column(col).to_pylist()
    for key, value in peer_md.items():
        if key not in (b"escapepod:writer", b"escapepod:p5s_version"):
            assert schema.metadata[key] == value, key
    assert escapepod.Reader(str(rna)).annotation("barcode") == labels
    # The peer rebuilding its index keeps our column; we still read it.
    assert escapepod.Reader(str(rna)).build_index() == 180
    rows = view_columns(escpod, rna, ["barcode"])
    assert {i: v[0] for i, v in rows.items() if v[0]} == labels


def _write_peer_style(path, columns, metadata=None, compression="zstd", rows=None):
    """An annotated sidecar in the peer's layout: its own index plus pyarrow columns."""
    if not sidecar(path).exists():
        escapepod.Reader(str(path)).build_index()
    f = ipc.open_file(sidecar(path))
    base = f.read_all()
    md = dict(f.schema.metadata)
    md.pop(b"escpod:content_hash", None)  # the peer writes none
    md.update({k.encode(): v.encode() for k, v in (metadata or {}).items()})
    fields = list(f.schema)[:3]
    arrays = [base.column(i) for i in range(3)]
    if rows is not None:
        arrays = [a.take(pa.array(rows)) for a in arrays]
    for name, arr in columns:
        fields.append(pa.field(name, arr.type, nullable=True))
        arrays.append(arr)
    schema = pa.schema(fields, metadata=md)
    with ipc.new_file(sidecar(path), schema, options=ipc.IpcWriteOptions(compression=compression)) as w:
        w.write_table(pa.Table.from_arrays(arrays, schema=schema))
    return base


def _label_array(values):
    return pa.array(values, pa.utf8()).dictionary_encode().cast(pa.dictionary(pa.int32(), pa.utf8()))


def test_we_read_annotations_scores_and_design_in_escapepod_layout(escpod, rna, tmp_path):
    escapepod.Reader(str(rna)).build_index()
    base = table(rna)[1]
    order = [str(uuid.UUID(bytes=bytes(b))) for b in base.column("read_id").to_pylist()]
    bc = [LABELS[k % 3] if k % 4 else None for k in range(len(order))]
    cond = [{"BC01": "ctrl", "BC02": "treat"}.get(v) if v else None for v in bc]
    logp = [float(k) / 8 if k % 3 else None for k in range(len(order))]
    design = {"key_columns": ["barcode"], "value_columns": ["condition"],
              "rows": [["BC01", "ctrl"], ["BC02", "treat"]]}
    _write_peer_style(rna, [("barcode", _label_array(bc)), ("condition", _label_array(cond)),
                            ("crf_logp", pa.array(logp, pa.float32()))],
                      {"escapepod:p5s_version": "2", "escapepod:design": json.dumps(design)})
    peer = escapepod.Reader(str(rna))
    assert peer.design()["key_columns"] == ["barcode"]
    rows = view_columns(escpod, rna, ["barcode", "condition", "crf_logp"])
    for k, i in enumerate(order):
        assert rows[i][:2] == [bc[k] or "", cond[k] or ""]
        if logp[k] is not None:
            assert float(rows[i][2]) == logp[k]
        else:
            assert rows[i][2] == ""
    out = run([escpod, "inspect", rna]).stdout
    assert "sidecar column         barcode (label)" in out
    assert "condition (label, from the design)" in out
    assert "crf_logp (score)" in out
    assert "sidecar design         keys barcode -> values condition (2 rows)" in out
    # Reading a score column as labels names its kind.
    r = run([escpod, "filter", rna, "--annotation", "crf_logp=1", "-o", tmp_path / "x.pod5"], check=False)
    assert r.returncode != 0 and "is a score column, not a label column" in r.stderr
    assert not (tmp_path / "x.pod5").exists()


# ---- the design table -------------------------------------------------------------------------


def test_design_columns_are_derived_refused_and_rederived(escpod, rna, tmp_path):
    ids = ids_of(rna)
    labels = write_labels(tmp_path / "calls.csv", ids)
    annotate(escpod, rna, tmp_path / "calls.csv", "barcode")
    (tmp_path / "design.csv").write_text("barcode,condition,replicate\nBC01,ctrl,1\nBC02,treat,1\n")
    run([escpod, "annotate", rna, "--design", tmp_path / "design.csv", "--keys", "barcode"])
    peer = escapepod.Reader(str(rna))
    assert peer.design() == {"key_columns": ["barcode"], "value_columns": ["condition", "replicate"],
                             "rows": [{"barcode": "BC01", "condition": "ctrl", "replicate": "1"},
                                      {"barcode": "BC02", "condition": "treat", "replicate": "1"}]}
    want = {i: {"BC01": "ctrl", "BC02": "treat"}[v] for i, v in labels.items() if v in ("BC01", "BC02")}
    assert peer.annotation("condition") == want
    # Writing a value column directly is refused.
    write_labels(tmp_path / "c.csv", ids, column="condition", values={ids[0]: "x"})
    r = annotate(escpod, rna, tmp_path / "c.csv", "condition", check=False)
    assert r.returncode != 0 and "derived from the design" in r.stderr
    # Rewriting the key re-derives the values.
    new = {i: "BC02" for i in ids[:50]}
    write_labels(tmp_path / "calls2.csv", ids, values=new)
    annotate(escpod, rna, tmp_path / "calls2.csv", "barcode")
    assert escapepod.Reader(str(rna)).annotation("condition") == {i: "treat" for i in ids[:50]}
    # A design whose key tuple repeats, or whose value names a reserved column, is refused.
    (tmp_path / "bad.csv").write_text("barcode,condition\nBC01,a\nBC01,b\n")
    r = run([escpod, "annotate", rna, "--design", tmp_path / "bad.csv", "--keys", "barcode"], check=False)
    assert r.returncode != 0 and "key repeated" in r.stderr
    (tmp_path / "bad2.csv").write_text("barcode,row_idx\nBC01,a\n")
    r = run([escpod, "annotate", rna, "--design", tmp_path / "bad2.csv", "--keys", "barcode"], check=False)
    assert r.returncode != 0 and "reserved" in r.stderr


def test_a_stored_derived_column_that_disagrees_with_its_keys_is_refused(escpod, rna, tmp_path):
    escapepod.Reader(str(rna)).build_index()
    n = 180
    bc = ["BC01"] * n
    cond = ["treat"] * n  # the design says BC01 -> ctrl
    design = {"key_columns": ["barcode"], "value_columns": ["condition"], "rows": [["BC01", "ctrl"]]}
    _write_peer_style(rna, [("barcode", _label_array(bc)), ("condition", _label_array(cond))],
                      {"escapepod:design": json.dumps(design)})
    r = run([escpod, "view", rna, "--include", "read_id,condition"], check=False)
    assert r.returncode != 0 and "but its keys give 'ctrl'" in r.stderr


# ---- rules and their errors -------------------------------------------------------------------


def test_write_rules(escpod, rna, tmp_path):
    ids = ids_of(rna)
    write_labels(tmp_path / "calls.csv", ids)
    for reserved in ["read_id", "batch_idx", "row_idx"]:
        r = annotate(escpod, rna, tmp_path / "calls.csv", reserved, "--column", "barcode", check=False)
        assert r.returncode == 2 and "reserved" in r.stderr, r.stderr
    assert not sidecar(rna).exists()
    (tmp_path / "empty.csv").write_text(f"read_id,barcode\n{ids[0]},BC01\n{ids[1]},\n")
    r = annotate(escpod, rna, tmp_path / "empty.csv", "barcode", check=False)
    assert r.returncode != 0 and "line 3: empty label" in r.stderr
    (tmp_path / "nan.csv").write_text(f"read_id,q\n{ids[0]},1.5\n{ids[1]},nan\n")
    r = annotate(escpod, rna, tmp_path / "nan.csv", "q", "--kind", "score", check=False)
    assert r.returncode != 0 and "line 3" in r.stderr and "NaN refused" in r.stderr
    (tmp_path / "dup.csv").write_text(f"read_id,barcode\n{ids[0]},BC01\n{ids[0]},BC02\n")
    r = annotate(escpod, rna, tmp_path / "dup.csv", "barcode", check=False)
    assert r.returncode != 0 and "appears twice" in r.stderr
    # Zero overlap with the inputs is an error and writes nothing.
    (tmp_path / "none.csv").write_text(f"read_id,barcode\n{uuid.uuid4()},BC01\n")
    r = annotate(escpod, rna, tmp_path / "none.csv", "barcode", check=False)
    assert r.returncode != 0 and "is in the inputs" in r.stderr
    assert not sidecar(rna).exists()
    # A label and a score column cannot share a name, either way round.
    annotate(escpod, rna, tmp_path / "calls.csv", "barcode")
    (tmp_path / "s.csv").write_text(f"read_id,barcode\n{ids[0]},1.5\n")
    r = annotate(escpod, rna, tmp_path / "s.csv", "barcode", "--kind", "score", check=False)
    assert r.returncode != 0 and "'barcode' is a label column" in r.stderr
    annotate(escpod, rna, tmp_path / "s.csv", "q", "--column", "barcode", "--kind", "score")
    r = annotate(escpod, rna, tmp_path / "calls.csv", "q", "--column", "barcode", check=False)
    assert r.returncode != 0 and "'q' is a score column" in r.stderr
    # None of the refused writes touched the sidecar's columns.
    assert table(rna)[0].names == ["read_id", "batch_idx", "row_idx", "barcode", "q"]


def _stale_message_checks(stderr, source_name):
    assert "does not belong to" in stderr, stderr
    assert f'from "{source_name}"' in stderr and "written by" in stderr, stderr


def test_a_sidecar_whose_pod5_changed_is_refused_with_its_provenance(escpod, rna, tmp_path):
    ids = ids_of(rna)
    write_labels(tmp_path / "calls.csv", ids)
    annotate(escpod, rna, tmp_path / "calls.csv", "barcode")
    saved = sidecar(rna).read_bytes()
    # The POD5 is rewritten (new file identifier and size): every reader refuses the sidecar.
    run([escpod, "repack", rna, "-o", tmp_path, "--force"])
    for cmd in (["view", rna, "--include", "read_id,barcode"],
                ["filter", rna, "--annotation", "barcode=BC01", "-o", tmp_path / "o.pod5"],
                ["demux", "split", rna, "--sidecar", "-d", tmp_path / "split"]):
        r = run([escpod, *cmd], check=False)
        assert r.returncode == 1, cmd
        _stale_message_checks(r.stderr, "reads.pod5")
    assert not (tmp_path / "o.pod5").exists()
    # ...and a write refuses to replace it (annotations are never silently dropped).
    r = annotate(escpod, rna, tmp_path / "calls.csv", "barcode", check=False)
    assert r.returncode == 1
    _stale_message_checks(r.stderr, "reads.pod5")
    assert sidecar(rna).read_bytes() == saved
    assert "UNUSABLE" in run([escpod, "inspect", rna]).stdout
    # A sidecar copied next to another POD5 is refused too (the peer refuses it likewise).
    other = tmp_path / "other.pod5"
    run([escpod, "filter", rna, "--min-samples", "1", "-o", other])
    shutil.copy(sidecar(rna), sidecar(other))
    r = run([escpod, "view", other, "--include", "read_id,barcode"], check=False)
    assert r.returncode == 1 and "does not belong to" in r.stderr
    with pytest.raises(Exception, match="does not match"):
        escapepod.Reader(str(rna)).annotation("barcode")


def _without_hash(t):
    """As if the peer had written it: no content hash, so the structural checks must catch it."""
    md = {k: v for k, v in t.schema.metadata.items() if k != b"escpod:content_hash"}
    return t.replace_schema_metadata(md)


def _damage_cases(path):
    """name -> (damage, expected message): each leaves a damaged sidecar beside `path`."""
    n = 180
    bc = _label_array([LABELS[k % 3] for k in range(n)])

    def truncated():
        data = sidecar(path).read_bytes()
        sidecar(path).write_bytes(data[: len(data) // 2])

    def flipped():
        # In the record batch body (between the schema message and the footer's copy of it).
        data = bytearray(sidecar(path).read_bytes())
        mid = len(data) // 2
        for k in range(mid - 8, mid + 8):
            data[k] ^= 0x5A
        sidecar(path).write_bytes(bytes(data))

    def unsorted():
        _write_peer_style(path, [("barcode", bc)], rows=list(range(n))[::-1])

    def batch_out_of_range():
        f = ipc.open_file(sidecar(path))
        t = f.read_all()
        b = t.column("batch_idx").to_pylist()
        b[17] = 7
        t = _without_hash(t.set_column(1, t.schema.field(1), pa.array(b, pa.uint32())))
        with ipc.new_file(sidecar(path), t.schema) as w:
            w.write_table(t)

    def swapped_rows():
        f = ipc.open_file(sidecar(path))
        t = f.read_all()
        r = t.column("row_idx").to_pylist()
        r[3], r[4] = r[4], r[3]
        if t.column("batch_idx")[3] != t.column("batch_idx")[4]:
            r[4] = (r[4] + 1) % 100
        t = _without_hash(t.set_column(2, t.schema.field(2), pa.array(r, pa.uint32())))
        with ipc.new_file(sidecar(path), t.schema) as w:
            w.write_table(t)

    def missing_row():
        _write_peer_style(path, [("barcode", bc.slice(0, n - 1))], rows=list(range(n - 1)))

    def version_3():
        _write_peer_style(path, [("barcode", bc)], {"escapepod:p5s_version": "3"})

    def wrong_type():
        _write_peer_style(path, [("barcode", pa.array(["BC01"] * n, pa.utf8()))])

    def nan_score():
        _write_peer_style(path, [("q", pa.array([1.0] * 10 + [float("nan")] + [1.0] * (n - 11), pa.float32()))],
                          {"escapepod:p5s_version": "2"})

    def empty_label():
        _write_peer_style(path, [("barcode", _label_array(["BC01", ""] * (n // 2)))])

    def altered_label():
        # One label changed and the file rewritten with all its metadata: decodes cleanly.
        f = ipc.open_file(sidecar(path))
        t = f.read_all()
        labels = t.column("barcode").to_pylist()
        labels[9] = "BC03" if labels[9] != "BC03" else "BC01"
        t = t.set_column(3, t.schema.field(3), _label_array(labels))
        with ipc.new_file(sidecar(path), t.schema, options=ipc.IpcWriteOptions(compression="zstd")) as w:
            w.write_table(t)

    def no_identity():
        f = ipc.open_file(sidecar(path))
        t = f.read_all()
        md = {k: v for k, v in f.schema.metadata.items() if k != b"escapepod:file_identifier"}
        t = _without_hash(t.replace_schema_metadata(md))
        with ipc.new_file(sidecar(path), t.schema) as w:
            w.write_table(t)

    return {"truncated": (truncated, "not a readable sidecar"),
            "flipped": (flipped, ""),
            "unsorted": (unsorted, "not sorted and unique"),
            "batch_out_of_range": (batch_out_of_range, "the sidecar says batch 7"),
            "swapped_rows": (swapped_rows, "the sidecar says batch 0 row"),
            "missing_row": (missing_row, "indexes 179 reads but"),
            "version_3": (version_3, ".p5s version 3 is not supported"),
            "wrong_type": (wrong_type, "expected dictionary<int32, utf8> (label) or float32 (score)"),
            "nan_score": (nan_score, "NaN score in 'q'"),
            "empty_label": (empty_label, "empty label in 'barcode'"),
            "altered_label": (altered_label, "content does not match its hash"),
            "no_identity": (no_identity, "no valid escapepod:file_identifier")}


@pytest.mark.parametrize("case", ["truncated", "flipped", "unsorted", "batch_out_of_range", "swapped_rows",
                                  "missing_row", "version_3", "wrong_type", "nan_score", "empty_label",
                                  "altered_label", "no_identity"])
def test_a_damaged_sidecar_never_gives_wrong_data(escpod, rna, tmp_path, case):
    ids = ids_of(rna)
    write_labels(tmp_path / "calls.csv", ids, values={i: LABELS[k % 3] for k, i in enumerate(ids)})
    annotate(escpod, rna, tmp_path / "calls.csv", "barcode")
    damage, message = _damage_cases(rna)[case]
    damage()
    column = "q" if case == "nan_score" else "barcode"
    out = tmp_path / "o.pod5"
    for cmd in (["filter", rna, "--annotation", f"{column}=BC01", "-o", out],
                ["view", rna, "--include", f"read_id,{column}"],
                ["demux", "split", rna, "--sidecar", "--label-column", column, "-d", tmp_path / "split"]):
        r = run([escpod, *cmd], check=False)
        assert r.returncode != 0, f"{case}: {cmd[0]} accepted a damaged sidecar:\n{r.stdout[:500]}"
        assert message in r.stderr, f"{case}: {cmd[0]}: {r.stderr}"
        assert str(sidecar(rna)) in r.stderr, f"{case}: {cmd[0]} does not name the sidecar: {r.stderr}"
    assert not out.exists()
    assert not list((tmp_path / "split").glob("*.pod5"))
    # A write refuses to build on it, and leaves it as it is.
    before = sidecar(rna).read_bytes()
    r = annotate(escpod, rna, tmp_path / "calls.csv", "barcode", check=False)
    assert r.returncode != 0
    assert sidecar(rna).read_bytes() == before


def test_inspect_read_uses_a_checked_locator(escpod, rna, tmp_path):
    ids = ids_of(rna)
    write_labels(tmp_path / "calls.csv", ids, values={ids[3]: "BC02"})
    annotate(escpod, rna, tmp_path / "calls.csv", "barcode")
    out = run([escpod, "inspect", "read", rna, ids[3]]).stdout
    assert f"read_id" in out and ids[3] in out
    assert "p5s.barcode                  BC02" in out
    # Point the read's locator at another row: inspect refuses rather than print the wrong read.
    f = ipc.open_file(sidecar(rna))
    t = f.read_all()
    pos = [str(uuid.UUID(bytes=bytes(b))) for b in t.column("read_id").to_pylist()].index(ids[3])
    r_idx = t.column("row_idx").to_pylist()
    r_idx[pos] = (r_idx[pos] + 1) % 180
    t = _without_hash(t.set_column(2, t.schema.field(2), pa.array(r_idx, pa.uint32())))
    with ipc.new_file(sidecar(rna), t.schema) as w:
        w.write_table(t)
    r = run([escpod, "inspect", "read", rna, ids[3]], check=False)
    assert r.returncode == 1 and "instead" in r.stderr and ids[3] in r.stderr
    r_idx[pos] = 5000
    t = _without_hash(t.set_column(2, t.schema.field(2), pa.array(r_idx, pa.uint32())))
    with ipc.new_file(sidecar(rna), t.schema) as w:
        w.write_table(t)
    r = run([escpod, "inspect", "read", rna, ids[3]], check=False)
    assert r.returncode == 1 and "past the batch's 180 rows" in r.stderr
    # A sidecar that fails its content hash is left out with a warning: no annotation printed.
    sidecar(rna).unlink()
    annotate(escpod, rna, tmp_path / "calls.csv", "barcode")
    t = ipc.open_file(sidecar(rna)).read_all()
    labels = t.column("barcode").to_pylist()
    labels[pos] = "BC03"
    t = t.set_column(3, t.schema.field(3), _label_array(labels))
    with ipc.new_file(sidecar(rna), t.schema) as w:
        w.write_table(t)
    r = run([escpod, "inspect", "read", rna, ids[3]])
    assert ids[3] in r.stdout and "p5s." not in r.stdout and "does not match its hash" in r.stderr


# ---- commands that use sidecars ---------------------------------------------------------------


def test_filter_by_annotation_or_within_a_name_and_across_names(escpod, rna, tmp_path):
    ids = ids_of(rna)
    labels = write_labels(tmp_path / "calls.csv", ids)
    annotate(escpod, rna, tmp_path / "calls.csv", "barcode")
    groups = {i: ("a" if k % 2 else "b") for k, i in enumerate(ids)}
    write_labels(tmp_path / "g.csv", ids, column="group", values=groups)
    annotate(escpod, rna, tmp_path / "g.csv", "group")
    out = tmp_path / "bc12.pod5"
    run([escpod, "filter", rna, "--annotation", "barcode=BC01", "--annotation", "barcode=BC02", "-o", out])
    want = sorted(i for i, v in labels.items() if v in ("BC01", "BC02"))
    assert sorted(ids_of(out)) == want and len(want) > 50
    out2 = tmp_path / "bc12a.pod5"
    run([escpod, "filter", rna, "--annotation", "barcode=BC01", "--annotation", "group=a",
         "--annotation", "barcode=BC02", "-o", out2])
    want2 = sorted(i for i in want if groups[i] == "a")
    assert sorted(ids_of(out2)) == want2 and 0 < len(want2) < len(want)
    # The official package reads every field and the signal of the selected reads unchanged.
    with pod5.Reader(rna) as src, pod5.Reader(out2) as got:
        by_id = {str(r.read_id): r for r in src.reads()}
        for r in got.reads():
            s = by_id[str(r.read_id)]
            assert np.array_equal(r.signal, s.signal)
            assert r.read_number == s.read_number and r.end_reason.name == s.end_reason.name
    # Malformed criteria and a name the sidecar lacks are errors.
    r = run([escpod, "filter", rna, "--annotation", "barcode", "-o", tmp_path / "x.pod5"], check=False)
    assert r.returncode == 2 and "expected NAME=LABEL" in r.stderr
    r = run([escpod, "filter", rna, "--annotation", "nope=1", "-o", tmp_path / "x.pod5"], check=False)
    assert r.returncode == 1 and "has no column 'nope' (columns: barcode, group)" in r.stderr
    bare = tmp_path / "bare.pod5"
    shutil.copy(rna, bare)
    r = run([escpod, "filter", bare, "--annotation", "barcode=BC01", "-o", tmp_path / "x.pod5"], check=False)
    assert r.returncode == 1 and "has no sidecar" in r.stderr
    assert not (tmp_path / "x.pod5").exists()


def test_view_include_rules(escpod, rna, tmp_path):
    ids = ids_of(rna)
    labels = write_labels(tmp_path / "calls.csv", ids)
    annotate(escpod, rna, tmp_path / "calls.csv", "barcode")
    # Annotation columns come after the built-in fields, whatever the --include order.
    out = run([escpod, "view", rna, "--include", "barcode,read_id,num_samples"]).stdout.splitlines()
    assert out[0] == "read_id\tnum_samples\tbarcode"
    got = {line.split("\t")[0]: line.split("\t")[2] for line in out[1:]}
    assert got == {i: labels.get(i, "") for i in ids}
    r = run([escpod, "view", rna, "--include", "read_id,nope"], check=False)
    assert r.returncode == 2 and "sidecar columns: barcode" in r.stderr and "num_samples" in r.stderr
    # A file without a sidecar gives empty cells next to one with a sidecar.
    bare = tmp_path / "bare"
    bare.mkdir()
    other = bare / "b.pod5"
    run([escpod, "filter", rna, "--min-samples", "1", "-o", other])  # new identifier, same reads
    out = run([escpod, "view", rna, other, "--include", "read_id,barcode", "--no-header"]).stdout.splitlines()
    assert len(out) == 360 and sum(1 for line in out[180:] if line.endswith("\t")) == 180


def test_demux_split_by_sidecar(escpod, rna, tmp_path):
    ids = ids_of(rna)
    labels = write_labels(tmp_path / "calls.csv", ids)
    annotate(escpod, rna, tmp_path / "calls.csv", "barcode")
    out = tmp_path / "split"
    run([escpod, "demux", "split", rna, "--sidecar", "-d", out])
    names = sorted(f.name for f in out.glob("*.pod5"))
    assert names == ["barcode_BC01.pod5", "barcode_BC02.pod5", "barcode_BC03.pod5", "barcode_unclassified.pod5"]
    for lab in LABELS:
        assert sorted(ids_of(out / f"barcode_{lab}.pod5")) == sorted(i for i, v in labels.items() if v == lab)
    assert sorted(ids_of(out / "barcode_unclassified.pod5")) == sorted(set(ids) - set(labels))
    out2 = tmp_path / "split2"
    run([escpod, "demux", "split", rna, "--sidecar", "--classified-only", "--prefix", "x", "-d", out2])
    assert sorted(f.name for f in out2.glob("*.pod5")) == ["x_BC01.pod5", "x_BC02.pod5", "x_BC03.pod5"]
    r = run([escpod, "demux", "split", rna, "-d", tmp_path / "s3"], check=False)
    assert r.returncode == 2 and "one of --classifications CSV or --sidecar" in r.stderr


def test_demux_annotate_with_and_without_output_dir(escpod, shared_data, rna, tmp_path):
    model = shared_data / "warpdemux/WDX4_rna004_v1_0.json"
    calls = tmp_path / "calls.csv"
    second = tmp_path / "second.pod5"
    run([escpod, "filter", rna, "--max-samples", "9000", "-o", second])
    r = run([escpod, "demux", rna, second, "--model", model, "--annotate", "--classifications", calls])
    with open(calls) as f:
        rows = {row["read_id"]: row["barcode"] for row in csv.DictReader(f)}
    assert not list(tmp_path.glob("barcode_*.pod5"))
    for path in (rna, second):
        peer = escapepod.Reader(str(path))
        got = peer.annotation("barcode")
        mine = set(ids_of(path))
        assert got == {i: rows[i] for i in mine}, path
        # WDX4's labels only, every read one (the real reads: mostly unclassified).
        assert set(got.values()) <= {"BC03", "BC04", "BC05", "BC07", "unclassified"}, got
        assert "unclassified" in got.values()
    # With -d the copies and the sidecar agree.
    out = tmp_path / "out"
    run([escpod, "demux", rna, "--model", model, "--annotate", "-d", out, "--force"])
    got = escapepod.Reader(str(rna)).annotation("barcode")
    for f in out.glob("barcode_*.pod5"):
        label = f.name[len("barcode_"):-len(".pod5")]
        assert sorted(ids_of(f)) == sorted(i for i, v in got.items() if v == label)
    # A stale sidecar stops the run before any work.
    shutil.copy(sidecar(rna), sidecar(second))
    r = run([escpod, "demux", second, "--model", model, "--annotate"], check=False)
    assert r.returncode == 1 and "does not belong to" in r.stderr


# ---- interrupted writes ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def many_reads(tmp_path_factory):
    """200,000 reads of 4 samples each (written with the escapepod package): a sidecar write that
    lasts long enough to interrupt. Returns the file and its read ids."""
    path = tmp_path_factory.mktemp("many") / "many.pod5"
    rng = np.random.default_rng(5)
    n = 200_000
    ids = [str(uuid.UUID(bytes=rng.bytes(16), version=4)) for _ in range(n)]
    with escapepod.Writer(str(path)) as w:
        ri = w.add_run_info(escapepod.create_run_info("acq0"))
        sig = np.array([1, 2, 3, 4], dtype=np.int16)
        step = 20_000
        for start in range(0, n, step):
            reads = [escapepod.ReadData(ids[k], read_number=k, run_info_index=ri, num_samples=4)
                     for k in range(start, start + step)]
            w.add_reads(reads, [sig] * len(reads))
    return path, ids


def test_sigint_during_a_sidecar_write_leaves_the_old_one(escpod, many_reads, tmp_path):
    path = tmp_path / "many.pod5"
    shutil.copy(many_reads[0], path)
    ids = many_reads[1]
    with open(tmp_path / "a.csv", "w") as f:
        f.write("read_id,barcode\n" + "".join(f"{i},A\n" for i in ids[::2]))
    with open(tmp_path / "b.csv", "w") as f:
        f.write("read_id,barcode\n" + "".join(f"{i},B{k % 7}\n" for k, i in enumerate(ids)))
    annotate(escpod, path, tmp_path / "a.csv", "barcode")
    old = sidecar(path).read_bytes()
    rng = random.Random(3)
    interrupted = 0
    for trial in range(4):
        proc = subprocess.Popen([str(escpod), "annotate", str(path), "--from", str(tmp_path / "b.csv"),
                                 "--name", "barcode", "-t", "1"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # Interrupt once the staging file exists (the write is under way), after a random delay.
        deadline = time.monotonic() + 60
        while not [p for p in tmp_path.iterdir() if p.name.startswith(".escpod-tmp-")]:
            if proc.poll() is not None or time.monotonic() > deadline:
                break
        time.sleep(rng.uniform(0, 0.003))
        proc.send_signal(signal.SIGINT)
        proc.wait()
        leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".escpod-tmp-")]
        assert leftovers == [], f"trial {trial}: staging files left: {leftovers}"
        if proc.returncode == 130:
            interrupted += 1
            assert sidecar(path).read_bytes() == old, f"trial {trial}: interrupted write changed the sidecar"
        else:
            # Finished before the signal: the new sidecar is complete; put the old one back.
            assert proc.returncode == 0
            got = escapepod.Reader(str(path)).annotation("barcode")
            assert len(got) == len(ids)
            sidecar(path).write_bytes(old)
    assert interrupted > 0, "no trial was interrupted during the write"
    assert escapepod.Reader(str(path)).annotation("barcode") == {i: "A" for i in ids[::2]}
