"""The report's label-issues blocks (stage labels, docs/label_issues.md): the label_noise
guard in the headline area, and a section with the estimated share of wrong labels per
class, the near-duplicate groups that hold two labels, the most suspect documents, the
overlapping class pairs and what the flagged test documents do to the test accuracy."""
from __future__ import annotations

import pandas as pd

from textclf.data.mixed_groups import mixed_groups
from textclf.evaluate.metrics import metric_names
from textclf.report.classes import class_table
from textclf.report.document import Block, Heading, Para, Table
from textclf.severity import WARNING, severity

SNIPPET = 160  # characters of text shown per suspect document


def label_noise_note(summary: dict) -> list[Block]:
    """The label_noise guard, named beside the model's guards when it warns."""
    if severity(summary["label_noise"]) != WARNING:
        return []
    return [Para(f"Guard warnings: label_noise: warn (an estimated {summary['estimated_noise']:.1%} of the "
                 f"labels are wrong, above labels.noise_warn={summary['noise_warn']}; every test score is "
                 "measured against them: see Label issues).")]


def labels_section(summary: dict, table: pd.DataFrame, corpus: pd.DataFrame) -> list[Block]:
    test = summary["test"]
    blocks: list[Block] = [
        Heading("Label issues"),
        Para(f"Every document judged by models that never saw it (the TF-IDF baseline in "
             f"{summary['folds']} folds grouped by near-duplicate group; on "
             f"{' and '.join(summary['model_judged'])}, averaged with the "
             f"fine-tuned model), by cleanlab's confident learning: **{summary['flagged']} of "
             f"{summary['documents']} labels flagged** as probably wrong, an estimated "
             f"**{summary['estimated_noise']:.1%}** of the labels wrong "
             f"(by split: {', '.join(f'{s} {n}' for s, n in summary['flagged_by_split'].items())})."),
        Para(f"Test: {test['flagged']} of {test['documents']} test documents flagged by the baseline alone "
             f"(the model's own answers do not choose which are left out); test accuracy "
             f"**{fmt(test['accuracy'])}** on all of them, **{fmt(test['accuracy_unflagged'])}** on the "
             "ones not flagged: how far a wrong test label can move the headline."),
        noise_table(summary)]
    if summary["overlapping"]:
        blocks.append(Table(["class", "class", "documents labelled one, judged the other", "joint probability"],
                            [[p["a"], p["b"], p["documents"], f"{p['joint']:.4f}"]
                             for p in summary["overlapping"]]))
    blocks += mixed_groups_blocks(summary, table)
    # the labels.show most suspect: the flagged first (the verdict; quality alone put 11 unflagged
    # among BBC's 20), then the lowest quality unflagged; each part lowest quality first
    order = table.sort_values("flagged", ascending=False, kind="stable")  # the table: quality, lowest first
    worst = order.head(summary["show"]).merge(corpus[["doc_id", "text"]], on="doc_id", how="left")
    if worst.empty:
        return blocks
    rows = [[r.source_path, r.split, r.given, r.suggested, quality(r.quality), "yes" if r.flagged else "no",
             " ".join(str(r.text).split())[:SNIPPET] + "…"] for r in worst.itertuples()]
    flagged = int(worst["flagged"].sum())
    return blocks + [Para(f"The {len(rows)} most suspect documents (`labels.show`: the flagged first, {flagged} "
                          "here, then the unflagged; reports/label_issues.parquet holds every document); quality is "
                          "the probability the judges give the label the document carries (cleanlab's "
                          "self-confidence), lowest first in each part:"
                          + ("" if flagged else " no label is flagged.")),
                     Table(["document", "split", "given", "suggested", "quality", "flagged", "text"], rows)]


def mixed_groups_blocks(summary: dict, table: pd.DataFrame) -> list[Block]:
    """The near-duplicate groups that hold two labels, kept by ingest for a person to decide;
    nothing when there are none (or the summary predates them)."""
    counts = summary.get("mixed_groups") or {}
    if not counts.get("groups"):
        return []
    groups = mixed_groups(table)
    shown = groups.head(summary["show"])
    return [Para(f"**{counts['groups']} near-duplicate groups hold two labels** ({counts['documents']} documents, "
                 f"{counts['flagged']} of them flagged): ingest kept them (`ingest.near_duplicates.conflicts: keep`), "
                 "each group in one split, each document with its label: look-alikes that tell two classes apart, "
                 "or a wrong label. `python -m textclf.labelissues review` lists every one of them with its group"
                 + (f"; the {len(shown)} with the least label quality:" if len(shown) < len(groups) else ":")),
            Table(["group", "split", "documents (label)", "flagged", "least quality"],
                  [[r.group, r.split, r.documents, int(r.flagged), quality(r.quality)] for r in shown.itertuples()])]


def noise_table(summary: dict) -> Table:
    """Per class, the estimated share of wrong labels: the noisiest first, those above
    labels.noise_warn highlighted, folded past report.classes.SHOWN."""
    per_class = summary["per_class"]
    classes = list(per_class)
    return class_table(["class", "documents", "flagged", "estimated share wrong"],
                       [[c, v["documents"], v["flagged"], f"{v['noise_rate']:.1%}"] for c, v in per_class.items()],
                       worst=lambda i: -per_class[classes[i]]["noise_rate"],
                       marked=lambda i: per_class[classes[i]]["noise_rate"] > summary["noise_warn"])


def quality(value: float) -> str:
    """A label quality with its digits: among many classes the most suspect labels get a probability
    of 1e-4 or less, which three decimals show as 0.000 for every one of them. Exactly 0 is a class
    the cross-fitted baseline never saw (all its documents in the judged fold: one near-duplicate
    group, say), and says so: that label was not judged, only flagged."""
    if value == 0:
        return "0 (class not in the other folds)"
    return f"{value:.3f}" if value >= 0.001 else f"{value:.1e}"


def fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def label_metrics(summary: dict) -> dict[str, float]:
    """Counts and rates logged as metrics on the training run."""
    out = {"label_issues_flagged": summary["flagged"], "label_noise_estimated": summary["estimated_noise"],
           "label_issues_test_flagged": summary["test"]["flagged"]}
    if summary["test"]["accuracy_unflagged"] is not None:
        out["test_accuracy_unflagged"] = summary["test"]["accuracy_unflagged"]
    names = metric_names(list(summary["per_class"]))  # as test_f1.<name>: MLflow-safe, never colliding
    return out | {f"label_noise.{names[c]}": v["noise_rate"] for c, v in summary["per_class"].items()}
