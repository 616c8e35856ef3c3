"""`escpod` is one program: every command, one process (what `ps` and `pgrep -x escpod` see), one
file to install (`cmake --install`, the wheel); `--version` names what it found and chose; an
unknown command is named with the close ones."""
import os
import re
import subprocess

from conftest import run


def test_one_program_runs_every_command_in_its_own_process(escpod, shared_data, tmp_path):
    top = run([escpod, "--help"]).stdout
    for name in ["inspect", "view", "filter", "index", "merge", "demux", "model", "bam-filter", "bam-demux",
                 "simulate", "convert", "report"]:
        assert re.search(rf"^\s+{name}\s", top, re.M), (name, top)
    # The process that runs a demux command is this file (no hand-over to a second program).
    src = shared_data / "escapepod/drna/yeast_trna_reads.pod5"
    proc = subprocess.Popen([escpod, "demux", "--model", shared_data / "warpdemux/WDX4_rna004_v1_0.json",
                             "--method", "llr", src, "--classifications", tmp_path / "c.csv", "-t", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    exe = os.readlink(f"/proc/{proc.pid}/exe") if os.path.exists(f"/proc/{proc.pid}/exe") else None
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert exe is None or os.path.realpath(exe) == os.path.realpath(escpod), exe
    r = run([escpod, "demux", "--nonsense"], check=False)
    assert r.returncode == 2, r.stderr


def test_version_names_the_cpu_and_the_kernels_chosen(escpod):
    out = run([escpod, "--version"]).stdout
    assert out.startswith("escpod ")
    lines = dict(line.split(": ", 1) for line in out.splitlines()[1:])
    assert set(lines) == {"cpu", "nn", "demux", "pod5", "libraries"}, out
    assert "AVX2/FMA" in lines["cpu"] and "AMX-BF16" in lines["cpu"]
    assert "oneDNN" in out and "float32 dense products" in out and "opt-in bfloat16" in out
    assert re.search(r"DTW float32 on (sse2|avx2|avx512)", out) and re.search(r"svb16 decoder (avx2|ssse3|scalar)", out)
    # The libraries loaded, each by its own report: Arrow is the pinned pyarrow's.
    import pyarrow
    libraries = dict(item.rsplit(" ", 1) for item in lines["libraries"].split(", "))
    assert set(libraries) == {"Arrow", "zstd", "zlib", "oneTBB", "HDF5", "htslib", "libsvm"}, out
    assert libraries["Arrow"] == pyarrow.__version__, out
    assert all(re.fullmatch(r"\d+(\.\d+)*", v) for v in libraries.values()), out


def test_an_unknown_command_is_named_with_the_close_ones(escpod):
    r = run([escpod, "inspectt", "x.pod5"], check=False)
    assert r.returncode == 2 and "'inspectt' is not a command; did you mean inspect?" in r.stderr, r.stderr
    r = run([escpod, "xyzzy"], check=False)
    assert r.returncode == 2 and "the commands are" in r.stderr and "bam-demux" in r.stderr, r.stderr


def test_cmake_install_puts_both_programs_in_a_prefix(escpod, shared_data, tmp_path):
    # `cmake --install BUILD --prefix P` gives P/bin/escpod, which runs from there (it finds its
    # Arrow through its RPATH).
    build = escpod.parent.parent.parent
    assert (build / "CMakeCache.txt").is_file(), build
    run(["cmake", "--install", build, "--prefix", tmp_path, "--component", "cli"])
    installed = tmp_path / "bin" / "escpod"
    assert sorted(p.name for p in (tmp_path / "bin").iterdir()) == ["escpod"]
    version = run([installed, "--version"]).stdout
    assert version.startswith("escpod ") and "nn: oneDNN" in version, version
    pod5 = shared_data / "pod5" / "multi_fast5_zip_v3.pod5"
    assert run([installed, "view", pod5]).stdout == run([escpod, "view", pod5]).stdout
    ldd = run(["ldd", installed]).stdout
    assert "not found" not in ldd, ldd
