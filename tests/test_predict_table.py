"""Batch scoring of tables: `python -m textclf.predict MODEL --table ... --out preds.parquet`.
The model is the shared `tiny_trained` one, a TINY RANDOM BERT (not pretrained), READ-ONLY:
these tests check plumbing (rows, order, columns, skip reasons, errors), not accuracy."""
import json
import subprocess
import sys

import mlflow
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from textclf import predict
from textclf.errors import UserError
from textclf.inference import table_scores
from textclf.inference.predictor import Predictor

from conftest import venv_env

TEXTS = ["The central bank raised interest rates again to cool inflation.",
         "The striker scored twice as the home side won the cup final.",
         "A new phone with a faster chip and a better camera goes on sale.",
         "Parliament votes on the budget after a long night of debate.",
         "The film festival opens with a premiere of a quiet drama."]
# Row texts in order, with the rows that cannot be scored and why.
ROWS = [TEXTS[0], None, TEXTS[1], "", TEXTS[2], "   \n", TEXTS[3], TEXTS[4], TEXTS[0]]
REASONS = [None, "missing_text", None, "empty_text", None, "empty_text", None, None, None]
IDS = [f"doc-{n}" for n in (7, 3, 9, 1, 8, 2, 6, 5, 4)]  # not sorted: order must come from the input


@pytest.fixture
def model(tiny_trained):
    tmp, _ = tiny_trained
    return str(tmp / "model")


def expected_probs(model: str, texts: list[str]) -> np.ndarray:
    return Predictor(model).predict(texts).filter(like="prob_").to_numpy()


def score(model: str, table, out, *options: str) -> dict[str, list]:
    """The output's columns as lists (pandas 3 would read a null string as NaN)."""
    predict.main([model, "--table", str(table), "--out", str(out), *options])
    return pq.read_table(out).to_pydict()


def probs(out: dict[str, list], rows: list[int]) -> np.ndarray:
    return np.array([[out[c][i] for c in out if c.startswith("prob_")] for i in rows])


def assert_scored_as_predictor(out: dict[str, list], model: str, texts: list) -> None:
    """Rows in input order, skipped ones with null predictions, the rest the Predictor's."""
    assert out["skip_reason"][:len(REASONS)] == REASONS
    good = [i for i, r in enumerate(REASONS) if r is None]
    assert all(out["label"][i] is None and out["probability"][i] is None
               for i, r in enumerate(REASONS) if r)
    assert np.allclose(probs(out, good), expected_probs(model, [texts[i] for i in good]), atol=1e-6)


def test_parquet_keeps_every_row_column_and_order_with_the_predictors_numbers(model, tmp_path, monkeypatch,
                                                                             capsys):
    monkeypatch.setattr(table_scores, "CHUNK_ROWS", 4)  # several chunks: order across their seams
    table = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": IDS, "text": ROWS, "year": list(range(2000, 2009))}), table)
    out = score(model, table, tmp_path / "out" / "preds.parquet", "--batch-size", "3")
    labels = Predictor(model).labels
    assert list(out) == (["id", "text", "year", "label", "probability"] + [f"prob_{c}" for c in labels]
                         + ["labels", "set_size", "needs_review", "skip_reason"])  # serve.*'s defaults
    assert out["id"] == IDS and out["text"] == ROWS
    assert out["year"] == list(range(2000, 2009))  # Parquet keeps its types
    assert_scored_as_predictor(out, model, ROWS)
    # the text-file CLI gives the same label and probability for the same text
    (tmp_path / "a.txt").write_text(TEXTS[2])
    predict.main([model, str(tmp_path / "a.txt")])
    _, label, prob, labels, flag = capsys.readouterr().out.strip().split("\t")
    assert (label, float(prob)) == (out["label"][4], round(out["probability"][4], 4))
    assert (json.loads(labels), flag == "true") == (out["labels"][4], out["needs_review"][4])


def test_csv_and_jsonl_with_an_id_column_and_malformed_lines(model, tmp_path):
    rows = pd.DataFrame({"id": IDS, "body": ROWS, "note": ["x"] * len(ROWS)})
    csv = tmp_path / "in.csv"
    rows.to_csv(csv, index=False)
    # a row with too many fields after the first, one with too few at the end: kept, in place
    lines = csv.read_text().splitlines()
    csv.write_text("\n".join([lines[0], lines[1], "bad,a,b,c", *lines[2:], "lonely"]) + "\n")
    out = score(model, csv, tmp_path / "csv.parquet", "--text-column", "body", "--id-column", "id")
    assert list(out)[:2] == ["id", "label"] and "body" not in out and "note" not in out
    assert out["id"] == [IDS[0], None, *IDS[1:], None]
    # empty and whitespace fields in a CSV are empty_text; the CSV has no null, so no missing_text
    assert out["skip_reason"] == [None, "malformed_line", *[
        r if r != "missing_text" else "empty_text" for r in REASONS[1:]], "malformed_line"]
    kept = [i for i, r in enumerate(out["skip_reason"]) if r is None]
    assert np.allclose(probs(out, kept), expected_probs(model, [t for t in ROWS if t and t.strip()]),
                       atol=1e-6)

    jsonl = tmp_path / "in.jsonl"
    records = [{"id": i, "text": t, "n": k} for k, (i, t) in enumerate(zip(IDS, ROWS))]
    del records[1]["text"]  # a missing field, not a null: also missing_text
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in records) + "{not json\n"
                     + json.dumps({"id": "doc-0", "text": 42}) + "\n\n")
    out = score(model, jsonl, tmp_path / "jsonl.parquet")
    assert list(out)[:3] == ["id", "text", "n"] and len(out["id"]) == len(ROWS) + 2
    assert out["id"] == IDS + [None, "doc-0"]
    assert out["n"][2] == "2" and out["text"][-1] == "42"  # JSON Lines columns come out as text
    assert out["skip_reason"][-2:] == ["malformed_line", "non_string"]
    assert_scored_as_predictor(out, model, ROWS)


