"""The report from 2 to 100 classes (issue 50: a 57-class corpus gave a 57-column split table,
a 57×57 table of raw counts, 57 alphabetical rows per table, a token axis to 20 000 and one
line of 103 738 characters in `dvc metrics show`). Fast: the report's inputs are written as the
stages write them (tests/many_classes.py), no training."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from textclf.data.tokens import length_histogram
from textclf.evaluate.metrics_file import read_metrics, split_per_class, with_per_class
from textclf.report.classes import SHOWN, class_table, row_shares, split_table, top_confusions
from textclf.report.document import Figure, Heading, Table, to_html, to_markdown
from textclf.report.figures import long_tail
from textclf.report.labels import labels_section
from textclf.report.run import build

from many_classes import RUN, class_names, metrics_for, predictions, write_inputs


def flatten(tree: dict, prefix: str = "") -> dict:
    """Leaves by dotted key, as `dvc metrics show` names its columns."""
    out: dict = {}
    for key, value in tree.items():
        out.update(flatten(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value})
    return out


def test_a_class_table_puts_the_worst_first_highlights_and_folds_the_rest():
    scores = [0.5, 0.0, 0.9, 0.0, 0.7] * 8  # 40 classes, 16 at zero
    rows = [[f"c{i:02d}", f"{s:.1f}"] for i, s in enumerate(scores)]
    table = class_table(["class", "F1"], rows, worst=lambda i: scores[i], marked=lambda i: scores[i] == 0)
    shown, folded = table.parts()
    assert [r[0] for r in shown[:3]] == ["c01", "c03", "c06"]  # zeros first, ties in their order
    assert len(shown) == 16 and len(folded) == 24  # past every highlighted row (SHOWN is 15)
    assert table.marked == frozenset(range(16))
    assert [float(r[1]) for r in table.rows] == sorted(scores)
    html, md = to_html([table], "t"), to_markdown([table])
    assert "<details><summary>the other 24 classes</summary><table>" in html and html.count("<tr class='low'>") == 16
    assert "<details><summary>the other 24 classes</summary>\n\n| class | F1 |" in md
    few = class_table(["class", "F1"], rows[:5], worst=lambda i: -1)  # ties: the order as given
    assert few.rows == rows[:5] and few.parts()[1] == [] and "<details>" not in to_html([few], "t")
    assert SHOWN == 15


def test_confusion_shares_rows_and_lists_the_largest_confusions():
    confusion = {"a": {"a": 8, "b": 2, "c": 0}, "b": {"a": 3, "b": 0, "c": 3}, "c": {"a": 0, "b": 0, "c": 0}}
    shares = row_shares(np.array([[8, 2, 0], [3, 0, 3], [0, 0, 0]]))
    assert shares.tolist() == [[0.8, 0.2, 0.0], [0.5, 0.0, 0.5], [0.0, 0.0, 0.0]]  # a class without documents: 0
    assert top_confusions(confusion) == [("b", "a", 3, 0.5), ("b", "c", 3, 0.5), ("a", "b", 2, 0.2)]
    assert top_confusions(confusion, k=1) == [("b", "a", 3, 0.5)]


def test_the_split_table_is_a_column_per_class_for_a_few_and_a_row_per_class_for_many():
    few = class_names(5)
    counts = {s: {c: 3 for c in few} for s in ("train", "validation", "test")}
    assert split_table(few, counts).header == ["split"] + few  # the demo's table, as before
    many = class_names(57)
    counts = {s: {c: 10 + i for i, c in enumerate(many)} for s in ("train", "validation", "test")}
    counts["test"][many[30]] = 0
    table = split_table(many, counts)
    assert table.header == ["class", "train", "validation", "test", "total"]
    assert table.rows[0][0] == many[0] and table.rows[0][4] == 30  # the smallest first
    assert [r[0] for r in table.rows if r[3] == 0] == [many[30]] and len(table.marked) == 1


@pytest.mark.parametrize("n", [2, 5, 57, 100])
def test_the_report_reads_at_any_number_of_classes(n, tmp_path):
    blocks, _ = build(write_inputs(tmp_path, n), RUN, set())
    classes = set(class_names(n))
    tables = [b for b in blocks if isinstance(b, Table)]
    assert max(len(t.header) for t in tables) <= 14  # no 57-column table runs off the page
    for t in tables:  # a per-class table shows at most 2 × SHOWN rows before its fold
        if t.rows and t.rows[0][0] in classes:
            assert len(t.parts()[0]) <= 2 * SHOWN, t.header
    headings = [b.text for b in blocks if isinstance(b, Heading)]
    confusion = headings.index("Confusion matrix (rows: actual, columns: predicted)")
    at = blocks.index(next(b for b in blocks if isinstance(b, Heading) and b.text == headings[confusion]))
    assert isinstance(blocks[at + 1], Figure) and "confusion matrix" in blocks[at + 1].title
    version = blocks.index(next(b for b in blocks if isinstance(b, Heading) and b.text == "Data version"))
    assert not any(isinstance(b, Figure) for b in blocks[version:version + 3])  # the heatmap left it
    md = to_markdown(blocks)
    assert ("| split |" in md) == (n <= 8) and ("| class | train | validation | test | total |" in md) == (n > 8)


def test_the_headline_names_the_classes_the_model_never_answers(tmp_path):
    blocks, _ = build(write_inputs(tmp_path, 57), RUN, set())
    top = to_markdown(blocks[:blocks.index(next(b for b in blocks if isinstance(b, Heading) and b.text == "Data"))])
    metrics = read_metrics(tmp_path / "metrics.json", tmp_path / "pc.json")
    zero = [c for c, s in metrics["per_class"].items() if s["support"] and s["f1"] == 0]
    never = metrics["sets"]["never_covered"]
    assert len(zero) == 19 and never
    assert f"WARNING: 19 of 57 classes at F1 0 on test (the model gets none of their documents right): {zero[0]}" in top
    assert f"WARNING: prediction sets never cover {len(never)} class(es) on test: {never[0]}" in top
    assert "Guard warnings: silent_class: warn (never recalled on validation: " in top and "and 2 more" in top
    assert metrics["classes"] == {"count": 57, "f1_zero": 19, "silent": 14, "never_covered": len(never)}


def test_the_demo_sized_report_keeps_its_tables(tmp_path):
    """Five classes: a split table with a column per class, the confusion counts as a table,
    no fold and no alert beyond the model's own."""
    blocks, _ = build(write_inputs(tmp_path, 5), RUN, set())
    md = to_markdown(blocks)
    labels = class_names(5)
    assert "| split | " + " | ".join(labels) + " |" in md and "|  | " + " | ".join(labels) + " |" in md
    assert "<details>" not in md


