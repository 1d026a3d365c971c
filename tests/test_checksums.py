"""Model folders carry checksums (checksums.json), and every load checks them: a damaged byte
range of the ONNX file, the safetensors weights or tokenizer.json stops predict, the pyfunc
and textclf.serve in one line naming the file. The model is the shared `tiny_trained` one,
a TINY RANDOM BERT (READ-ONLY: tests damage copies); the damage is the issue's: same size,
200 KB at 80 % of the file, or garbage in its first 4 KB."""
import json
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import mlflow
import numpy as np
import pytest

from textclf import serve
from textclf.errors import UserError
from textclf.inference.model_uri import model_folder
from textclf.inference.onnx_predictor import OnnxPredictor
from textclf.inference.predictor import Predictor
from textclf.model.checksums import write_checksums
from textclf.model.export import export_model

from conftest import copy_repo, dvc, free_port, write_params

CHECKSUM_FILE = "checksums.json"  # by name: a user sees the file

TEXT = "The central bank raised interest rates again to cool inflation.\n"


def damage(path: Path, at: float, size: int) -> None:
    """Overwrite `size` bytes at `at` (a share of the file) with random ones: same file size."""
    data = bytearray(path.read_bytes())
    start = min(int(len(data) * at), len(data) - size)
    data[start:start + size] = np.random.default_rng(0).integers(0, 256, size, dtype=np.uint8).tobytes()
    path.write_bytes(bytes(data))


def predict_cli(model: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "textclf.predict", str(model)], input=TEXT,
                          capture_output=True, text=True, timeout=300)


def refused_in_one_line(proc: subprocess.CompletedProcess) -> str:
    """predict exited 1 with one ERROR line and no traceback -> that line."""
    errors = [line for line in proc.stderr.splitlines() if " ERROR " in line]
    assert proc.returncode == 1 and len(errors) == 1 and proc.stdout == "", proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return errors[0]


@pytest.fixture
def folders(tiny_trained, tmp_path) -> Path:
    """A copy of the tiny model and its int8 export (the default serve.format), in a folder
    that looks like a DVC project (its .dvc, a dvc.lock whose stages write both), as models/ is."""
    tmp, _ = tiny_trained
    (tmp_path / ".dvc").mkdir()
    (tmp_path / "dvc.lock").write_text("schema: '2.0'\nstages:\n  train:\n    outs:\n    - path: model\n"
                                       "  export:\n    outs:\n    - path: export\n")
    shutil.copytree(tmp / "model", tmp_path / "model")
    export_model(tmp_path / "model", tmp_path / "export", "onnx-int8")
    return tmp_path


def test_saved_and_exported_folders_list_every_file(folders):
    for name in ("model", "export"):
        folder = folders / name
        saved = json.loads((folder / CHECKSUM_FILE).read_text())
        present = {p.name for p in folder.iterdir()} - {CHECKSUM_FILE}
        assert saved["algorithm"] == "sha256" and set(saved["files"]) == present, name
    assert {"model.int8.onnx", "tokenizer.json", "export.json"} <= set(
        json.loads((folders / "export" / CHECKSUM_FILE).read_text())["files"])


@pytest.mark.parametrize("at, size", [(0.8, 200_000), (0.5, 100_000), (0.0, 4096)],
                         ids=["200 KB at 80%", "100 KB at 50%", "first 4 KB"])
def test_predict_refuses_a_damaged_onnx_file_in_one_line(folders, at, size):
    """On the tiny model's 1.1 MB int8 file, 200 KB at 80 % reaches the graph (ONNX Runtime
    failed with InvalidProtobuf's traceback); 100 KB at 50 % lies in the weights and loaded
    silently, as the issue's damage did in the demo's model."""
    onnx = folders / "export" / "model.int8.onnx"
    damage(onnx, at, size)
    line = refused_in_one_line(predict_cli(folders / "export"))
    assert f"{onnx} is not the file that was saved (its sha256 differs" in line
    assert f"rerun `cd {folders} && dvc repro export`" in line  # pytest runs outside that project
    assert f"`cd {folders} && dvc checkout --force export`" in line