def test_a_tsv_scored_from_a_model_uri(tiny_trained, tmp_path, monkeypatch, caplog):
    tmp, run = tiny_trained
    monkeypatch.setenv("MLFLOW_TRACKING_URI", run["tracking_uri"])
    mlflow.set_tracking_uri(run["tracking_uri"])  # conftest restores it after the test
    tsv = tmp_path / "in.tsv"
    tsv.write_text("text\tid\n" + "".join(f'{t or ""}\t{i}\n' for t, i in zip(ROWS, IDS) if t != "   \n"))
    caplog.set_level("INFO", logger="textclf")
    out = score(run["model_uri"], tsv, tmp_path / "preds.parquet")
    assert out["id"] == [i for t, i in zip(ROWS, IDS) if t != "   \n"]
    kept = [i for i, r in enumerate(out["skip_reason"]) if r is None]
    assert len(kept) == 6
    assert np.allclose(probs(out, kept), expected_probs(str(tmp / "model"), [out["text"][i] for i in kept]),
                       atol=1e-6)
    done = [r.getMessage() for r in caplog.records if r.getMessage().startswith("scored ")]
    flagged = sum(out["needs_review"][i] for i in kept)
    assert done == [f"scored 6 of 8 rows of {tsv} into {tmp_path / 'preds.parquet'}; {flagged} need review; "
                    "skipped: empty_text 2"]


@pytest.mark.parametrize("case, args, message", [
    ("missing column", ["--text-column", "body"], "has no column 'body'; its columns are ['id', 'text', 'label']"),
    ("column clash", [], "has columns the predictions are written to (['label']); pass --id-column"),
    ("bad --out", ["--id-column", "id", "--out", "preds.csv"], "name a file ending in .parquet"),
    ("no --out", ["--id-column", "id", "--out", ""], "--table needs --out preds.parquet"),
    ("files too", ["--id-column", "id", "a.txt"], "pass either text files or --table, not both"),
    ("unknown format", ["--table", "in.xlsx"], "unknown format; pass a table ending in .csv, .tsv"),
    ("not a file", ["--table", "nope.csv"], "nope.csv is not a file"),
    ("not parquet", ["--table", "fake.parquet"], "could not be read as PARQUET"),
])
def test_bad_input_is_one_line_naming_the_fix(case, args, message, tmp_path, monkeypatch):
    """All caught before a model loads: the model folder need not exist."""
    monkeypatch.chdir(tmp_path)
    pq.write_table(pa.table({"id": ["a"], "text": ["t"], "label": ["x"]}), "in.parquet")
    (tmp_path / "fake.parquet").write_text("id,text\n")
    (tmp_path / "in.xlsx").write_text("")
    argv = ["no-model", "--table", "in.parquet", "--out", "preds.parquet", *args]
    with pytest.raises(UserError) as caught:
        predict.main(argv)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert not (tmp_path / "preds.parquet").exists()


def test_the_command_exits_1_with_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "textclf.predict", "no-model", "--out", "p.parquet"],
                          capture_output=True, text=True, cwd=tmp_path, env=venv_env(), timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "--out: for tables only; add --table in.parquet, or leave them out to classify text files."]


def test_an_interrupted_scoring_says_what_is_true(model, tmp_path):
    """Issue 55: after SIGTERM predict said "rerun the same command (or `dvc repro`) to
    resume"; scoring does not resume and no stage runs it. It says so, and writes nothing."""
    import signal
    import time

    pd.DataFrame({"text": TEXTS * 4000}).to_parquet(tmp_path / "big.parquet")
    proc = subprocess.Popen([sys.executable, "-m", "textclf.predict", model, "--table", "big.parquet",
                             "--out", "preds.parquet", "--batch-size", "8"], cwd=tmp_path, env=venv_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for _ in range(1200):  # until scoring writes (atomic_path's temp file beside --out)
        if list(tmp_path.glob(".preds.parquet.*")) or proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    assert "interrupted by SIGTERM; predict keeps nothing of an interrupted run" in err, err[-2000:]
    assert "dvc repro" not in err and "to resume" not in err
    assert not (tmp_path / "preds.parquet").exists() and not list(tmp_path.glob(".preds.parquet.*"))
