"""CTC-CRF model folders: the native encoder of the four real SeqTagger models against a NumPy
reference written from the docs (crf_reference.py) on real RNA004 windows; escapepod bundles
(random weights, made by make_crf_bundle.py) against onnxruntime; and the load-time checks of
both kinds, through `escpod model info|run`.

Tolerance: 1e-3 absolute on scores in [-5, 5]. docs/demux.md §7.8 gives float32 summation-order
effects up to ~2.5e-4 and float32-vs-float64 up to ~8e-4 on these models, so 1e-3 separates
rounding from any real difference (a wrong gate order, direction or layout moves scores by O(1)).
"""
import copy
import json
import pathlib
import shutil
import sys
import zipfile

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import crf_reference  # noqa: E402
import make_crf_bundle  # noqa: E402
from conftest import run  # noqa: E402

TOLERANCE = 1e-3
SEQTAGGER = {
    # folder: standardisation constants (v2 configs) or None (v1: med/MAD of the window)
    "b04_RNA004": None,
    "b07_RNA004_tRNA": (80.8758975922949, 17.26975967138176),
    "b13_RNA004_mRNA": (80.8758975922949, 17.26975967138176),
    "b96_RNA004": None,
}


@pytest.fixture(scope="module")
def seqtagger_dir(shared_data):
    path = shared_data / "seqtagger"
    if not (path / "b04_RNA004" / "config.toml").is_file():
        pytest.fail(f"SeqTagger models missing: looked in {path}")
    return path


def _weights(folder):
    return max(folder.glob("weights_*.tar"), key=lambda p: int(p.stem.split("_")[1]))


def _run_encoder(escpod, model, windows, tmp_path, *flags):
    inp, out = tmp_path / "in.npy", tmp_path / "out.npy"
    np.save(inp, windows[:, None, :].astype(np.float32))
    run([escpod, "model", "run", *flags, model, inp, "-o", out, "--force"])  # called again on the same path
    return np.load(out)


@pytest.mark.parametrize("name", sorted(SEQTAGGER))
def test_seqtagger_encoder_matches_reference_on_real_windows(escpod, seqtagger_dir, rna_pod5, tmp_path, name):
    folder = seqtagger_dir / name
    # 8 windows of 2000 samples: 4 reads x windows ending at samples 3000 and 6000 (all reads
    # here are >= 6471 samples), normalised as the model expects.
    x = crf_reference.real_windows(rna_pod5, 8, 2000, [3000, 6000], SEQTAGGER[name])
    assert x.shape == (8, 2000)
    ours = _run_encoder(escpod, folder, x, tmp_path)
    ref = crf_reference.encoder(crf_reference.load_state_dict(_weights(folder)), x)
    assert ours.shape == (200, 8, 1280) == ref.shape
    diff = np.abs(ours - ref)
    assert diff.max() <= TOLERANCE, f"{name}: max |ours - reference| = {diff.max():.3g} at {np.unravel_index(diff.argmax(), diff.shape)}"
    # Layout: the stay score of every state is the fixed blank 2.0, moves are tanh * 5.
    assert np.all(ours[:, :, 0::5] == 2.0)
    assert np.abs(ours).max() <= 5.0
    # The windows differ, so must their scores (a constant output would pass a loose tolerance).
    assert np.abs(ours[:, 0] - ours[:, 1]).max() > 0.1


def test_seqtagger_odd_window_length_matches_reference(escpod, seqtagger_dir, rna_pod5, tmp_path):
    # v2 models run windows longer than `chunksize`, and T = ceil(L / 10) for any L.
    folder = seqtagger_dir / "b13_RNA004_mRNA"
    x = crf_reference.real_windows(rna_pod5, 2, 2345, [6000], SEQTAGGER["b13_RNA004_mRNA"])
    ours = _run_encoder(escpod, folder, x, tmp_path)
    ref = crf_reference.encoder(crf_reference.load_state_dict(_weights(folder)), x)
    assert ours.shape == (235, 2, 1280) == ref.shape
    assert np.abs(ours - ref).max() <= TOLERANCE


def test_seqtagger_scalar_reference_backend_matches_too(escpod, seqtagger_dir, rna_pod5, tmp_path):
    # The same built graph on the scalar kernels (no oneDNN): an independent check of the
    # graph itself, not only of the optimised kernels.
    folder = seqtagger_dir / "b96_RNA004"
    x = crf_reference.real_windows(rna_pod5, 2, 2000, [3000], None)
    ours = _run_encoder(escpod, folder, x, tmp_path, "--reference-kernels")
    ref = crf_reference.encoder(crf_reference.load_state_dict(_weights(folder)), x)
    assert np.abs(ours - ref).max() <= TOLERANCE


