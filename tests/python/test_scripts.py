"""Small scripts written against the official pod5 API give the same output run with
`import escpod as pod5`."""
import contextlib
import io
import shutil
import textwrap

import pod5 as official
import pytest

import escpod

SCRIPTS = {
    "iterate": """
        with pod5.Reader(PATH) as reader:
            print(reader.num_reads, reader.batch_count, reader.file_version, reader.writing_software)
            for read in reader.reads():
                sig = read.signal
                print(read.read_id, read.read_number, read.pore.channel, read.pore.well,
                      read.pore.pore_type, read.end_reason.name, read.end_reason.forced,
                      read.start_sample, read.num_samples, read.median_before,
                      read.run_info.acquisition_id, read.run_info.sample_rate,
                      read.run_info.acquisition_start_time.isoformat(),
                      len(sig), int(sig.sum()), sig[:5].tolist(), read.byte_count)
    """,
    "select_missing": """
        with pod5.Reader(PATH) as reader:
            ids = reader.read_ids
            wanted = ids[::7] + ["00000000-0000-0000-0000-000000000001"]
            try:
                print(sum(1 for _ in reader.reads(selection=wanted)))
            except RuntimeError as e:
                print("RuntimeError", str(e).split(" in the file")[0])
            for r in reader.reads(selection=wanted, missing_ok=True):
                print(r.read_id, r.sample_count)
    """,
    "calibration": """
        import numpy as np
        with pod5.Reader(PATH) as reader:
            for read in reader:
                c = read.calibration
                pa = read.signal_pa
                again = read.calibrate_signal_array(read.signal)
                print(read.read_id, c.offset, c.scale, pa.dtype, float(pa.mean()),
                      bool(np.array_equal(pa, again)), read.calibration_digitisation,
                      read.calibration_range)
    """,
    "dataset_tree": """
        with pod5.DatasetReader(TREE, recursive=True, threads=1) as ds:
            print(len(ds), [p.name for p in ds.paths])
            print(sorted(str(r.read_id) for r in ds)[:5])
            ids = sorted(ds.read_ids)
            for rid in ids[::40]:
                rec = ds.get_read(rid)
                print(rid, rec.read_id, rec.num_samples, ds.get_path(rid).name)
            print(ds.get_read("00000000-0000-0000-0000-000000000001"), ds.has_duplicate())
        with pod5.DatasetReader(TREE, recursive=False) as ds:
            print(len(ds.paths))
    """,
    "write_read_back": """
        import datetime, uuid
        import numpy as np
        with pod5.Reader(PATH) as reader:
            reads = [r.to_read() for r in reader]
        reads[0].read_id = uuid.UUID(int=99)
        with pod5.Writer(OUT) as w:
            w.add_read(reads[0])
            w.add_reads(reads[1:])
        with pod5.Reader(OUT) as back:
            print(back.num_reads, back.writing_software)
            for a, b in zip(reads, back.reads()):
                print(b.read_id == a.read_id, np.array_equal(a.signal, b.signal),
                      b.run_info == a.run_info, b.pore == a.pore, b.end_reason == a.end_reason,
                      b.calibration == a.calibration, b.read_number, b.median_before)
        try:
            pod5.Writer(OUT)
        except FileExistsError as e:
            print("FileExistsError")
    """,
}


def _run(module, code, **paths):
    out = io.StringIO()
    env = {"pod5": module, **{k: str(v) for k, v in paths.items()}}
    with contextlib.redirect_stdout(out):
        exec(textwrap.dedent(code), env)
    return out.getvalue()


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_script_same_output(name, shared_data, tmp_path):
    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    src = sorted((shared_data / "warpdemux/sample").glob("*.pod5"))
    shutil.copy(src[0], tree / "top.pod5")
    shutil.copy(src[1], tree / "a" / "one.pod5")
    shutil.copy(src[2], tree / "a" / "b" / "two.pod5")
    (tree / "a" / "notes.txt").write_text("not a pod5")
    for path in (shared_data / "pod5/multi_fast5_zip_v1.pod5", src[3]):
        results = []
        for module, tag in ((official, "official"), (escpod, "escpod")):
            out = tmp_path / f"{tag}-{path.stem}.pod5"
            results.append(_run(module, SCRIPTS[name], PATH=path, TREE=tree, OUT=out))
        assert results[0] == results[1], f"{name} on {path.name} differs"
        assert len(results[0].splitlines()) >= 2
