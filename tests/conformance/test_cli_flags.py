"""One meaning per flag name across every command, and no flag a command would ignore.

The flags are the CLI's own: every command's `--help` (enumerated from `escpod --help`, recursively),
not a list kept here. Rules: a name is a flag or takes a value, the same in every command; a name
shared by several commands either has one help text (one definition: cli/command.hpp's helpers)
or is listed below with why it means the same thing; every command that writes a file has --force
and --fsync; renamed spellings are hidden, still work for one release and warn. Then the flags the
issue found accepted and ignored are refused (exit 2, naming the flag and why)."""
import re

import pytest

from conftest import run

# Defined once (cli/command.hpp): the same help text in every command that has it.
ONE_TEXT = {"--force", "--fsync", "--skip-bad", "--threads", "--quiet", "--verbose", "--compression",
            "--config", "--dtw-precision", "--help"}
# Shared names whose help says what the command does with the same thing.
SAME_MEANING = {
    "--output": "the command's output: a file, or a folder where the command writes several",
    "--output-dir": "the folder of one output file per label",
    "--model": "the run's model (what each stage needs of it in the help)",
    "--classifications": "the classifications table: written by demux, read by the others",
    "--bam": "the basecalled BAM (BAM/SAM/CRAM) whose records the command reads",
    "--prefix": "the file-name prefix of per-label outputs",
    "--memory-mib": "MiB held in memory before flushing or spilling (what is held, per command)",
    "--method": "the boundary detector: cnn or llr",
    "--cnn-model": "the boundary CNN's ONNX file",
    "--ids": "a file of read ids to select",
    "--missing-ids": "a file to write the selected ids that were not found",
    "--no-index": "scan the files instead of using their read-id index",
    "--seed": "the random seed",
    "--truth": "the ground-truth CSV (written by simulate, read by evaluate)",
    "--info": "describe the model as the command will run it, then exit",
}
# Renamed spellings: command, old, new, arguments that make the command parse.
DEPRECATED = [
    (["index"], "--memory", "--memory-mib", ["64"]),
    (["report"], "--json", "--json-output", ["x.json"]),
    (["model", "info"], "--reference", "--reference-kernels", []),
    (["demux", "train-svm"], "--template", "--settings-from", ["m.json"]),
    (["demux", "train-svm"], "--name", "--model-name", ["m"]),
    (["demux", "train"], "--template", "--settings-from", ["m.json"]),
    (["demux", "split"], "--annotation", "--label-column", ["barcode"]),
    (["bam-demux"], "--annotation", "--label-column", ["barcode"]),
]


def commands(escpod):
    """(path, help text) of every command and subcommand."""
    out = []

    def walk(path):
        text = run([escpod, *path, "--help"]).stdout
        out.append((path, text))
        m = re.search(r"\nSubcommands:\n(.*?)(?:\n\n|\Z)", text, re.S)
        for line in (m.group(1).splitlines() if m else []):
            if re.match(r"^  \S", line):
                walk(path + [line.split()[0]])

    walk([])
    return out


def options(text):
    """{long name: (takes a value, value type, help text)} of one --help."""
    found = {}
    for block in re.findall(r"\n(?:Options|[^\n]*\(model folders\)):\n(.*?)(?=\n\S|\Z)", text, re.S):
        for line in block.splitlines():
            m = re.match(r"^  (-\S+)(?: ([A-Z]\S*(?: \.\.\.)?(?: REQUIRED)?))?(?:\s{2,}(.*))?$", line)
            if not m:
                continue
            kind = (m.group(2) or "").split(":")[0].split("=")[0].split()[0] if m.group(2) else ""
            kind = {"UINT": "NUMBER", "INT": "NUMBER", "FLOAT": "NUMBER"}.get(kind, kind)
            for name in m.group(1).split(","):
                if name.startswith("--"):
                    found[name] = (bool(m.group(2)), kind, (m.group(3) or "").strip())
    return found


@pytest.fixture(scope="module")
def table(escpod):
    return [(" ".join(path), options(text)) for path, text in commands(escpod)]


def test_the_table_covers_every_command(table):
    names = [c for c, _ in table]
    for c in ["view", "filter", "merge", "index", "demux", "demux detect", "demux classify", "demux basecall",
              "demux train", "demux train-svm", "bam-demux", "report", "model run", "convert fast5"]:
        assert c in names, names
    assert sum(len(o) for _, o in table) > 200


def test_every_flag_name_has_one_meaning(table):
    uses = {}
    for command, opts in table:
        for name, spec in opts.items():
            uses.setdefault(name, []).append((command, spec))
    problems = []
    for name, where in sorted(uses.items()):
        kinds = {(takes, kind) for _, (takes, kind, _) in where}
        if len(kinds) > 1:
            problems.append(f"{name} is a flag in some commands and takes a value in others: {where}")
        commands_using = {c for c, _ in where}
        if len(commands_using) < 2 or name in SAME_MEANING:
            continue
        # A shared name has one definition (one help text: cli/command.hpp's helpers, the CRF
        # flags' add_crf_flags), or is reviewed into SAME_MEANING.
        texts = {text for _, (_, _, text) in where}
        if len(texts) > 1:
            problems.append(f"{name} has several help texts in {sorted(commands_using)}, so several definitions: "
                            f"give it one (cli/command.hpp) or review it into SAME_MEANING: {texts}")
    for name in ONE_TEXT:
        assert name in uses, name  # the names the helpers define are in the table
    assert not problems, "\n".join(problems)