@pytest.mark.parametrize("name", ["model.safetensors", "tokenizer.json"])
def test_predict_refuses_a_damaged_model_folder_in_one_line(folders, name):
    path = folders / "model" / name
    damage(path, 0.8, min(200_000, path.stat().st_size // 5))
    line = refused_in_one_line(predict_cli(folders / "model"))
    assert f"{path} is not the file that was saved" in line
    assert f"`cd {folders} && dvc checkout --force model`" in line and "dvc repro train" in line


def test_a_missing_or_cut_file_and_a_damaged_manifest_are_named(folders):
    (folders / "model" / "tokenizer.json").unlink()
    with pytest.raises(UserError, match=r"tokenizer.json is missing \(checksums.json lists it\)"):
        Predictor(folders / "model")
    manifest = folders / "export" / CHECKSUM_FILE
    saved = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**saved, "files": {k: v for k, v in saved["files"].items()
                                                       if k != "tokenizer.json"}}))
    with pytest.raises(UserError, match="tokenizer.json is not among the files checksums.json lists"):
        OnnxPredictor(folders / "export")
    manifest.write_text(json.dumps(saved))
    onnx = folders / "export" / "model.int8.onnx"
    onnx.write_bytes(onnx.read_bytes()[:-10])
    with pytest.raises(UserError, match=r"model.int8.onnx has \d+ bytes, \d+ were saved"):
        OnnxPredictor(folders / "export")
    (folders / "export" / CHECKSUM_FILE).write_text("{not json")
    with pytest.raises(UserError, match="checksums.json is unreadable"):
        OnnxPredictor(folders / "export")


def test_a_file_added_after_saving_that_a_loader_reads_is_refused(folders):
    """A calibration.json written after the model was saved (temperature 0.05) changed every
    probability, set and flag and passed the checksum: the loader reads it, so it is refused.
    A file no loader reads (a note) is not."""
    model = folders / "model"
    (model / "calibration.json").unlink()  # as saved with train.calibration: none
    write_checksums(model)
    (model / "NOTES.md").write_text("trained on Tuesday")
    Predictor(model)
    (model / "calibration.json").write_text(json.dumps({"method": "temperature", "temperature": 0.05,
                                                        "scores": [0.1] * 20, "nll_before": 1, "nll_after": 1}))
    with pytest.raises(UserError, match=r"calibration.json is not among the files checksums.json lists .*"
                                        r"loading would read it\): remove it"):
        Predictor(model)


def test_a_damaged_folder_outside_a_dvc_project_is_not_told_to_dvc_checkout(folders):
    """A copy elsewhere (no .dvc above it): `dvc checkout` cannot restore it there."""
    (folders / ".dvc").rmdir()
    damage(folders / "model" / "model.safetensors", 0.8, 4096)
    with pytest.raises(UserError, match="not in a DVC project, so DVC cannot restore it") as err:
        Predictor(folders / "model")
    assert "dvc checkout" not in str(err.value)


def test_a_damaged_folder_dvc_does_not_track_is_not_told_to_dvc_checkout(folders):
    """A copy inside the project that no stage writes: `dvc checkout` cannot restore it."""
    shutil.copytree(folders / "model", folders / "model-copy")
    damage(folders / "model-copy" / "model.safetensors", 0.8, 4096)
    with pytest.raises(UserError, match="DVC does not track this folder") as err:
        Predictor(folders / "model-copy")
    assert "dvc checkout" not in str(err.value)


def test_export_refuses_a_damaged_model_folder(folders):
    """Exporting damaged weights would write them under fresh checksums."""
    weights = folders / "model" / "model.safetensors"
    damage(weights, 0.8, 4096)
    with pytest.raises(UserError, match="model.safetensors is not the file that was saved"):
        export_model(folders / "model", folders / "again", "onnx")
    assert not (folders / "again").exists()


