"""Report pieces (pure, fast): headline flags, calibration, rendering, lineage tags, mistakes."""
import numpy as np
import pandas as pd
import pytest

from textclf.report.sections import data_section, headline, mistakes_section, near_duplicates_section, serving_section
from textclf.evaluate.comparison import compare
from textclf.report.document import Figure, Para, Table, to_html, to_markdown
from textclf.evaluate.metrics import calibration
from textclf.tracking.runs import lock_hashes


def metrics(gap: float, guards=None) -> dict:
    """Metrics of a 300-document test split where the model is `gap` ahead of the baseline."""
    model, base = np.ones(300, bool), np.ones(300, bool)
    (base if gap > 0 else model)[:round(abs(gap) * 300)] = False
    return {"accuracy": 0.95 + gap, "macro_f1": 0.94 + gap, "ece": 0.03,
            "baseline": {"accuracy": 0.95, "macro_f1": 0.94},
            "gap": {"accuracy": gap, "macro_f1": gap}, "guards": guards or {"load_audit": "pass"},
            "comparison": compare(model, base, 1000, seed=0, alpha=0.05)}


def test_headline_gives_the_verdict_and_flags_a_worse_model_and_failed_guards():
    text = to_markdown(headline(metrics(-0.05)))
    assert "significantly worse than its TF-IDF baseline" in text and "gap -0.0500" in text
    assert "**Worse than the baseline**: -5.00 points" in text
    assert "**Better than the baseline**: +5.00 points" in to_markdown(headline(metrics(0.05)))
    noise = to_markdown(headline(metrics(0.01)))  # 3 documents of 300
    assert "**No significant difference from the baseline**: +1.00 points" in noise
    assert "worse" not in noise.lower()
    page = to_html(headline(metrics(0.01, {"load_audit": "fail", "lr_sanity": "warn", "collapse": "pass"})), "t")
    assert "guard alarms: load_audit; this model does not become champion" in page
    assert '<span class="fail">fail</span>' in page and '<span class="note">warn</span>' in page
    allowed = to_html(headline(metrics(0.01, {"load_audit": "allowed"})), "t")
    assert "Guard warnings: load_audit: allowed" in allowed and '<span class="note">allowed</span>' in allowed
    assert "alarm" not in allowed


def test_the_first_line_says_when_the_served_model_is_below_its_baseline():
    """Issue 59: a model below its baseline (here on macro-F1 alone, not significantly) is said
    in the report's first line, with the recipe; one at or above it is not."""
    below = metrics(0.0)
    below["gap"] = {"accuracy": 0.0, "macro_f1": -0.116}
    below["ensemble"] = {"accuracy": 0.792, "macro_f1": 0.642}
    first = to_markdown(headline(below)).strip().splitlines()[0]
    assert "below its TF-IDF baseline (macro-F1 -0.1160)" in first and "train.budget_minutes" in first
    assert "accuracy 0.7920, macro-F1 0.6420" in first
    worse = to_markdown(headline(metrics(-0.05))).strip().splitlines()[0]
    assert "significantly worse than its TF-IDF baseline (accuracy -0.0500, macro-F1 -0.0500)" in worse
    assert to_markdown(headline(metrics(0.05))).strip().startswith("**Test accuracy")
    served = {**below, "blend": {"weight": 0.4, "accuracy": 0.99, "macro_f1": 0.99,
                                 "comparison": {**below["comparison"], "verdict": "better"}}}
    text = to_markdown(headline(served)).strip()
    assert text.startswith("**Test accuracy")  # the blend it serves is above the baseline: no alert
    assert "**Served: the blend** 0.4 × model + 0.6 × baseline" in text and "macro-F1 0.9900" in text
    served["blend"]["macro_f1"] = 0.90
    assert "below its TF-IDF baseline (macro-F1 -0.0400)" in to_markdown(headline(served)).strip().splitlines()[0]


def test_headline_with_no_champion_says_so_not_version_none():
    """A first version with a guard alarm leaves no champion (issue 55, rough edges)."""
    reg = {"model": "textclf", "version": 1, "promoted": False, "champion": None, "reason": "guard alarms: collapse"}
    text = to_markdown(headline({**metrics(0.01), "registry": reg}))
    assert "version 1 is the challenger; no champion yet (guard alarms: collapse)" in text and "None" not in text
    moved = to_markdown(headline({**metrics(0.01), "registry": {**reg, "promoted": True, "champion": 1}}))
    assert "challenger; champion moved to it" in moved