def test_metrics_json_is_bounded_and_dvc_metrics_show_stays_narrow_at_57_classes(tmp_path):
    """The file `dvc metrics show` prints holds the same keys at 3 and at 57 classes; the
    per-class and per-pair entries are beside it and join back to the whole."""
    def metrics(n: int) -> dict:
        labels = class_names(n)
        return metrics_for(labels, *predictions(labels))

    whole = metrics(57)
    summary, per_class = split_per_class(whole)
    assert with_per_class(summary, per_class) == whole
    assert set(flatten(summary)) == set(flatten(split_per_class(metrics(3))[0]))
    assert len(flatten(summary)) <= 80 and len(flatten(whole)) > 3500
    assert not set(class_names(57)) & {part for key in flatten(summary) for part in key.split(".")}
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    dvc = [sys.executable, "-m", "dvc"]
    subprocess.run(dvc + ["init", "-q"], cwd=repo, check=True)
    (repo / "dvc.yaml").write_text("metrics:\n  - metrics.json\n")
    (repo / "metrics.json").write_text(json.dumps(summary))
    shown = subprocess.run(dvc + ["metrics", "show"], cwd=repo, capture_output=True, text=True, check=True).stdout
    widest = max(map(len, shown.splitlines()))
    assert 300 < widest < 5000, widest  # 155 347 characters on a 57-class run before (a real one: 2 586 now)


def test_a_long_tail_of_token_lengths_gets_one_bin_counted_not_drawn():
    rng = np.random.default_rng(0)
    lengths = np.r_[rng.integers(20, 200, 3000), 20_000]
    tail = pd.DataFrame(length_histogram(lengths))
    assert tail["tokens_to"].iloc[-2] == int(np.ceil(np.percentile(lengths, 99))) and tail["tokens_to"].iloc[-1] == 20_000
    assert long_tail(tail) == tail["documents"].iloc[-1] == int((lengths >= tail["tokens_from"].iloc[-1]).sum())
    assert tail["documents"].sum() == len(lengths) and len(tail) == 20
    even = rng.integers(94, 123, 80)  # the demo's: equal bins from the shortest to the longest, as before
    counts, edges = np.histogram(even, bins=20)
    assert pd.DataFrame(length_histogram(even))["documents"].tolist() == counts.tolist()
    assert long_tail(pd.DataFrame(length_histogram(even))) == 0


def test_the_most_suspect_labels_show_their_quality_in_digits():
    """Among 57 classes the judges give a wrong label 1e-4 or less, and 0 to a class the baseline's
    other folds never held: three decimals showed 0.000 for every one of them."""
    summary = {"folds": 2, "model_judged": ["test"], "flagged": 2, "documents": 3, "estimated_noise": 0.2,
               "flagged_by_split": {"train": 2}, "noise_warn": 0.1, "show": 20, "overlapping": [],
               "test": {"flagged": 0, "documents": 1, "accuracy": 1.0, "accuracy_unflagged": 1.0},
               "per_class": {"a": {"documents": 2, "flagged": 1, "noise_rate": 0.05},
                             "b": {"documents": 1, "flagged": 1, "noise_rate": 0.5}}}
    table = pd.DataFrame({"doc_id": ["1", "2", "3"], "source_path": ["x", "y", "z"], "split": "train",
                          "given": ["a", "b", "a"], "suggested": ["b", "a", "a"], "quality": [0.0, 3.2e-5, 0.0123],
                          "flagged": [True, True, True]})
    md = to_markdown(labels_section(summary, table, pd.DataFrame({"doc_id": ["1", "2", "3"], "text": "t"})))
    assert "| x | train | a | b | 0 (class not in the other folds) |" in md
    assert "| y | train | b | a | 3.2e-05 |" in md and "| z | train | a | a | 0.012 |" in md
    assert md.index("| b | 1 | 1 | 50.0% |") < md.index("| a | 2 | 1 | 5.0% |")  # the noisiest class first
