"""The report's per-class sections: the training curve and test metrics, the confusion matrix
and the model against the baseline, each table worst class first and folded (report.classes)."""
from __future__ import annotations

import pandas as pd

from textclf.evaluate.metrics import metric_names
from textclf.report import figures
from textclf.report.classes import class_table, f1_zero, matrix, named, row_shares, top_confusions
from textclf.report.document import Block, Figure, Heading, Para, Table


def results_section(curve: pd.DataFrame, metrics: dict) -> list[Block]:
    per_class = metrics["per_class"]
    labels = list(per_class)
    names = metric_names(labels)
    zero = f1_zero(per_class)
    rows = [[c] + [f"{s[k]:.3f}" for k in ("precision", "recall", "f1")] + [s["support"], names[c]]
            for c, s in per_class.items()]
    return [
        Heading("Training curve"),
        Figure("training loss and validation scores per epoch", figures.training_curves(curve)),
        Para("Per epoch: the validation scores, the top class's share of validation predictions "
             "and the prediction entropy (the collapse detector's inputs), and whether that epoch "
             "collapsed."),
        Table(list(curve.columns), curve.round(4).astype(object).values.tolist()),
        Heading("Test metrics"),
        Para(f"Accuracy **{metrics['accuracy']:.4f}**, macro-F1 **{metrics['macro_f1']:.4f}** "
             f"on {metrics['n_test']} documents, with the weights of epoch {metrics['kept_epoch']} "
             "(`train.select`)." + multilabel_note(metrics)),
        *([Para(f"**{len(zero)} of {len(labels)} classes at F1 0** (test documents, none right): "
                f"{named(zero)}. Worst F1 first, and at 0 the most test documents first.")] if zero else []),
        class_table(["class", "precision", "recall", "F1", "support", "MLflow name"], rows,
                    worst=lambda i: zero_first(per_class[labels[i]]["f1"], per_class[labels[i]]["support"]),
                    marked=lambda i: labels[i] in zero),
        Para("Per-class metrics are logged as `test_f1.<MLflow name>` (and precision, recall); a "
             "name that needed characters replaced carries a hash of the class name, and the run's "
             "`class_names.json` maps every class to its name.")]


def zero_first(score: float, support: int) -> tuple[float, int]:
    """A per-class table's order: the lowest score first and, among the classes at 0, the one
    with the most test documents first (the costliest silence); other ties keep their order."""
    return score, -support if score == 0 else 0


def confusion_png(confusion: dict[str, dict[str, int]]) -> bytes:
    """The heatmap: shares of each actual class (reports/confusion.png and the report's figure)."""
    labels, counts = matrix(confusion)
    return figures.confusion_heatmap(labels, counts, row_shares(counts))


def confusion_section(confusion: dict[str, dict[str, int]], png: bytes) -> list[Block]:
    """The heatmap, the counts as a table while it fits the page, and the largest confusions."""
    labels, counts = matrix(confusion)
    blocks: list[Block] = [Heading("Confusion matrix (rows: actual, columns: predicted)"),
                           Figure("confusion matrix: colour the share of each actual class's test "
                                  "documents given each class", png)]
    if len(labels) <= figures.ANNOTATED:  # the counts fit the page as a table too
        blocks.append(Table([""] + labels, [[a] + counts[i].tolist() for i, a in enumerate(labels)]))
    top = top_confusions(confusion)
    if top:
        blocks += [Para(f"The {len(top)} largest confusions (reports/confusion.csv holds every test document):"),
                   Table(["actual", "predicted as", "documents", "share of actual's"],
                         [[a, p, n, f"{s:.0%}"] for a, p, n, s in top])]
    return blocks


def multilabel_note(metrics: dict) -> str:
    """A multi-label model's scores beyond accuracy and macro-F1, and what those two mean there."""
    if metrics.get("task") != "multilabel":
        return ""
    cuts = named([f"{label} {t:.3f}" for label, t in metrics["thresholds"].items()])
    return (f" Several labels per document: accuracy is subset accuracy (the whole label set right) "
            f"and macro-F1 is over the labels; micro-F1 **{metrics['micro_f1']:.4f}**, Hamming loss "
            f"**{metrics['hamming_loss']:.4f}** (the share of document-label decisions wrong). Each "
            f"label is given where its probability reaches its threshold, tuned on validation: {cuts}. "
            "The confusion matrix counts, per label a document carries, the labels it is given.")


def baseline_section(metrics: dict) -> list[Block]:
    """Model and baseline side by side: per-class accuracy (the model's worst first; a class the
    model never gets right and the baseline does, highlighted), the paired counts, the ensemble."""
    cmp, per_class = metrics["comparison"], metrics["per_class_accuracy"]
    several = metrics.get("task") == "multilabel"
    classes = list(per_class)
    rows = [[c, s["support"], f"{s['model']:.3f}", f"{s['baseline']:.3f}"] for c, s in per_class.items()]
    lost = [c for c, s in per_class.items() if s["support"] and s["model"] == 0 < s["baseline"]]
    blocks: list[Block] = [
        Heading("Model versus the TF-IDF baseline"),
        Para(f"Paired on the same {metrics['n_test']} test documents: both right "
             f"{cmp['both_right']}, only the model {cmp['model_only']}, only the baseline "
             f"{cmp['baseline_only']}, both wrong {cmp['both_wrong']}. Exact McNemar p = "
             f"{cmp['mcnemar_p']:.3g}; bootstrap 95 % interval of the accuracy difference "
             f"{cmp['ci_low']:+.4f} to {cmp['ci_high']:+.4f} ({cmp['resamples']} resamples). "
             f"Verdict (alpha {cmp['alpha']}; both must agree): **{cmp['verdict']}**."),
        *([Para(f"**{len(lost)} class(es) the baseline gets right and the model never does**: {named(lost)}.")]
          if lost else []),
        class_table(["label", "documents", "model recall", "baseline recall"] if several else
                    ["class", "documents", "model accuracy", "baseline accuracy"], rows,
                    worst=lambda i: zero_first(per_class[classes[i]]["model"], per_class[classes[i]]["support"]),
                    marked=lambda i: classes[i] in lost)]
    if several:
        blocks.insert(2, Para("Several labels per document: a document is right when its whole label "
                              "set is; per label, the share of its documents each system gives it."))
    if metrics.get("ensemble"):
        ens = metrics["ensemble"]
        blocks.append(Para(f"Mean of both systems' probabilities (`evaluate.ensemble`): accuracy "
                           f"{ens['accuracy']:.4f}, macro-F1 {ens['macro_f1']:.4f}."))
    return blocks