def test_ece_is_zero_when_confidence_matches_accuracy_and_measures_the_gap_otherwise():
    conf = np.array([0.8] * 10 + [0.6] * 5)
    correct = np.array([1] * 8 + [0] * 2 + [1] * 3 + [0] * 2, dtype=bool)
    cal = calibration(conf, correct)
    assert cal["ece"] == pytest.approx(0.0)
    assert [b["count"] for b in cal["bins"]] == [5, 10]
    overconfident = calibration(np.ones(4), np.array([1, 0, 1, 0], dtype=bool))  # 1.0 -> last bin
    assert overconfident["ece"] == pytest.approx(0.5) and overconfident["bins"][0]["low"] == 0.9


def test_html_escapes_text_and_embeds_figures_markdown_escapes_pipes():
    blocks = [Para("**bold** and `code` <script>x</script>"),
              Table(["a|b", "c"], [["<b>cell</b>", "x|y"], [[2, 3], "recovered"]]),
              Figure("fig <1>", b"\x89PNG")]
    page = to_html(blocks, "title")
    assert "<strong>bold</strong>" in page and "<code>code</code>" in page
    assert "<script>" not in page and "&lt;b&gt;cell&lt;/b&gt;" in page
    assert "src='data:image/png;base64,iVBORw==" in page and "fig &lt;1&gt;" in page
    assert "<td>[2, 3]</td>" in page and '<span class="note">recovered</span>' in page  # a list cell
    md = to_markdown(blocks)
    assert "| a\\|b | c |" in md and "x\\|y" in md and "Figure: fig <1>" in md


def test_lock_hashes_hash_outputs_and_params_and_skip_the_running_stage():
    lock = {"stages": {
        "tokenize": {"outs": [{"path": "data/processed/tokens.parquet", "md5": "abc"}],
                     "params": {"params.yaml": {"tokenize": {"max_length": 64}}}},
        "report": {"outs": [{"path": "reports/report.md", "md5": "stale"}]}}}
    tags = lock_hashes(lock, running="report")
    assert tags["dvc.out.data/processed/tokens.parquet"] == "abc"
    assert "dvc.out.reports/report.md" not in tags and len(tags["dvc.params.tokenize"]) == 32
    lock["stages"]["tokenize"]["params"]["params.yaml"]["tokenize"]["max_length"] = 128
    assert lock_hashes(lock, running="report")["dvc.params.tokenize"] != tags["dvc.params.tokenize"]


def test_mistakes_are_the_most_confident_wrong_predictions_with_a_snippet():
    n = 30
    preds = pd.DataFrame({"doc_id": [f"d{i}" for i in range(n)], "label": ["a"] * n,
                          "predicted": ["b"] * (n - 1) + ["a"], "probability": np.linspace(0.5, 0.99, n),
                          "correct": [False] * (n - 1) + [True]})
    corpus = pd.DataFrame({"doc_id": preds["doc_id"], "source_path": [f"a/{i}.txt" for i in range(n)],
                           "text": ["word " * 100] * n})
    table = mistakes_section(preds, corpus)[1]
    assert len(table.rows) == 20
    probs = [float(r[3]) for r in table.rows]
    assert probs == sorted(probs, reverse=True) and probs[0] == pytest.approx(0.973, abs=1e-3)
    assert table.rows[0][0] == "a/28.txt" and len(table.rows[0][4]) <= 161


def test_data_section_shows_near_duplicate_groups_and_pairs():
    nd = {"enabled": True, "threshold": 0.5, "shingle_size": 5, "groups": 2,
          "documents_in_groups": 5, "group_sizes": {"2": 1, "3": 1},
          "top_pairs": [{"a": "tech/153.txt", "b": "tech/185.txt", "jaccard": 0.9982}],
          "mixed_label_groups": [{"labels": ["a", "b"], "paths": ["a/1", "b/1"], "action": "dropped"}]}
    ingest = {"source": "bbc", "files_seen": 7, "kept": 7, "skipped": {}, "encodings": {"utf-8": 7},
              "duplicates_not_byte_identical": 0, "per_class": {"tech": 7}, "near_duplicates": nd}
    tokens = {"mean": 1, "p50": 1, "p90": 1, "max": 1, "pct_truncated": 0, "max_length": 64}
    counts = {s: {"tech": 1} for s in ("train", "validation", "test")}
    histogram = pd.DataFrame({"tokens_from": [0], "tokens_to": [8], "documents": [7]})
    md = to_markdown(data_section(ingest, tokens, counts, histogram))
    assert "**2 groups holding 5 documents** (groups of each size: 1 of 2, 1 of 3)" in md
    assert "| tech/153.txt | tech/185.txt | 0.9982 |" in md and "Mixed-label groups: 1, dropped." in md
    assert "detection is off" in to_markdown(near_duplicates_section({"enabled": False}))
    none = to_markdown(near_duplicates_section({**nd, "groups": 0, "top_pairs": []}))
    assert none.strip() == "Near-duplicates (word 5-shingles, Jaccard ≥ 0.5): none."