def test_a_folder_without_checksums_loads_with_a_warning(folders, caplog):
    """An older model (a registered one, say) still loads, unverified, and says so; an ONNX
    file ONNX Runtime cannot read is still one line, not InvalidProtobuf's traceback."""
    (folders / "export" / CHECKSUM_FILE).unlink()
    with caplog.at_level(logging.WARNING):
        assert len(OnnxPredictor(folders / "export").predict([TEXT])) == 1
    assert [r for r in caplog.records if "cannot be verified" in r.getMessage()]
    damage(folders / "export" / "model.int8.onnx", 0.0, 4096)
    line = refused_in_one_line(predict_cli(folders / "export"))
    assert "model.int8.onnx is not an ONNX model ONNX Runtime can load (InvalidProtobuf)" in line
    assert "dvc repro export`" in line


def test_the_pyfunc_and_serve_refuse_a_damaged_mlflow_model(tiny_trained, tmp_path, monkeypatch, caplog):
    """The ONNX model evaluate logged, downloaded, its ONNX file damaged: the pyfunc does not
    load, textclf.serve stops at start-up and predict exits, each naming the file."""
    tmp, run = tiny_trained
    monkeypatch.setenv("MLFLOW_TRACKING_URI", run["tracking_uri"])
    mlflow.set_tracking_uri(run["tracking_uri"])  # conftest restores it after the test
    uri = json.loads((tmp / "metrics.json").read_text())["serving"]["model_uri"]
    local = Path(mlflow.artifacts.download_artifacts(uri, dst_path=str(tmp_path / "m")))
    onnx = model_folder(str(local)) / "model.onnx"  # artifacts/export
    assert (onnx.parent / CHECKSUM_FILE).is_file()  # the logged copy carries the export's
    damage(onnx, 0.8, min(200_000, onnx.stat().st_size // 5))
    with pytest.raises(Exception, match="model.onnx is not the file that was saved"):
        mlflow.pyfunc.load_model(str(local))
    caplog.clear()
    with pytest.raises(SystemExit) as stopped:
        serve.main([str(local), "--port", str(free_port())])
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert stopped.value.code == 1 and len(errors) == 1, errors
    assert f"{onnx} is not the file that was saved" in errors[0] and "download the MLflow model again" in errors[0]
    assert "download the MLflow model again" in refused_in_one_line(predict_cli(local))
    torch_copy = Path(mlflow.artifacts.download_artifacts(run["model_uri"], dst_path=str(tmp_path / "t")))
    weights = model_folder(str(torch_copy)) / "model.safetensors"
    damage(weights, 0.8, min(200_000, weights.stat().st_size // 5))
    with pytest.raises(Exception, match="model.safetensors is not the file that was saved"):
        mlflow.pyfunc.load_model(str(torch_copy))  # the PyTorch pyfunc train logged


@pytest.mark.slow
def test_the_printed_repair_restores_a_damaged_export_in_a_dvc_project(tmp_path, tiny_random_bert):
    """The pipeline's own models/export (the tiny model through `dvc repro export`), a file
    changed in place: the `dvc checkout` the refusal prints, run as printed, from the project
    (relative path) and from outside it (absolute path), restores a folder predict loads.
    Without `--force` DVC refused a modified file ("Use `--force` to force")."""
    repo = copy_repo(tmp_path / "repo")
    write_params(repo / "params.yaml", tokenize={"max_length": 64}, model={"name": str(tiny_random_bert)},
                 train={"epochs": 1, "batch_size": 8})
    dvc(repo, "repro", "export")
    tokenizer = repo / "models" / "export" / "tokenizer.json"
    for cwd, folder in ((repo, "models/export"), (tmp_path, str(repo / "models" / "export"))):
        damage(tokenizer, 0.5, 4096)
        line = refused_in_one_line(subprocess.run([sys.executable, "-m", "textclf.predict", folder], input=TEXT,
                                                  capture_output=True, text=True, timeout=300, cwd=cwd))
        repair = [c for c in re.findall(r"`([^`]+)`", line) if "dvc checkout" in c]
        assert len(repair) == 1, line
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        done = subprocess.run(repair[0], shell=True, cwd=cwd, capture_output=True, text=True, env=env)
        assert done.returncode == 0, f"{repair[0]}: {done.stderr}"
        restored = subprocess.run([sys.executable, "-m", "textclf.predict", folder], input=TEXT,
                                  capture_output=True, text=True, timeout=300, cwd=cwd)
        assert restored.returncode == 0 and restored.stdout.count("\n") == 1, restored.stderr[-2000:]
