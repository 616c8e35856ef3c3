"""`escpod index` with `filter --ids` / `inspect read`, and `repack --reads-per-file /
--max-file-bytes`, checked with the official pod5 package."""
import os
import random
import shutil

import pod5

from conftest import run
from pod5_compare import assert_rows_equal, official_rows

SHARED = ["escapepod/drna/yeast_trna_reads.pod5", "escapepod/charging/trna_reads.pod5",
          "warpdemux/sample/small_pod5_0.pod5", "warpdemux/sample/small_pod5_1.pod5",
          "pod5/multi_fast5_zip_v3.pod5"]


def ordered_ids(path):
    with pod5.Reader(path) as r:
        return [str(x.read_id) for x in r.reads()]


def make_collection(shared_data, root):
    """Copies of shared files in sub-folders of root (an index lives beside the data)."""
    files = []
    for k, rel in enumerate(SHARED):
        dst = root / f"run{k % 2}" / os.path.basename(rel)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shared_data / rel, dst)
        files.append(dst)
    return files


def test_filter_with_index_equals_without(escpod, shared_data, tmp_path):
    root = tmp_path / "data"
    files = make_collection(shared_data, root)
    all_ids = [i for f in files for i in ordered_ids(f)]
    rng = random.Random(7)
    wanted = rng.sample(all_ids, 60)
    ids = tmp_path / "ids.txt"
    ids.write_text("\n".join(wanted) + "\n")

    plain = tmp_path / "plain.pod5"
    run([escpod, "filter", root, "--ids", ids, "-o", plain])
    res = run([escpod, "index", root])
    assert (root / ".escpod-index" / "manifest").is_file()
    assert "5 files" in res.stderr and f"{len(all_ids)} reads indexed" in res.stderr, res.stderr
    indexed = tmp_path / "indexed.pod5"
    res = run([escpod, "filter", root, "--ids", ids, "-o", indexed, "-v"])
    assert "5 of 5 inputs located through the read-id index" in res.stderr, res.stderr
    # Same reads, same order, same fields and signal, read by the official reader.
    assert ordered_ids(indexed) == ordered_ids(plain)
    assert sorted(ordered_ids(indexed)) == sorted(set(wanted))
    assert_rows_equal(official_rows(plain), official_rows(indexed), "filter with index")
    forced = tmp_path / "forced.pod5"
    run([escpod, "filter", root, "--ids", ids, "-o", forced, "--no-index"])
    assert ordered_ids(forced) == ordered_ids(plain)

    # A missing id is still an error with the index.
    ids.write_text("\n".join(wanted + ["00000000-0000-4000-8000-000000000000"]) + "\n")
    res = run([escpod, "filter", root, "--ids", ids, "-o", tmp_path / "x.pod5"], check=False)
    assert res.returncode == 1 and "in no input" in res.stderr


def test_filter_with_index_opens_only_files_holding_the_ids(escpod, shared_data, tmp_path):
    root = tmp_path / "data"
    files = make_collection(shared_data, root)
    run([escpod, "index", root])
    wanted = ordered_ids(files[2])[::7]
    ids = tmp_path / "ids.txt"
    ids.write_text("\n".join(wanted) + "\n")
    indexed = tmp_path / "indexed.pod5"
    res = run([escpod, "filter", root, "--ids", ids, "-o", indexed])
    assert "5 of 5 inputs located through the read-id index (4 holding none of the ids not opened)" \
        in res.stderr, res.stderr
    plain = tmp_path / "plain.pod5"
    run([escpod, "filter", root, "--ids", ids, "-o", plain, "--no-index"])
    assert ordered_ids(indexed) == ordered_ids(plain) == wanted
    assert_rows_equal(official_rows(plain), official_rows(indexed), "filter with index, one file")