def test_the_token_paragraph_says_what_the_truncation_leaves_unread():
    from textclf.report.sections import how_read

    base = {"pct_truncated": 40.0, "max_length": 128}
    assert how_read(base) == "**40.0 % truncated** at max_length 128."  # stats from before the count
    assert how_read({**base, "truncation": "head+tail", "pct_tokens_unread": 31.5}) == \
        "**40.0 % truncated** at max_length 128, **31.5 % of all tokens unread**."
    chunks = how_read({**base, "truncation": "chunks", "pct_truncated": 0.0, "pct_multi_window": 40.0,
                       "windows_mean": 5.1, "windows_max": 37})
    assert chunks == ("**read whole** in windows of max_length 128: 5.1 per document (at most 37); "
                      "40.0 % of the documents take more than one.")


def test_headline_lists_a_recovered_collapse_as_a_warning_naming_the_epochs():
    text = to_markdown(headline({**metrics(0.0, {"collapse": "recovered"}), "kept_epoch": 3}, [1]))
    assert "Guard warnings: collapse: recovered (epochs 1 collapsed; the kept epoch 3 did not" in text
    assert "guard alarms" not in text


def test_data_version_section_shows_the_diff_the_gate_and_the_last_moves():
    from textclf.report.sections import data_version_section

    kinds = {k: {"count": n, "per_class": {"tech": n} if n else {},
                 "examples": [{"path": "tech/9.txt"}] if n else []}
             for k, n in (("added", 16), ("removed", 0), ("relabelled", 0), ("edited", 0))}
    diff = {"against_version": 1, "old_documents": 64, "new_documents": 80, "unchanged": 64,
            "split_moves": {"moved": 0, "test_to_train": 0}, **kinds}
    cmp = {"champion_version": 1, "n": 9, "rule": "not_worse", "reason": "on 9 common test documents: …",
           "left_out": {"challenger_test": 12, "champion_trained_on": 3,
                        "near_duplicate_of_champion_training": 0},
           "challenger": {"accuracy": 0.8, "macro_f1": 0.7}, "champion": {"accuracy": 0.5, "macro_f1": 0.4}}
    registry = {"champion_comparison": cmp,
                "history": [{"when": "2026-12-01T10:00:00Z", "from": None, "to": 1, "why": "first"},
                            {"when": "2026-12-01T11:00:00Z", "from": 1, "to": 2, "why": "gate"}]}
    counts = {"method": "stable", "repairs": [{"group": "g", "label": "tech", "from": "train", "to": "test"}]}
    md = to_markdown(data_version_section(diff, registry, counts))
    assert "64 → 80 documents" in md and "| added | 16 | tech 16 | tech/9.txt |" in md
    assert "9 of 12 (3 left out as trained or validated on" in md
    assert "| champion | 0.5000 | 0.4000 |" in md
    assert "| 2026-12-01T11:00:00Z | 1 | 2 | gate |" in md and "tech train → test" in md
    assert "No data diff: no champion yet." in to_markdown(
        data_version_section({"against_version": None, "why": "no champion yet"}, None, {}))


def test_serving_section_says_what_is_served_and_why_pytorch_when_the_export_failed():
    served = {"requested": "onnx-int8", "format": "onnx-int8", "agreement": 1.0, "max_prob_diff": 0.012,
              "accuracy": 0.97, "verdict": "no significant difference", "fallback": None,
              "model_uri": "models:/m-1"}
    text = to_markdown(serving_section({"n_test": 300, "accuracy": 0.97, "serving": served}))
    assert "100.00% of predicted labels agree" in text and "Served: **onnx-int8** (`models:/m-1`)" in text
    assert "test accuracy 0.9700 against PyTorch's 0.9700, paired: no significant difference" in text
    assert "not served" not in text
    failed = {**served, "format": "torch", "agreement": 0.95, "model_uri": "models:/m-0",
              "fallback": "95.0% of its test labels agree with PyTorch's, below serve.min_agreement 99.0%"}
    text = to_markdown(serving_section({"n_test": 300, "accuracy": 0.96, "serving": failed}))
    assert "Served: **torch**" in text and "the onnx-int8 export is not served: 95.0% of its" in text
    assert "PyTorch one" in to_markdown(serving_section({"serving": {"requested": "torch", "model_uri": "m"}}))


