"""escpod report and demux --report: the HTML page renders in headless Chromium with non-empty
inline SVG plots, and the JSON (and MultiQC files) hold the numbers of the CSV and POD5 inputs."""
import collections
import csv
import json
import math
import os
import shutil
import subprocess
from html.parser import HTMLParser

import pod5
import pytest

from conftest import run

ADAPTER = ("GGATCACAGTCTACACTGCTCACTCCAACCCCGGCCCCTGAGTCCGAGGAGAGGGTGCTTCAGAGTATGTATACCACTGGGTAGGATAC"
           "GGCGGAGGGCACGTCAATACGGTTCAATGCCCTACTGCATGCTCTTGTGGTTCATCTGCAT")


def simulate(escpod, out, n, seed, barcodes):
    run([escpod, "simulate", "-o", out, "--reads", n, "--kmer-model", "synthetic:9", "--barcodes", barcodes,
         "--adapter", ADAPTER, "--seed", seed, "-f", "-q", "-t", "2"])


@pytest.fixture(scope="session")
def demux_run(escpod, tmp_path_factory):
    """A small simulated run, a model trained on it, and one demux with --report."""
    d = tmp_path_factory.mktemp("report")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    barcodes = os.path.join(repo, "data", "barcodes", "escpod_demo4.csv")
    simulate(escpod, d / "train.pod5", 400, 1, barcodes)
    run([escpod, "demux", "train", d / "train.pod5", "--labels", d / "train.truth.csv", "--method", "llr",
         "-o", d / "model.json", "-f", "-q", "-t", "2"])
    (d / "in").mkdir()
    simulate(escpod, d / "in" / "a.pod5", 150, 2, barcodes)
    simulate(escpod, d / "in" / "b.pod5", 100, 3, barcodes)
    run([escpod, "demux", d / "in", "--model", d / "model.json", "--classifications", d / "calls.csv",
         "--report", d / "demux_report.html", "-t", "2", "-q"])
    return d


def csv_numbers(path):
    rows = list(csv.DictReader(open(path)))
    per = collections.Counter(r["barcode"] for r in rows)
    det = collections.Counter(r["detector"] or "none" for r in rows)
    reasons = collections.Counter(r["reason"] for r in rows if r["reason"])
    conf = collections.defaultdict(lambda: [0] * 20)
    sums = collections.defaultdict(float)
    for r in rows:
        c = float(r["confidence"])
        conf[r["barcode"]][min(19, int(c * 20))] += 1
        sums[r["barcode"]] += c
    return rows, per, det, reasons, conf, sums


def check_json(doc, calls_csv, pod5_dir):
    rows, per, det, reasons, conf, sums = csv_numbers(calls_csv)
    assert doc["n_reads"] == len(rows) > 0
    assert {k: v["reads"] for k, v in doc["barcodes"].items()} == dict(per)
    assert doc["detectors"] == dict(det)
    # Unclassified reasons are grouped as demux groups them (detail after ": " dropped).
    grouped = collections.Counter()
    for r, n in reasons.items():
        keep = r.startswith("boundary detection failed: ") or r.startswith("no fingerprint: ")
        grouped[r if keep else r.split(": ")[0]] += n
    assert doc["unclassified_reasons"] == dict(grouped)
    for bc, e in doc["barcodes"].items():
        assert e["confidence_histogram"]["counts"] == conf[bc], bc
        assert math.isclose(e["mean_confidence"], sums[bc] / per[bc], rel_tol=1e-9)
    # Signal numbers against the official pod5 reader.
    lengths = {}
    for f in sorted(pod5_dir.glob("*.pod5")):
        with pod5.Reader(f) as r:
            for rec in r.reads():
                lengths[str(rec.read_id)] = (rec.num_samples, rec.run_info.sample_rate)
    assert doc["signal"]["reads"] == len(lengths)
    assert doc["signal"]["samples"] == sum(n for n, _ in lengths.values())
    assert math.isclose(doc["signal"]["duration_s"], sum(n / sr for n, sr in lengths.values()), rel_tol=1e-9)
    assert sum(doc["signal"]["signal_samples_histogram"]["counts"]) == len(lengths)
    assert sum(doc["throughput"]["read_starts_over_run_hours"]["counts"]) == len(lengths)
    by_bc = collections.Counter()
    for r in rows:
        by_bc[r["barcode"]] += lengths[r["read_id"]][0]
    assert {k: v["signal_samples"] for k, v in doc["barcodes"].items()} == dict(by_bc)