def test_every_command_that_writes_a_file_can_force_and_sync_it(table):
    for command, opts in table:
        if command.split(" ")[0] in ("index",):  # the index syncs its own files always (crash-safe cache)
            continue
        if "--output" in opts or "--output-dir" in opts:
            assert "--fsync" in opts and "--force" in opts, command


@pytest.mark.parametrize("path,old,new,value", DEPRECATED)
def test_renamed_flags_keep_their_old_spelling_hidden_for_one_release(escpod, path, old, new, value):
    text = run([escpod, *path, "--help"]).stdout
    assert re.search(rf"^\s+(-\S+,)?{re.escape(new)}(?=[\s,]|$)", text, re.M), (new, text)
    assert not re.search(rf"^\s+(-\S+,)?{re.escape(old)}(?=[\s,]|$)", text, re.M), (old, text)
    r = run([escpod, *path, old, *value, "--help"], check=False)  # parsed, then help: nothing runs
    assert r.returncode == 0, r.stderr
    r = run([escpod, *path, old, *value, new, *value], check=False)
    assert r.returncode == 2, r.stderr  # never both


def test_a_renamed_flag_warns_and_works(escpod, shared_data, tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    (folder / "a.pod5").write_bytes((shared_data / "pod5/multi_fast5_zip_v3.pod5").read_bytes())
    r = run([escpod, "index", folder, "--memory", "16"])
    assert "--memory is deprecated: use --memory-mib" in r.stderr, r.stderr
    assert (folder / ".escpod-index").exists()


def test_flags_a_command_would_ignore_are_refused(escpod, shared_data, tmp_path):
    wdx4 = shared_data / "warpdemux/WDX4_rna004_v1_0.json"
    gbm = shared_data / "escapepod/gbm/model.json"
    seqtagger = shared_data / "seqtagger/b04_RNA004"
    reads = shared_data / "escapepod/drna/yeast_trna_reads.pod5"
    out = ["--classifications", tmp_path / "c.csv"]
    cases = [
        (["demux", reads, "-m", wdx4, "--decoder", "beam", "--min-margin", "3", "--crf-batch", "7",
          "--encoder-precision", "int8", *out], "--decoder, --min-margin, --crf-batch, --encoder-precision apply to CTC-CRF"),
        (["demux", "/nonexistent", "-m", wdx4, "--info"], "the inputs would be ignored"),
        (["demux", "-m", wdx4, "--info", "-d", tmp_path / "d"], "--output-dir would be ignored"),
        (["demux", reads, "-m", seqtagger, "--dtw-precision", "float64", *out], "--dtw-precision applies to DTW-SVM"),
        (["demux", reads, "-m", gbm, "--method", "llr", "--dtw-precision", "float64", *out], "is a GBM model"),
        (["demux", reads, "-m", wdx4, "--prefix", "x", *out], "--prefix would be ignored"),
        (["demux", reads, "-m", wdx4, "--memory-mib", "8", *out], "--memory-mib would be ignored"),
        (["demux", reads, "-m", wdx4, "--method", "llr", "--cnn-model", wdx4, *out], "--cnn-model would be ignored"),
        (["view", reads, "--force"], "--force would be ignored: the output is stdout"),
        (["summary", reads, "--fsync", "file"], "--fsync would be ignored"),
    ]
    for args, message in cases:
        r = run([escpod, *args], check=False)
        assert r.returncode == 2 and message in r.stderr, (args, r.returncode, r.stderr)
        assert not (tmp_path / "c.csv").exists() and not (tmp_path / "d").exists()
    # (The Python API refuses the same: tests/python/test_demux.py.)


def test_skip_bad_means_the_same_in_every_command(escpod, shared_data, tmp_path):
    good = shared_data / "escapepod/drna/yeast_trna_reads.pod5"
    bad = tmp_path / "bad.pod5"
    bad.write_bytes(b"not a pod5")
    for args in (["summary", good, bad], ["merge", good, bad, "-o", tmp_path / "m.pod5"],
                 ["filter", good, bad, "--min-samples", "1", "-o", tmp_path / "f.pod5"]):
        r = run([escpod, *args], check=False)
        assert r.returncode == 1 and "bad.pod5" in r.stderr, (args, r.stderr)
        r = run([escpod, *args, "--skip-bad", "-f"] if "-o" in args else [escpod, *args, "--skip-bad"], check=False)
        assert r.returncode == 3 and "bad.pod5" in r.stderr, (args, r.stderr)