def test_seqtagger_info_describes_the_built_encoder(escpod, seqtagger_dir):
    out = run([escpod, "model", "info", seqtagger_dir / "b04_RNA004", "--shape", "1,1,2000"]).stdout
    assert "weights_39.tar" in out
    assert "input:      signal [batch, 1, samples] float32" in out
    assert "output:     scores [steps, batch, 1280] float32" in out
    assert "LSTM x5" in out and "Conv x3" in out
    assert "parameters: 519882" in out
    assert "lstm(reverse) T200 N1 C96 H96" in out


# ---- strict weights reader ---------------------------------------------------------------------

def _copy_model(src, dst, edit_pkl=None, compress=False, drop=None):
    """Copies a SeqTagger folder, rewriting its weights zip (data.pkl edited, entries deflated,
    or one entry dropped)."""
    shutil.copytree(src, dst)
    weights = _weights(dst)
    with zipfile.ZipFile(_weights(src)) as zin:
        items = [(i, zin.read(i.filename)) for i in zin.infolist()]
    weights.chmod(0o644)
    with zipfile.ZipFile(weights, "w") as zout:
        for info, data in items:
            if drop and info.filename.endswith(drop):
                continue
            if edit_pkl and info.filename.endswith("/data.pkl"):
                data = edit_pkl(data)
            zout.writestr(info.filename, data, compress_type=zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED)
    return dst


