"""escpod against the official pod5 package: reading, writing, and both directions."""
import datetime
import uuid

import numpy as np
import pod5

from conftest import run
from pod5_compare import assert_rows_equal, assert_same_reads, official_rows


def test_every_shared_file_agrees_with_official_reader(escpod, real_pod5_files):
    total = 0
    for path in real_pod5_files:
        total += assert_same_reads(escpod, path)
    assert total == 4 * 10 + 180 + 20 + 800


def test_repacked_files_read_identically_by_official_reader(escpod, real_pod5_files, tmp_path):
    for k, path in enumerate(real_pod5_files):
        out = tmp_path / f"r{k}"
        run([escpod, "repack", path, "-o", out])
        written = out / path.name
        original = official_rows(path)
        repacked = official_rows(written)
        assert_rows_equal(original, repacked, f"repack of {path}")
        with pod5.Reader(path) as a, pod5.Reader(written) as b:
            runs_a = {r.run_info.acquisition_id: r.run_info for r in a.reads()}
            runs_b = {r.run_info.acquisition_id: r.run_info for r in b.reads()}
            assert runs_a == runs_b
        # and escpod reads its own output the same way
        assert_same_reads(escpod, written)


def test_uncompressed_repack_round_trips(escpod, shared_data, tmp_path):
    src = shared_data / "escapepod/drna/yeast_trna_reads.pod5"
    run([escpod, "repack", src, "-o", tmp_path / "raw", "--compression", "none"])
    run([escpod, "repack", tmp_path / "raw" / src.name, "-o", tmp_path / "vbz"])
    with pod5.Reader(tmp_path / "raw" / src.name) as raw:
        assert not raw.is_vbz_compressed
    assert_rows_equal(official_rows(src), official_rows(tmp_path / "vbz" / src.name), "raw round trip")


def _official_multi_batch_file(path, n_reads=2500):
    """A V7 file from the official writer: several reads batches, dictionary deltas."""
    rng = np.random.default_rng(7)
    runs = []
    for k in range(3):
        runs.append(pod5.RunInfo(
            acquisition_id=f"acq{k}",
            acquisition_start_time=datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc),
            adc_max=4095, adc_min=-4096, context_tags={"a": str(k)}, experiment_name="e",
            flow_cell_id="f", flow_cell_product_code="p", protocol_name="pn", protocol_run_id="pr",
            protocol_start_time=datetime.datetime(2024, 1, 2, tzinfo=datetime.timezone.utc),
            sample_id="s", sample_rate=4000, sequencing_kit="k", sequencer_position="sp",
            sequencer_position_type="spt", software="sw", system_name="sn", system_type="st",
            tracking_id={"z": "1", "a": "2"}))
    with pod5.Writer(path) as writer:
        for i in range(n_reads):
            n = int(rng.integers(0, 3000))
            signal = np.cumsum(rng.integers(-20, 21, n)).astype(np.int16)
            writer.add_read(pod5.Read(
                read_id=uuid.uuid4(),
                end_reason=pod5.EndReason(pod5.EndReasonEnum(int(rng.integers(0, 6))), bool(i % 2)),
                calibration=pod5.Calibration(float(i % 50), 0.25),
                pore=pod5.Pore(channel=1 + i % 512, well=1 + i % 4, pore_type=f"pore{i // 800}"),
                read_number=i, start_sample=i * 1000, median_before=float(i) / 3,
                run_info=runs[(i // 900) % 3], signal=signal))


def test_official_multi_batch_file(escpod, tmp_path):
    src = tmp_path / "official.pod5"
    _official_multi_batch_file(src)
    assert "read batches           3" in run([escpod, "inspect", src]).stdout
    assert assert_same_reads(escpod, src) == 2500
    run([escpod, "repack", src, "-o", tmp_path / "out"])
    assert_rows_equal(official_rows(src), official_rows(tmp_path / "out" / src.name), "repack")


def test_inspect_read_and_view_options(escpod, shared_data):
    path = shared_data / "pod5/multi_fast5_zip_v3.pod5"
    out = run([escpod, "inspect", "read", path, "0000173cbf6744e79a9c1ad0bc728e74"]).stdout
    assert "num_samples" in out and "123627" in out
    view = run([escpod, "view", path, "--no-header", "--include", "read_id,num_samples"]).stdout
    assert view.splitlines()[0] == "0000173c-bf67-44e7-9a9c-1ad0bc728e74\t123627"
    bad = run([escpod, "view", path, "--include", "nonsense"], check=False)
    assert bad.returncode == 2 and "unknown field 'nonsense'" in bad.stderr


def test_errors_name_the_file_and_exit_1(escpod, tmp_path):
    bad = tmp_path / "bad.pod5"
    bad.write_bytes(b"not a pod5 at all")
    result = run([escpod, "inspect", bad], check=False)
    assert result.returncode == 1
    assert "bad.pod5" in result.stderr and "not a POD5 file" in result.stderr


def test_view_into_closed_pipe_is_quiet(escpod, shared_data):
    import subprocess
    cmd = f"'{escpod}' view '{shared_data}' | head -n 2"
    result = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert len(result.stdout.splitlines()) == 2
