"""SIGINT and SIGTERM stop a run cleanly: the first signal stops the streaming engine (the run
unwinds, logs why and removes its staging files; no output is left), exit 130 for SIGINT and 143
for SIGTERM, as `escpod --help` states; a second signal exits at once, still leaving no files."""
import signal
import subprocess
import time
import uuid

import pod5
import pytest


@pytest.fixture(scope="module")
def long_input(tmp_path_factory, shared_data):
    """~12000 real RNA004 reads (the 180 real ones repeated with new ids): a merge that runs
    long enough to be interrupted mid-stream."""
    path = tmp_path_factory.mktemp("long") / "long.pod5"
    with pod5.Reader(shared_data / "escapepod/drna/yeast_trna_reads.pod5") as src:
        reads = [r.to_read() for r in src.reads()]
    with pod5.Writer(path) as writer:
        for _ in range(66):
            for r in reads:
                r.read_id = uuid.uuid4()
                writer.add_read(r)
    return path


def start_merge_and_wait_for_staging(escpod, src, out_dir):
    """Starts a merge into out_dir and returns once its staging file exists (the engine runs)."""
    proc = subprocess.Popen([str(escpod), "merge", str(src), "-o", str(out_dir / "out.pod5"), "-t", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not list(out_dir.iterdir()):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"merge never created its staging file (exit {proc.returncode})")
        time.sleep(0.001)
    return proc


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_first_signal_stops_the_engine_cleanly(escpod, long_input, tmp_path, sig, code):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    proc = start_merge_and_wait_for_staging(escpod, long_input, out_dir)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.fail("merge finished before the signal arrived; input too small for this test")
    assert proc.returncode == code, stderr
    # The run unwound through the engine (a handler that exits on the spot logs nothing).
    assert "interrupted" in stderr, stderr
    assert list(out_dir.iterdir()) == [], "output or staging files left behind"


def test_second_signal_exits_at_once(escpod, long_input, tmp_path):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    proc = start_merge_and_wait_for_staging(escpod, long_input, out_dir)
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.fail("merge finished before the signals arrived; input too small for this test")
    assert proc.returncode == 130
    assert list(out_dir.iterdir()) == [], "output or staging files left behind"


def test_help_states_the_exit_codes(escpod):
    r = subprocess.run([str(escpod), "--help"], capture_output=True, text=True)
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    assert "130 stopped by SIGINT (Ctrl-C), 143 by SIGTERM" in text, r.stdout
    assert "a second signal exits at once" in text, r.stdout