@pytest.mark.parametrize("case,edit,expected", [
    ("foreign global", lambda d: d.replace(b"ccollections\nOrderedDict\n", b"cos\nsystem\n", 1), "global os.system"),
    ("half storage", lambda d: d.replace(b"ctorch\nFloatStorage\n", b"ctorch\nHalfStorage\n", 1), "global torch.HalfStorage"),
    ("protocol 4", lambda d: b"\x80\x04" + d[2:], "pickle protocol 4"),
    ("unknown opcode", lambda d: d[:2] + b"\x8c\x01x0" + d[2:], "pickle opcode 0x8c"),
    ("truncated", lambda d: d[: len(d) // 2], "data.pkl"),
])
def test_weights_reader_refuses_what_a_state_dict_does_not_hold(escpod, seqtagger_dir, tmp_path, case, edit, expected):
    model = _copy_model(seqtagger_dir / "b04_RNA004", tmp_path / "m", edit_pkl=edit)
    r = run([escpod, "model", "info", model], check=False)
    assert r.returncode != 0, case
    assert expected in r.stderr, r.stderr


def test_weights_reader_refuses_compressed_entries_and_missing_storages(escpod, seqtagger_dir, tmp_path):
    r = run([escpod, "model", "info", _copy_model(seqtagger_dir / "b04_RNA004", tmp_path / "a", compress=True)], check=False)
    assert r.returncode != 0 and "is compressed (method 8)" in r.stderr, r.stderr
    r = run([escpod, "model", "info", _copy_model(seqtagger_dir / "b04_RNA004", tmp_path / "b", drop="/data/11")], check=False)
    assert r.returncode != 0 and "storage '11' has no data/11 entry" in r.stderr, r.stderr


def test_seqtagger_config_checks(escpod, seqtagger_dir, tmp_path):
    model = tmp_path / "m"
    shutil.copytree(seqtagger_dir / "b04_RNA004", model)
    cfg = model / "config.toml"
    text = cfg.read_text()
    cfg.chmod(0o644)
    cfg.write_text(text.replace('rnn_type = "lstm"', 'rnn_type = "gru"'))
    r = run([escpod, "model", "info", model], check=False)
    assert r.returncode != 0 and "only lstm / swish" in r.stderr, r.stderr
    # A state_len that does not fit the linear layer's 1024 rows is caught by the shape check.
    cfg.write_text(text.replace("state_len = 4", "state_len = 3"))
    r = run([escpod, "model", "info", model], check=False)
    assert r.returncode != 0 and "encoder.9.linear.weight' has shape [1024, 96], expected [256, 96]" in r.stderr, r.stderr


# ---- escapepod bundles ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    path = tmp_path_factory.mktemp("crf") / "bundle"
    make_crf_bundle.write_bundle(str(path))
    return path


def test_bundle_encoder_matches_onnxruntime(escpod, bundle, tmp_path):
    import onnxruntime as ort
    x = np.random.default_rng(7).standard_normal((3, 3000)).astype(np.float32)
    ours = _run_encoder(escpod, bundle, x, tmp_path)
    sess = ort.InferenceSession(str(bundle / "crf_encoder.onnx"), providers=["CPUExecutionProvider"])
    ref = sess.run(None, {"signal": x[:, None, :]})[0]
    assert ours.shape == (300, 3, 1280) == ref.shape
    assert np.abs(ours - ref).max() <= TOLERANCE
    assert np.all(ours[:, :, 0::5] == 2.0)


def test_bundle_info(escpod, bundle):
    out = run([escpod, "model", "info", bundle]).stdout
    assert "crf_encoder.onnx" in out and "output:     scores [300, batch, 1280] float32" in out


def _mutated(bundle, tmp_path, mutate):
    dst = tmp_path / "b"
    shutil.copytree(bundle, dst)
    meta = json.loads((dst / "metadata.json").read_text())
    m = copy.deepcopy(meta)
    mutate(m, dst)
    (dst / "metadata.json").write_text(json.dumps(m))
    return dst


def _set(path, value):
    def f(m, _dst):
        node = m
        for k in path[:-1]:
            node = node[k]
        if value is KeyError:
            del node[path[-1]]
        else:
            node[path[-1]] = value
    return f


@pytest.mark.parametrize("case,mutate,expected", [
    ("format", _set(["format"], "escapepod-crf-encoder/9"), "format 'escapepod-crf-encoder/9'"),
    ("alphabet", _set(["crf", "alphabet"], ["N", "A", "C", "G"]), "crf.alphabet has 4 symbols, n_base + 1 = 5 expected"),
    ("chunk/stride", _set(["signal", "stride"], 7), "must be a positive multiple of signal.stride 7"),
    ("stdev", _set(["standardisation", "stdev"], 0), "positive stdev"),
    ("no mean", _set(["standardisation", "mean"], KeyError), "missing 'standardisation.mean'"),
    ("sha256", _set(["boundary", "sha256"], "0" * 64), "pinned boundary CNN"),
    ("sha256 form", _set(["boundary", "sha256"], "ABC"), "64 lowercase hex digits"),
    ("input_len", _set(["boundary", "input", "input_len"], 1499), "input_len 1499 != (max_obs_trace 16000"),
    ("method", _set(["boundary", "method"], "magic"), "boundary.method 'magic'"),
    ("missing onnx", _set(["onnx"], "nope.onnx"), "onnx 'nope.onnx' does not exist"),
    ("escaping onnx", _set(["onnx"], "../crf_encoder.onnx"), "must be a relative path inside the bundle"),
    ("barcode symbol", _set(["barcodes", 0, "sequence"], "ACGTX"), "symbol 'X' outside the alphabet"),
    ("short barcode", _set(["barcodes", 0, "sequence"], "ACG"), "shorter than state_len 4"),
    ("duplicate barcode", _set(["barcodes", 1, "name"], "bc01"), "reference name 'bc01' appears twice"),
    ("encoder shape", _set(["crf", "state_len"], 3), "expected [300, 1, 320]"),
    ("encoder chunk", _set(["signal", "chunk"], 2000), "encoder cannot run a window of 2000"),
])
def test_bundle_load_checks(escpod, bundle, tmp_path, case, mutate, expected):
    r = run([escpod, "model", "info", _mutated(bundle, tmp_path, mutate)], check=False)
    assert r.returncode != 0, case
    assert expected in r.stderr, r.stderr


def test_bundle_without_boundary_and_with_llr_loads(escpod, bundle, tmp_path):
    d = _mutated(bundle, tmp_path, _set(["boundary"], {"method": "llr", "margin": 300}))
    run([escpod, "model", "info", d])


def test_model_bench_times_given_windows(escpod, seqtagger_dir, rna_pod5, tmp_path):
    # --input: the windows' shape replaces --batch/--length's random input (no --length needed);
    # a file with fewer windows than --batch or the wrong rank is refused naming the file.
    x = crf_reference.real_windows(rna_pod5, 2, 2345, [6000], None)
    npy = tmp_path / "w.npy"
    np.save(npy, x[:, None, :])
    out = run([escpod, "model", "bench", seqtagger_dir / "b04_RNA004", "--input", npy, "--batch", "1", "-t", "1",
               "--seconds", "0.2"]).stdout
    assert "batch=1 length=2345 " in out, out
    assert float(out.split(" calls=")[1].split()[0]) >= 2
    r = run([escpod, "model", "bench", seqtagger_dir / "b04_RNA004", "--input", npy, "--batch", "3"], check=False)
    assert r.returncode != 0 and f"{npy}: expected [N >= 3, ...] with 3 dimensions" in r.stderr, r.stderr
    np.save(npy, x)
    r = run([escpod, "model", "bench", seqtagger_dir / "b04_RNA004", "--input", npy], check=False)
    assert r.returncode != 0 and "with 3 dimensions" in r.stderr, r.stderr
