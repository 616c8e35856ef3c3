"""`escpod` is a lean front that runs the POD5 commands and hands every other command line to
`escpod-full` beside it (src/cli/front.hpp): the front must not load the heavy libraries, must
run its own commands without escpod-full, and must hand over everything else unchanged (same
process, same exit status, same output)."""
import os
import re
import subprocess

from conftest import run

# Libraries only the other commands need: none may be loaded at the front's start.
HEAVY = ["libdnnl", "libprotobuf", "libonnx_proto", "libhdf5", "libhts", "libparquet", "libcurl",
         "libsvm", "libtomlplusplus", "libgomp", "libOpenCL", "libcrypto"]


def needed_libraries(binary):
    out = subprocess.run(["readelf", "-d", str(binary)], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def test_front_links_only_what_pod5_commands_need(escpod):
    needed = needed_libraries(escpod)
    assert any(n.startswith("libarrow") for n in needed), needed
    assert not [n for n in needed if any(n.startswith(h) for h in HEAVY)], needed
    full = escpod.parent / "escpod-full"
    assert full.is_file(), full
    # escpod-full does link the heavy ones (else the split would not be worth its complexity).
    assert any(n.startswith("libdnnl") for n in needed_libraries(full)), needed_libraries(full)


def test_other_commands_run_in_escpod_full(escpod, shared_data, tmp_path):
    # --help lists every command, as escpod-full's does.
    top = run([escpod, "--help"]).stdout
    assert top == run([escpod.parent / "escpod-full", "--help"]).stdout.replace(
        str(escpod.parent / "escpod-full"), str(escpod))
    for name in ["inspect", "view", "filter", "index", "demux", "model", "bam-filter", "simulate"]:
        assert re.search(rf"^\s+{name}\s", top, re.M), (name, top)
    # A handed-over command: its output and exit status are escpod-full's.
    r = run([escpod, "demux", "evaluate", "--calls", tmp_path / "none.csv", "--truth", tmp_path / "none.csv"],
            check=False)
    assert r.returncode == 1 and "none.csv" in r.stderr, r.stderr
    r = run([escpod, "demux", "--nonsense"], check=False)
    assert r.returncode == 2, r.stderr


def test_front_commands_need_no_escpod_full(escpod, shared_data, tmp_path):
    env = dict(os.environ, ESCPOD_FULL=str(tmp_path / "missing-escpod-full"))
    src = shared_data / "escapepod/drna/yeast_trna_reads.pod5"
    r = run([escpod, "view", src, "--include", "read_id", "--no-header"], env=env)
    assert len(r.stdout.split()) == 180
    assert run([escpod, "--version"], env=env).stdout.startswith("escpod ")
    # Anything else fails clearly, naming where escpod-full was looked for.
    r = run([escpod, "simulate", "--help"], check=False, env=env)
    assert r.returncode == 1
    assert "missing-escpod-full" in r.stderr and "ESCPOD_FULL" in r.stderr, r.stderr


def test_version_names_the_cpu_and_the_kernels_chosen(escpod):
    out = run([escpod, "--version"]).stdout
    assert out.startswith("escpod ")
    lines = dict(line.split(": ", 1) for line in out.splitlines()[1:])
    assert set(lines) == {"cpu", "nn", "demux", "pod5", "libraries"}, out
    assert "AVX2/FMA" in lines["cpu"] and "AMX-BF16" in lines["cpu"]
    assert "oneDNN" in out and "float32 dense products" in out
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
    # `cmake --install BUILD --prefix P` gives P/bin/escpod and P/bin/escpod-full, which run from
    # there (the front finds escpod-full beside itself; both find their Arrow).
    build = escpod.parent.parent.parent
    assert (build / "CMakeCache.txt").is_file(), build
    run(["cmake", "--install", build, "--prefix", tmp_path, "--component", "cli"])
    installed = tmp_path / "bin" / "escpod"
    assert sorted(p.name for p in (tmp_path / "bin").iterdir()) == ["escpod", "escpod-full"]
    version = run([installed, "--version"]).stdout
    assert version.startswith("escpod ") and "nn: oneDNN" in version, version  # escpod-full's report
    pod5 = shared_data / "pod5" / "multi_fast5_zip_v3.pod5"
    assert run([installed, "view", pod5]).stdout == run([escpod, "view", pod5]).stdout
    ldd = run(["ldd", installed.parent / "escpod-full"]).stdout
    assert "not found" not in ldd, ldd