def test_an_export_better_than_pytorch_but_refused_does_not_read_as_served():
    """Issue 50: "paired verdict: better" stood beside the refusal to serve the int8 export. The
    verdict is its accuracy against PyTorch's; the refusal is its agreement: each says which."""
    why = "361 of its 378 test labels (95.50%) agree with PyTorch's, below serve.min_agreement 99.00%"
    int8 = {"agreement": 0.955, "max_prob_diff": 0.2, "accuracy": 0.62, "verdict": "better", "fallback": why}
    fp32 = {"agreement": 1.0, "max_prob_diff": 0.001, "accuracy": 0.60, "verdict": "no significant difference",
            "fallback": None}
    serving = {"requested": "onnx-int8", "format": "onnx", "fallback": why, "model_uri": "models:/m-2",
               "checks": {"onnx-int8": int8, "onnx": fp32}}
    text = to_markdown(serving_section({"n_test": 378, "accuracy": 0.60, "serving": serving}))
    assert ("onnx-int8: 95.50% of predicted labels agree, largest probability difference 0.2000; test accuracy "
            "0.6200 against PyTorch's 0.6000, paired: better (not served: see below)") in text
    assert "onnx: 100.00% of predicted labels agree" in text and "Served: **onnx**" in text
    assert "the onnx-int8 export is not served: 361 of its 378" in text and "whatever its accuracy" in text
    assert "paired verdict: better" not in text


def test_the_readme_picture_is_a_fresh_clones_first_run(tmp_path):
    """The committed picture and report are what a newcomer's first `make repro` shows (issue 39
    item 15: they once showed a long-lived store's legacy registry decision), and the picture
    script leaves the picture alone when drawn from a store with earlier runs."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    committed = json.loads((repo / "reports" / "metrics.json").read_text())["registry"]
    assert committed["version"] == 1 and committed["promoted"], committed  # a fresh store's first model
    assert [h["from"] for h in committed.get("history", [])] == [None], committed  # nothing before it
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "report.html").write_text("<html><body>report</body></html>")
    (reports / "metrics.json").write_text(json.dumps({"registry": {"model": "textclf", "version": 8}}))
    out = tmp_path / "report.png"
    out.write_bytes(b"the old picture")
    done = subprocess.run([sys.executable, str(repo / "scripts" / "report_picture.py"), "--html",
                           str(reports / "report.html"), "--out", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and out.read_bytes() == b"the old picture"
    assert "version 8 of a store with earlier runs" in done.stderr and "fresh clone" in done.stderr


def test_the_data_sections_say_what_the_corrections_file_changed_and_nothing_without_it():
    from textclf.report.sections import data_version_section

    nd = {"enabled": False}
    ingest = {"source": "bbc", "files_seen": 8, "kept": 7, "skipped": {"dropped_by_correction": 1},
              "encodings": {"utf-8": 8}, "duplicates_not_byte_identical": 0, "per_class": {"tech": 7},
              "near_duplicates": nd, "corrections": {"file": "data/corrections.csv", "md5": "x", "rows": 4},
              "relabelled_by_corrections": {"count": 3, "documents": []},
              "dropped_by_corrections": {"count": 1, "documents": []}}
    tokens = {"mean": 1, "p50": 1, "p90": 1, "max": 1, "pct_truncated": 0, "max_length": 64}
    counts = {s: {"tech": 1} for s in ("train", "validation", "test")}
    histogram = pd.DataFrame({"tokens_from": [0], "tokens_to": [8], "documents": [7]})
    md = to_markdown(data_section(ingest, tokens, counts, histogram))
    assert "Corrections (data/corrections.csv): 3 relabelled, 1 dropped." in md
    header_only = {**ingest, "relabelled_by_corrections": {"count": 0, "documents": []},
                   "dropped_by_corrections": {"count": 0, "documents": []}}
    without = {k: v for k, v in ingest.items() if "corrections" not in k}
    plain = to_markdown(data_section(without, tokens, counts, histogram))
    assert "Corrections" not in plain  # the demo's header-only file changes nothing either
    assert to_markdown(data_section(header_only, tokens, counts, histogram)) == plain

    kinds = {k: {"count": n, "per_class": {"tech": n} if n else {}, "examples": []}
             for k, n in (("added", 0), ("removed", 0), ("relabelled", 3), ("edited", 0))}
    diff = {"against_version": 1, "old_documents": 8, "new_documents": 8, "unchanged": 5,
            "split_moves": {}, **kinds}
    by = {**diff, "relabelled": {**kinds["relabelled"], "by_corrections": 2}}
    assert "| relabelled | 3 (2 of them by the corrections file) | tech 3 |" in to_markdown(
        data_version_section(by, None, {}))
    for quiet in (diff, {**diff, "relabelled": {**kinds["relabelled"], "by_corrections": 0}}):
        assert "| relabelled | 3 | tech 3 |" in to_markdown(data_version_section(quiet, None, {}))
