"""benchmarks/training/guards.py: its small version (the suite runs it; the full one is in the README)
and the issue's 3-class corpus ending `recovered`. Real stages, real packaged MiniLM."""
import json
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks" / "training"))
import guards as guard_benchmark  # noqa: E402


@pytest.mark.slow
def test_small_guard_benchmark_no_false_alarm_and_every_mistake_caught(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.chdir(tmp_path)
    rows = guard_benchmark.main(["--small", "--work", str(tmp_path / "runs")])
    verdicts = {case.name: v for case, _, v in rows}
    assert [v for case, _, v in rows if case.healthy] == ["ok"]
    assert [v for case, _, v in rows if not case.healthy] == ["caught"] * 3, verdicts
    by_name = {case.name: result for case, result, _ in rows}
    assert by_name["random encoder (model.init: config)"]["guards"]["load_audit"] == "fail"
    assert by_name["TextCNN, optimizer holds only the head"]["guards"]["optimizer_coverage"] == "fail"
    seed = by_name["seed optimiser: Adam, constant lr 1e-3, no warmup, no clipping"]["guards"]
    assert seed["collapse"] == "collapsed" and seed["lr_sanity"] == "warn"
    assert "False alarms on healthy runs: 0 of 1; mistakes caught: 3 of 3." in guard_benchmark.table(rows)


@pytest.mark.slow
def test_three_awkward_classes_end_recovered_naming_epoch_1(tmp_path, monkeypatch):
    """The issue's corpus (C++, a b, Ünïcode; 46 documents, 7 in validation) with the default
    params: epoch 1 collapses, the kept epoch does not, so the guard says recovered."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.chdir(tmp_path)
    case = next(c for c in guard_benchmark.cases(small=False) if c.corpus == "small3")
    result = guard_benchmark.run_case(case, tmp_path / "run", {})
    assert result["guards"]["collapse"] == "recovered" and result["error"] is None
    collapse = json.loads((tmp_path / "run" / "guards.json").read_text())["collapse"]
    assert collapse["collapsed_epochs"] == [1] and collapse["message"].startswith("epoch 1 collapsed")
