"""Progress on stderr: a bar redrawn in place in a real terminal (tmux), plain lines in a pipe,
nothing with -q. ESCPOD_TEST_PROGRESS_DELAY_US slows each counted read so a small simulated run
lasts a few seconds."""
import os
import pathlib
import re
import shutil
import subprocess
import time

import pytest

from conftest import run

SLOW = {"ESCPOD_TEST_PROGRESS_DELAY_US": "20000"}  # 150 reads: about 3 s


def _env(**extra):
    env = dict(os.environ)
    env.pop("ESCPOD_PROGRESS", None)
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def small_pod5(escpod, tmp_path_factory):
    d = tmp_path_factory.mktemp("progress")
    out = d / "small.pod5"
    run([escpod, "simulate", "-o", out, "--reads", "150", "--kmer-model", "synthetic:5", "-q", "-t", "2"])
    return out


def _tmux(*args, check=True):
    return subprocess.run(["tmux", "-L", "escpod_progress_test", *args], capture_output=True, text=True, check=check)


def test_bar_in_a_real_terminal(escpod, tmp_path):
    assert shutil.which("tmux"), "tmux is required (scripts/setup.sh installs it)"
    out = tmp_path / "sim.pod5"
    done = tmp_path / "done"
    # A wide pane so the whole bar fits; the command's exit status lands in `done`.
    cmd = (f"env ESCPOD_TEST_PROGRESS_DELAY_US=20000 {escpod} simulate -o {out} --reads 150 "
           f"--kmer-model synthetic:5 -t 2; echo $? > {done}; sleep 30")
    _tmux("kill-server", check=False)
    _tmux("new-session", "-d", "-x", "150", "-y", "20", "-s", "t", "sh", "-c", cmd)
    try:
        snapshots = []
        deadline = time.time() + 60
        while not done.exists() and time.time() < deadline:
            snapshots.append(_tmux("capture-pane", "-p", "-t", "t").stdout)
            time.sleep(0.3)
        assert done.exists(), "simulate did not finish within 60 s"
        time.sleep(0.3)
        final = _tmux("capture-pane", "-p", "-t", "t").stdout
    finally:
        _tmux("kill-server", check=False)
    assert done.read_text().strip() == "0"
    bar = re.compile(r"^simulate \[[#> ]+\] +(\d+)% +([\d,]+)/150 reads .*reads/s", re.M)
    seen = []
    for snap in snapshots:
        m = bar.search(snap)
        if m:
            seen.append(int(m.group(2).replace(",", "")))
            # Redrawn in place: one bar line on screen, never a scrolling list of bars.
            assert len(bar.findall(snap)) == 1, snap
    assert len(set(seen)) >= 3, f"the bar did not update: {seen}"
    assert seen == sorted(seen), seen
    assert 0 < seen[0] < 150
    lines = [l for l in final.splitlines() if l.strip()]
    # Ends cleanly: the final bar at 100%, then the summary on its own line, then the log line.
    final_bar = [l for l in lines if bar.match(l)]
    assert len(final_bar) == 1 and " 100% 150/150 reads" in final_bar[0], final
    summary = [l for l in lines if l.startswith("escpod: simulate: done, 150 reads")]
    assert len(summary) == 1, final
    assert lines.index(summary[0]) == lines.index(final_bar[0]) + 1, final


def test_plain_lines_in_a_pipe(escpod, small_pod5, tmp_path):
    r = run([escpod, "merge", small_pod5, "-o", tmp_path / "m.pod5"],
            env=_env(ESCPOD_PROGRESS_INTERVAL="0.3", ESCPOD_TEST_PROGRESS_DELAY_US="10000"))
    err = r.stderr
    assert "\r" not in err and "\x1b" not in err, repr(err)
    lines = [l for l in err.splitlines() if l.startswith("escpod: merge: ")]
    periodic = [l for l in lines if "elapsed" in l]
    assert len(periodic) >= 2, err
    for l in periodic:
        assert re.match(r"escpod: merge: [\d,]+/150 reads \(\d+\.\d%\), .*B/.*B, .* elapsed", l), l
    assert lines[-1].startswith("escpod: merge: done, 150 reads, "), err


def test_quiet_prints_nothing(escpod, small_pod5, tmp_path):
    r = run([escpod, "merge", small_pod5, "-o", tmp_path / "q.pod5", "-q"],
            env=_env(ESCPOD_PROGRESS_INTERVAL="0.2", ESCPOD_TEST_PROGRESS_DELAY_US="5000"))
    assert r.stderr == ""


def test_quick_runs_print_no_progress(escpod, small_pod5, tmp_path):
    # Without the delay the merge ends before the first interval: stderr stays as it was.
    r = run([escpod, "merge", small_pod5, "-o", tmp_path / "f.pod5"], env=_env())
    assert "merge:" not in r.stderr, r.stderr
