"""Independent model of what a damaged POD5 still holds, for the recover tests.

Given the bytes of an intact file (or a killed writer's files), lists each embedded Arrow
table's messages with their absolute end offsets (pyarrow's message reader), and from that
computes which reads a file cut at byte C (or a killed writer) still holds completely: reads
rows of record batches that end at or before C whose signal rows all lie in the signal
batches that end at or before C, and whose run info is there too.
"""
import dataclasses
import sys

import pyarrow as pa

SIGNATURE = b"\x8bPOD\r\n\x1a\n"
ARROW = b"ARROW1\x00\x00"


@dataclasses.dataclass
class Table:
    kind: str                 # signal, reads, run_info
    start: int                # absolute offset of its ARROW1 header
    schema_end: int = 0
    batch_ends: list = dataclasses.field(default_factory=list)  # absolute, per record batch
    batch_rows: list = dataclasses.field(default_factory=list)
    # reads: per batch, [(read_id, [signal rows], acquisition_id)]; run_info: acquisition ids
    batch_values: list = dataclasses.field(default_factory=list)


def _kind(schema):
    names = schema.names
    if "read_number" in names:
        return "reads"
    if "acquisition_id" in names:
        return "run_info"
    return "signal"


def _uuid_text(b: bytes) -> str:
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def scan_table(data: bytes, start: int, end: int) -> Table:
    """The messages of the Arrow stream at data[start:end] (start at its ARROW1 header)."""
    assert data[start:start + 8] == ARROW, f"no Arrow header at {start}"
    src = pa.BufferReader(pa.py_buffer(data[start + 8:end]))
    messages = pa.ipc.MessageReader.open_stream(src)
    schema_msg = messages.read_next_message()
    schema = pa.ipc.read_schema(schema_msg)
    table = Table(kind=_kind(schema), start=start, schema_end=start + 8 + src.tell())
    while True:
        try:
            msg = messages.read_next_message()
        except (StopIteration, OSError, pa.ArrowInvalid):
            break
        if msg.type == "record batch":
            table.batch_ends.append(start + 8 + src.tell())
    # Values per batch through a stream reader (it applies dictionaries and deltas in order).
    reader = pa.ipc.open_stream(pa.py_buffer(data[start + 8:end]))
    for k in range(len(table.batch_ends)):
        batch = reader.read_next_batch()  # complete: its message ends before `end`
        table.batch_rows.append(batch.num_rows)
        if table.kind == "reads":
            ids = batch.column("read_id")
            rows = batch.column("signal").to_pylist()
            run = batch.column("run_info")
            if pa.types.is_dictionary(run.type) and pa.types.is_struct(run.type.value_type):
                acq = [r["acquisition_id"] for r in run.to_pylist()]
            else:
                acq = run.to_pylist()
            storage = ids.storage if hasattr(ids, "storage") else ids
            table.batch_values.append(
                [(_uuid_text(storage[i].as_py()), rows[i], acq[i]) for i in range(batch.num_rows)])
        elif table.kind == "run_info":
            table.batch_values.append(batch.column("acquisition_id").to_pylist())
    return table


def finished_tables(data: bytes):
    """The embedded tables of an intact file, located by its section markers."""
    assert data[:8] == SIGNATURE
    marker = data[8:24]
    starts = [24]
    pos = 24
    while True:
        pos = data.find(marker, pos + 1)
        if pos < 0:
            break
        if pos % 8 == 0 and data[pos + 16:pos + 24] == ARROW:
            starts.append(pos + 16)
    bounds = starts[1:] + [len(data)]
    return [scan_table(data, s, e) for s, e in zip(starts, bounds)]


def complete_reads(tables, cut: int, legacy_run_info: bool):
    """Read ids a file cut at `cut` still holds completely, in file order."""
    by = {t.kind: t for t in tables}
    sig = by["signal"]
    n_signal = 0
    for end, rows in zip(sig.batch_ends, sig.batch_rows):
        if end > cut:
            break
        n_signal += rows
    runs = set()
    if "run_info" in by:
        for end, values in zip(by["run_info"].batch_ends, by["run_info"].batch_values):
            if end > cut:
                break
            runs.update(values)
    out = []
    reads = by.get("reads")
    if reads is None:
        return out
    for end, values in zip(reads.batch_ends, reads.batch_values):
        if end > cut:
            break
        for read_id, rows, acq in values:
            if all(r < n_signal for r in rows) and (legacy_run_info or acq in runs):
                out.append(read_id)
    return out


def stream_prefix(data: bytes, start: int = 0):
    """A killed writer's file: complete record batches of the stream at `start`, and the offset
    after the last one (or after the schema)."""
    if len(data) < start + 8:
        return None
    try:
        return scan_table(data, start, len(data))
    except (OSError, pa.ArrowInvalid):
        return None


if __name__ == "__main__":
    blob = open(sys.argv[1], "rb").read()
    for t in finished_tables(blob):
        print(t.kind, t.start, t.schema_end, t.batch_ends, t.batch_rows)
