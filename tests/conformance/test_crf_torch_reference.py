"""escapepod's native SeqTagger encoder against PyTorch, without torch: the fixture
tests/fixtures/torch_crf_reference.npz holds the scores of a PyTorch build of the architecture
loading each model's weights_N.tar (tests/fixtures/make_torch_crf_reference.py, run once in a
separate venv with torch), on real RNA004 windows. This test re-creates those windows from the
POD5 by the same rule, runs `escpod model run` on the model folder, and compares.

Tolerances (float32), derived from what was observed: between escpod and torch over every
score of every fixture window (the fixture script's --escpod report) the largest differences were
max abs 1.2e-4 (b04), 1.0e-4 (b07), 9.7e-5 (b13), 2.3e-5 (b96) on scores in [-5, 5] (stays are
exactly 2.0), within docs/demux.md §7.8's float32 summation-order spread (up to 2.5e-4). Sampled scores
and row maxima are compared at 5e-4 (4x above the worst). Row sums over the 1024 move scores
differed by up to 2.8e-3 (errors of one step's hidden state move all 1024 outputs together) and
column sums over T steps by up to 3.3e-4: both at 1e-2. A real defect fails by far more: running
the first LSTM forward instead of reversed gives 9.7-10 on every model; adding 0.01 to one
input bias of the third LSTM layer gives 6e-4 to 3e-3 on the sampled scores (b07, b13, b96) and
0.09 on b04's row sums, failing all four.
"""
import pathlib
import sys
import tomllib

import numpy as np
import pod5
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import crf_reference  # noqa: E402
from conftest import run  # noqa: E402

FIXTURE = pathlib.Path(__file__).parents[1] / "fixtures" / "torch_crf_reference.npz"
MODELS = ["b04_RNA004", "b07_RNA004_tRNA", "b13_RNA004_mRNA", "b96_RNA004"]
TOL_SCORE = 5e-4
TOL_SUM = 1e-2


@pytest.fixture(scope="module")
def reference():
    with np.load(FIXTURE) as z:
        return {k: z[k] for k in z.files}


def _normalise(w, cfg):
    """As the fixture script: v2 configs' [standardisation] constants, else med/MAD of the window."""
    w = w.astype(np.float64)
    s = cfg.get("standardisation")
    if s:
        return (w - float(s["mean"])) / float(s["stdev"])
    return crf_reference.med_mad(w)


def _windows(reference, name, pod5_path, cfg):
    """{window index: float32 window} re-created from the stored read id and (end, length)."""
    keys = sorted(int(k.split("/")[1]) for k in reference if k.startswith(f"{name}/") and k.endswith("/read_id"))
    ids = {str(reference[f"{name}/{w}/read_id"]) for w in keys}
    with pod5.Reader(pod5_path) as reader:
        signal = {str(r.read_id): r.signal_pa for r in reader.reads(selection=sorted(ids))}
    out = {}
    for w in keys:
        end, length = (int(v) for v in reference[f"{name}/{w}/rule"])
        x = _normalise(signal[str(reference[f"{name}/{w}/read_id"])][end - length:end], cfg).astype(np.float32)
        moments = np.array([x.sum(dtype=np.float64), (x.astype(np.float64) ** 2).sum()])
        np.testing.assert_allclose(moments, reference[f"{name}/{w}/input_moments"], rtol=1e-9,
                                   err_msg=f"{name} window {w}: not the fixture's samples")
        out[w] = x
    return out


def _ours(escpod, folder, xs, tmp_path):
    inp, out = tmp_path / "in.npy", tmp_path / "out.npy"
    np.save(inp, np.stack(xs)[:, None, :])
    run([escpod, "model", "run", folder, inp, "-o", out, "--force"])  # called again on the same path
    return np.load(out)


def test_fixture_covers_the_four_models_and_distinguishes_windows(reference):
    for name in MODELS:
        assert f"{name}/0/val" in reference, name
        n = sum(1 for k in reference if k.startswith(f"{name}/") and k.endswith("/val"))
        assert n == int(reference["n_reads"]) * len(reference["windows"]) == 9
        # Real windows give different scores: the fixture is no constant a broken encoder could match.
        assert np.abs(reference[f"{name}/0/col_sum"] - reference[f"{name}/1/col_sum"]).max() > 1.0
        assert reference[f"{name}/0/row_max"].max() > reference[f"{name}/0/row_max"].min() + 0.5


@pytest.mark.parametrize("name", MODELS)
def test_native_encoder_matches_pytorch_on_real_windows(escpod, shared_data, rna_pod5, reference, tmp_path, name):
    folder = shared_data / "seqtagger" / name
    cfg = tomllib.loads((folder / "config.toml").read_text())
    windows = _windows(reference, name, rna_pod5, cfg)
    by_length = {}
    for w, x in windows.items():
        by_length.setdefault(len(x), []).append(w)
    worst = {"val": 0.0, "row_max": 0.0, "row_sum": 0.0, "col_sum": 0.0}
    for length, ws in by_length.items():
        scores = _ours(escpod, folder, [windows[w] for w in ws], tmp_path)
        assert scores.shape == (-(-length // 10), len(ws), 1280)
        for j, w in enumerate(ws):
            s = scores[:, j]
            moves = s.reshape(s.shape[0], -1, 5)[:, :, 1:].reshape(s.shape[0], -1)
            ref = lambda k: reference[f"{name}/{w}/{k}"]  # noqa: E731
            got = {"val": s.reshape(-1)[ref("idx")], "row_max": moves.max(1),
                   "row_sum": moves.sum(1, dtype=np.float64), "col_sum": moves.sum(0, dtype=np.float64)}
            for k, v in got.items():
                assert v.shape == ref(k).shape, (name, w, k)
                d = float(np.abs(v - ref(k)).max())
                worst[k] = max(worst[k], d)
                tol = TOL_SUM if k.endswith("_sum") else TOL_SCORE
                assert d <= tol, f"{name} window {w} ({k}): max |escpod - torch| = {d:.3g} > {tol}"
    print(f"{name}: max |escpod - torch| " + ", ".join(f"{k} {v:.3g}" for k, v in worst.items()))
