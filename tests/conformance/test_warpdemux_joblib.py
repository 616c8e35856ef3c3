"""WarpDemuX's own model files (.joblib) on the command line: the fused run, every stage, --info
and export-model give what our JSON copies give (RNA004, byte for byte), RNA002 models run on
RNA002 reads, and damaged or foreign files are refused with exit 1 and nothing written."""
import csv

import pytest

from conftest import run


@pytest.fixture(scope="module")
def joblib_dir(shared_data):
    return shared_data / "warpdemux/joblib"


@pytest.fixture(scope="module")
def cnn(shared_data):
    return shared_data / "warpdemux/adapted_cnn_rna004_130bps@v0.2.4.onnx"


def calls(escpod, model, inputs, tmp_path, name, *extra):
    out = tmp_path / f"{name}.csv"
    run([escpod, "demux", *inputs, "--model", model, "--classifications", out, "-t", "2", *extra])
    return out.read_text()


@pytest.mark.parametrize("stem", ["WDX4_rna004_v1_0", "WDX10_rna004_v1_0"])
def test_fused_run_equals_the_json_copy(escpod, shared_data, joblib_dir, cnn, rna_pod5, tmp_path, stem):
    from_json = calls(escpod, shared_data / f"warpdemux/{stem}.json", [rna_pod5], tmp_path, "json")
    from_joblib = calls(escpod, joblib_dir / f"rna004/{stem}.joblib", [rna_pod5], tmp_path, "joblib",
                        "--cnn-model", cnn)
    assert from_joblib == from_json
    assert len(from_json.splitlines()) > 150


def test_stages_equal_the_json_copy(escpod, shared_data, joblib_dir, cnn, rna_pod5, tmp_path):
    outputs = {}
    for kind, model in [("json", shared_data / "warpdemux/WDX4_rna004_v1_0.json"),
                        ("joblib", joblib_dir / "rna004/WDX4_rna004_v1_0.joblib")]:
        b, fp, c = (tmp_path / f"{kind}.{x}.csv" for x in ("b", "fp", "calls"))
        run([escpod, "demux", "detect", rna_pod5, "-m", model, "--cnn-model", cnn, "-o", b])
        run([escpod, "demux", "fingerprint", rna_pod5, "--boundaries", b, "-m", model, "-o", fp])
        run([escpod, "demux", "classify", fp, "-m", model, "-o", c])
        outputs[kind] = [p.read_text() for p in (b, fp, c)]
    assert outputs["joblib"] == outputs["json"]


def test_info_says_where_the_settings_came_from(escpod, joblib_dir):
    out = run([escpod, "demux", "--model", joblib_dir / "rna002/WDX-DPC_rna002_v0_4_4.joblib", "--info"]).stdout
    assert "chemistry:      RNA002" in out
    assert "rna002_70bps@v0.4.4.toml, named by" in out and "[WDX-DPC_rna002_v1_0]" in out
    assert "dpc1 dpc2 dpc3 dpc4" in out
    assert "detector: LLR" in out
    assert "scikit-learn 1.3.1" in out


def test_export_model_writes_json_that_gives_the_same_calls(escpod, joblib_dir, shared_data, tmp_path):
    exported = tmp_path / "WDX6_rna002.json"
    model = joblib_dir / "rna002/WDX6_rna002_v0_4_4.joblib"
    run([escpod, "demux", "export-model", model, "-o", exported])
    sample = sorted((shared_data / "warpdemux/sample").glob("*.pod5"))[:2]
    assert calls(escpod, exported, sample, tmp_path, "a") == calls(escpod, model, sample, tmp_path, "b")
    # Not over an existing file without --force.
    r = run([escpod, "demux", "export-model", model, "-o", exported], check=False)
    assert r.returncode != 0


def test_rna002_models_run_on_rna002_reads(escpod, joblib_dir, shared_data, tmp_path):
    sample = sorted((shared_data / "warpdemux/sample").glob("*.pod5"))
    out = tmp_path / "calls.csv"
    run([escpod, "demux", *sample, "-m", joblib_dir / "rna002/WDX4_rna002_v0_4_4.joblib",
         "--classifications", out])
    with open(out) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 800
    labels = {r["barcode"] for r in rows}
    assert labels <= {"BC04", "BC05", "BC06", "BC08", "unclassified"}
    assert sum(r["barcode"] != "unclassified" for r in rows) > 400


def test_config_flag_and_refusals(escpod, joblib_dir, shared_data, rna_pod5, tmp_path):
    lonely = tmp_path / "WDX4_rna002_v0_4_4.joblib"
    lonely.write_bytes((joblib_dir / "rna002/WDX4_rna002_v0_4_4.joblib").read_bytes())
    r = run([escpod, "demux", "--model", lonely, "--info"], check=False)
    assert r.returncode == 1 and "--config" in r.stderr
    r = run([escpod, "demux", "--model", lonely, "--info", "--config",
             joblib_dir / "rna002/rna002_70bps@v0.4.4.toml"])
    assert "(--config)" in r.stdout
    # --config for a model that is not a joblib file does not apply: a usage error.
    r = run([escpod, "demux", rna_pod5, "-m", shared_data / "warpdemux/WDX4_rna004_v1_0.json",
             "--config", joblib_dir / "rna004/rna004_130bps@v1.0.toml", "--classifications",
             tmp_path / "x.csv"], check=False)
    assert r.returncode == 2 and "--config" in r.stderr
    assert not (tmp_path / "x.csv").exists()
    # A pickle that names a forbidden global: refused, nothing written, no code run.
    evil = tmp_path / "evil_rna004.joblib"
    evil.write_bytes(b"\x80\x04\x8c\x02os\x94\x8c\x06system\x94\x93\x8c\x08touch x\x94\x85R.")
    out = tmp_path / "evil.csv"
    r = run([escpod, "demux", rna_pod5, "-m", evil, "--classifications", out], check=False, cwd=tmp_path)
    assert r.returncode == 1
    assert "forbidden global 'os.system'" in r.stderr and str(evil) in r.stderr
    assert not out.exists() and not (tmp_path / "x").exists()