class SvgCounter(HTMLParser):
    def __init__(self):
        super().__init__()
        self.svgs = {}
        self.current = None
        self.scripts = 0
        self.external = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg":
            self.current = a.get("id")
            self.svgs[self.current] = {"rect": 0, "nonzero": 0}
        elif self.current and tag == "rect":
            self.svgs[self.current]["rect"] += 1
            if float(a.get("height", 0)) > 0 and float(a.get("width", 0)) > 0 and a.get("class") in ("bar", "cell"):
                self.svgs[self.current]["nonzero"] += 1
        if tag == "script":
            self.scripts += 1
        for k in ("src", "href"):
            if k in a and not a[k].startswith("#"):
                self.external.append(a[k])

    def handle_endtag(self, tag):
        if tag == "svg":
            self.current = None


def test_report_numbers_equal_the_csv_and_pod5(escpod, demux_run):
    d = demux_run
    run([escpod, "report", "--classifications", d / "calls.csv", d / "in", "-o", d / "r.html", "-t", "2"])
    doc = json.load(open(d / "r.json"))
    check_json(doc, d / "calls.csv", d / "in")
    assert doc["command_line"].split()[1] == "report"
    # demux --report wrote the same numbers, with the demux throughput.
    demux_doc = json.load(open(d / "demux_report.json"))
    check_json(demux_doc, d / "calls.csv", d / "in")
    assert demux_doc["demux"]["seconds"] > 0 and demux_doc["command_line"].split()[1] == "demux"
    assert demux_doc["demux"]["model"] == str(d / "model.json")
    # MultiQC custom content: one section per file, same numbers.
    mqc = json.load(open(d / "r_reads_per_barcode_mqc.json"))
    assert mqc["plot_type"] == "bargraph" and mqc["parent_id"] == "escpod"
    assert list(mqc["data"].values())[0] == {k: v["reads"] for k, v in doc["barcodes"].items()}
    conf = json.load(open(d / "r_confidence_mqc.json"))
    assert [list(s.values()) for s in conf["data"].values()] == \
        [v["confidence_histogram"]["counts"] for v in doc["barcodes"].values()]
    assert json.load(open(d / "r_detectors_mqc.json"))["data"] == {k: v["detectors"] for k, v in doc["barcodes"].items()}


def test_report_from_shards_equals_one_csv(escpod, demux_run, tmp_path):
    d = demux_run
    rows = open(d / "calls.csv").read().splitlines()
    (tmp_path / "s1.csv").write_text("\n".join(rows[:1] + rows[1:100]) + "\n")
    (tmp_path / "s2.csv").write_text("\n".join(rows[:1] + rows[100:]) + "\n")
    run([escpod, "report", "--classifications", tmp_path / "s1.csv", "--classifications", tmp_path / "s2.csv",
         d / "in", "-o", tmp_path / "s.html"])
    check_json(json.load(open(tmp_path / "s.json")), d / "calls.csv", d / "in")


def test_report_renders_in_headless_chromium(escpod, demux_run, tmp_path):
    d = demux_run
    html = d / "demux_report.html"
    text = html.read_text()
    p = SvgCounter()
    p.feed(text)
    assert p.scripts == 0 and p.external == [], "the page must be self-contained"
    for plot in ("plot_reads_per_barcode", "plot_confidence", "plot_detectors", "plot_signal_samples",
                 "plot_duration", "plot_throughput"):
        assert plot in p.svgs, plot
        assert p.svgs[plot]["nonzero"] > 0, f"{plot} has no drawn bars or cells"
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "chromium is required (scripts/setup.sh installs it)"
    png = tmp_path / "report.png"
    r = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
                        f"--screenshot={png}", "--window-size=1000,3200", html.as_uri()],
                       capture_output=True, text=True, timeout=120)
    assert png.exists(), r.stderr
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    # Keep a copy for people to look at (ctest's working directory).
    shutil.copy(png, os.path.join(os.getcwd(), "report_screenshot.png"))
    # A rendered page with plots is far from a blank screenshot: count distinct colours.
    import zlib
    import struct
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, ctype = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and ctype in (2, 6)
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = width * bpp + 1
    colours = set()
    # Unfiltered bytes are enough to tell a blank page (a few values) from a drawn one; sample rows.
    for y in range(0, height, 7):
        row = raw[y * stride + 1:(y + 1) * stride]
        colours.update(row[i:i + 3] for i in range(0, len(row), bpp * 5))
    assert width == 1000 and len(colours) > 50, (width, len(colours))