def test_stale_and_damaged_index_never_give_wrong_reads(escpod, shared_data, tmp_path):
    root = tmp_path / "data"
    files = make_collection(shared_data, root)
    run([escpod, "index", root])
    # Rewrite one file with other reads: the index entry is stale and must not be used.
    victim = files[0]
    shutil.copyfile(shared_data / "warpdemux/sample/small_pod5_3.pod5", victim)
    new_ids = ordered_ids(victim)
    wanted = new_ids[:5] + ordered_ids(files[2])[:5]
    ids = tmp_path / "ids.txt"
    ids.write_text("\n".join(wanted) + "\n")
    out = tmp_path / "stale.pod5"
    res = run([escpod, "filter", root, "--ids", ids, "-o", out])
    assert "changed since" in res.stderr, res.stderr
    assert sorted(ordered_ids(out)) == sorted(wanted)
    # Updating rescans just that file.
    res = run([escpod, "index", root])
    assert "1 files scanned" in res.stderr and "4 unchanged" in res.stderr, res.stderr

    # Damaged segment: a warning, and the files are scanned; the output is still right.
    seg = next((root / ".escpod-index").glob("seg-*.idx"))
    data = bytearray(seg.read_bytes())
    for k in range(64, len(data), 97):
        data[k] ^= 0x5A
    seg.write_bytes(bytes(data))
    out2 = tmp_path / "damaged.pod5"
    res = run([escpod, "filter", root, "--ids", ids, "-o", out2])
    assert "index not used" in res.stderr, res.stderr
    assert sorted(ordered_ids(out2)) == sorted(wanted)
    assert_rows_equal(official_rows(out), official_rows(out2), "damaged index")
    # Damaged manifest: the same, and `escpod index` rebuilds it.
    (root / ".escpod-index" / "manifest").write_text("garbage\n")
    res = run([escpod, "filter", root, "--ids", ids, "-o", tmp_path / "m.pod5"])
    assert "index not used" in res.stderr
    res = run([escpod, "index", root])
    assert "rebuilding" in res.stderr and "5 files scanned" in res.stderr, res.stderr


def test_inspect_read_through_index(escpod, shared_data, tmp_path):
    root = tmp_path / "data"
    files = make_collection(shared_data, root)
    rid = ordered_ids(files[3])[17]
    before = run([escpod, "inspect", "read", root, rid]).stdout
    run([escpod, "index", root])
    after = run([escpod, "inspect", "read", root, rid.replace("-", "")]).stdout
    assert before == after and rid in after
    res = run([escpod, "inspect", "read", root, "00000000-0000-4000-8000-000000000000"], check=False)
    assert res.returncode == 1 and "no read" in res.stderr


def test_repack_reads_per_file(escpod, shared_data, tmp_path):
    src = shared_data / "warpdemux/sample/small_pod5_0.pod5"
    want = ordered_ids(src)
    out = tmp_path / "parts"
    run([escpod, "repack", src, "-o", out, "--reads-per-file", "150"])
    parts = sorted(out.glob("*.pod5"))
    n = len(want)
    assert [p.name for p in parts] == [f"small_pod5_0_{k:05d}.pod5" for k in range(1, (n + 149) // 150 + 1)]
    got = []
    for p in parts:
        ids = ordered_ids(p)
        assert 0 < len(ids) <= 150
        got += ids
    assert got == want  # every read exactly once, in input order
    rows = official_rows(src)
    merged = {}
    for p in parts:
        merged.update(official_rows(p))
    assert_rows_equal(rows, merged, "repack --reads-per-file")


def test_repack_max_file_bytes(escpod, shared_data, tmp_path):
    src = shared_data / "escapepod/drna/yeast_trna_reads.pod5"
    want = ordered_ids(src)
    out = tmp_path / "parts"
    limit = 400 * 1024
    run([escpod, "repack", src, "-o", out, "--max-file-bytes", "400K", "--compression", "none"])
    parts = sorted(out.glob("*.pod5"))
    assert len(parts) >= 3
    got = []
    for p in parts:
        assert p.stat().st_size <= limit, (p, p.stat().st_size)
        got += ordered_ids(p)
    assert got == want
    merged = {}
    for p in parts:
        merged.update(official_rows(p))
    assert_rows_equal(official_rows(src), merged, "repack --max-file-bytes")
    # Both limits at once, VBZ.
    out2 = tmp_path / "parts2"
    run([escpod, "repack", src, "-o", out2, "--max-file-bytes", "300000", "--reads-per-file", "50"])
    got = []
    for p in sorted(out2.glob("*.pod5")):
        assert p.stat().st_size <= 300000
        ids = ordered_ids(p)
        assert len(ids) <= 50
        got += ids
    assert got == want
