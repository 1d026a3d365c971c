"""The report's sections, each a list of document blocks (report.document): the headline
(scores, the verdict against the baseline, the guards, the classes the model never answers),
data, the served model, near-duplicates, mistakes, params and lineage (test metrics, confusion
and baseline: report.results; calibration: report.confidence)."""
from __future__ import annotations

from typing import Sequence

import pandas as pd

from textclf.config import flatten
from textclf.data.ingest_report import lost_line
from textclf.data.versions import described
from textclf.data.weights import silent_advice
from textclf.evaluate.comparison import WORSE
from textclf.evaluate.comparison import headline as verdict_line
from textclf.report import figures
from textclf.report.classes import f1_zero, named, split_table
from textclf.report.document import Alert, Block, Figure, Heading, Para, Table
from textclf.severity import ALARM, WARNING, with_severity

MISTAKES = 20
SNIPPET = 160  # characters of text shown per mistake


def headline(metrics: dict, collapsed_epochs: Sequence[int] = ()) -> list[Block]:
    """Accuracy, macro-F1, the verdict against the TF-IDF baseline and every guard, at a glance."""
    base, gap = metrics["baseline"], metrics["gap"]
    blocks: list[Block] = below_baseline(metrics) + [
        Para(f"**Test accuracy {metrics['accuracy']:.4f}, macro-F1 {metrics['macro_f1']:.4f}** "
             f"— TF-IDF baseline {base['accuracy']:.4f} / {base['macro_f1']:.4f}, "
             f"gap {gap['accuracy']:+.4f} / {gap['macro_f1']:+.4f}; "
             f"expected calibration error {metrics['ece']:.4f}" + raw_ece(metrics) + "."),
        Para(verdict_line(metrics["comparison"]))]
    if metrics.get("blend"):  # what the export serves (serve.blend), with its own paired verdict
        b = metrics["blend"]
        blocks.append(Para(f"**Served: the blend** {b['weight']:.1f} × model + {1 - b['weight']:.1f} × baseline "
                           f"(`serve.blend`, chosen on validation): test accuracy {b['accuracy']:.4f}, macro-F1 "
                           f"{b['macro_f1']:.4f}; against the baseline {b['comparison']['difference']:+.4f}, "
                           f"McNemar p = {b['comparison']['mcnemar_p']:.3g}: **{b['comparison']['verdict']}**."))
    if metrics.get("registry"):
        reg = metrics["registry"]
        verdict = ("champion moved to it" if reg["promoted"] else
                   f"champion stays at version {reg['champion']}" if reg["champion"] else "no champion yet")
        blocks.append(Para(f"Model registry: `{reg['model']}` version {reg['version']} is the "
                           f"challenger; {verdict} ({reg['reason']})."))
    failed = with_severity(metrics["guards"], ALARM)
    if failed:
        blocks.append(Alert(f"guard alarms: {', '.join(failed)}; this model does not become champion."))
    recovered = (f" (epochs {', '.join(map(str, collapsed_epochs))} collapsed; the kept epoch "
                 f"{metrics.get('kept_epoch')} did not, see the training curve)")
    silent = named([f"{c['class']} ({c['support']} validation documents)" for c in metrics.get("silent_classes", [])])
    silent_note = f" (never recalled on validation: {silent}; {silent_advice(metrics.get('class_weights', 'none'))})"

    def note(name: str) -> str:
        if name == "silent_class":
            return silent_note
        return recovered if metrics["guards"][name] == "recovered" else ""
    warned = [f"{n}: {metrics['guards'][n]}{note(n)}" for n in with_severity(metrics["guards"], WARNING)]
    if warned:
        blocks.append(Para("Guard warnings: " + "; ".join(warned) + "."))
    return blocks + unanswered(metrics) + [Table(["guard", "status"], [[n, s] for n, s in metrics["guards"].items()])]


def below_baseline(metrics: dict) -> list[Block]:
    """The report's first line where the served model scores below its TF-IDF baseline on test
    (accuracy or macro-F1; significantly or not): which, by how much, and the recipe that
    closes the gap on the benchmark corpora (docs/benchmarks.md, recipes against CPU-minutes)."""
    blend = metrics.get("blend")  # a blended export serves the blend (serve.blend): judged on its scores
    gap = {k: blend[k] - metrics["baseline"][k] for k in ("accuracy", "macro_f1")} if blend else metrics["gap"]
    worse = (blend or metrics)["comparison"]["verdict"] == WORSE
    below = [f"{name} {gap[key]:+.4f}" for key, name in (("accuracy", "accuracy"), ("macro_f1", "macro-F1"))
             if gap[key] < 0]
    if not below:
        return []
    ensemble = metrics.get("ensemble") or {}
    mean = (f" The mean of both models' probabilities scored accuracy {ensemble['accuracy']:.4f}, macro-F1 "
            f"{ensemble['macro_f1']:.4f} on the same documents (evaluate.ensemble)." if ensemble else "")
    return [Alert(f"the served model is {'significantly worse than' if worse else 'below'} its TF-IDF baseline "
                  f"({', '.join(below)}): for this corpus the baseline is the better classifier as trained. "
                  "Train longer from the probe's head: `train.head_init: probe` with a larger "
                  "`train.budget_minutes` (or `train.epochs`), see docs/benchmarks.md." + mean)]


def unanswered(metrics: dict) -> list[Block]:
    """At the top, not only in their sections: the classes with test documents the model never
    gets right (F1 0), and those no prediction set covers."""
    per_class = metrics.get("per_class") or {}
    zero = f1_zero(per_class)
    never = (metrics.get("sets") or {}).get("never_covered") or []
    blocks: list[Block] = []
    if zero:
        blocks.append(Alert(f"{len(zero)} of {len(per_class)} classes at F1 0 on test (the model gets none of "
                            f"their documents right): {named(zero)}; see Test metrics."))
    if never:
        blocks.append(Alert(f"prediction sets never cover {len(never)} class(es) on test: {named(never)}; the "
                            "coverage guarantee is on average over classes, and these get none of it."))
    return blocks


def raw_ece(metrics: dict) -> str:
    """The raw softmax's ECE beside the served one's, where a temperature changed it."""
    if metrics.get("ece_raw") is None or metrics.get("temperature", 1.0) == 1.0:
        return ""
    return f" (raw softmax {metrics['ece_raw']:.4f}, temperature {metrics['temperature']:.3f})"


def dropped_classes(ingest: dict) -> list[Block]:
    """The classes ingest dropped (`ingest.small_classes: drop`), in the headline: the model
    never saw them, so it cannot predict them."""
    dropped = ingest.get("dropped_classes")
    if not dropped:
        return []
    named = ", ".join(f"{c} ({n})" for c, n in list(dropped.items())[:10])
    more = f" and {len(dropped) - 10} more" if len(dropped) > 10 else ""
    return [Alert(f"ingest dropped {len(dropped)} class(es) below ingest.min_per_class, "
                  f"{ingest['skipped'].get('small_class', 0)} documents (`ingest.small_classes: drop`): "
                  f"{named}{more}; the model cannot predict them.")]


def lost_alert(ingest: dict) -> list[Block]:
    """At the top of the report: ingest dropped more than a few percent of the documents it
    saw (data.ingest_report.LOST_WARN), by reason."""
    line = lost_line(ingest)
    return [Alert(line)] if line else []


def serving_section(metrics: dict) -> list[Block]:
    """What the logged and registered model runs (serve.format), and the check of an export
    against the PyTorch model on the test split."""
    serving = metrics.get("serving")
    if not serving:
        return []
    blocks: list[Block] = [Heading("Served model")]
    if serving["requested"] == "torch":
        return blocks + [Para(f"`serve.format: torch`: the served model is the PyTorch one "
                              f"(`{serving['model_uri']}`).")]
    # PyTorch served by the export's decision: its validation checks are what there is to show
    where = serving.get("validation") if serving["format"] == "torch" and serving.get("validation") else None
    checks = (where or {}).get("checks") or serving.get("checks") or {serving["requested"]: serving}
    documents = f"{where['documents']} validation" if where else f"{metrics['n_test']} test"
    found = "; ".join(check_line(fmt, c, None if where else metrics["accuracy"], len(checks) > 1)
                      for fmt, c in checks.items())
    blocks.append(Para(
        f"`serve.format: {serving['requested']}` checked against PyTorch on the {documents} "
        f"documents: {found}. Served: **{serving['format']}** (`{serving['model_uri']}`)."))
    if serving["fallback"] and not where and serving.get("validation"):  # what the export passed over, and why
        checked = serving["validation"]
        blocks.append(Para(f"The export's check on the {checked['documents']} validation documents: " + "; ".join(
            check_line(fmt, c, None, True) for fmt, c in checked["checks"].items()) + "."))
    if serving["fallback"]:
        instead = "the PyTorch model is" if serving["format"] == "torch" else f"the {serving['format']} export beside it is"
        blocks.append(Alert(f"the {serving['requested']} export is not served: {serving['fallback']}; {instead}. "
                            "An export that answers otherwise than the model evaluated here, or by what else is "
                            "in a request, is not served, whatever its accuracy."))
    if serving.get("unconfirmed"):
        blocks.append(Alert(f"the export stage chose {serving['format']} on validation, and the test split does not "
                            f"confirm it: {serving['unconfirmed']}. It is logged all the same, so that models/export "
                            "and the logged model answer alike, but never becomes champion; set `serve.format` "
                            "to choose another."))
    return blocks


def check_line(fmt: str, check: dict, torch_accuracy: float | None, named_format: bool) -> str:
    """One format's check: agreement first (what decides), then its accuracy against PyTorch's
    (`torch_accuracy`; None: a validation check, its accuracy alone), paired; a format not
    served says so beside its verdict, so a 'better' never reads as 'served'."""
    refused = " (not served: see below)" if check.get("fallback") else ""
    alone = (f"; {check['single_calls']} documents scored one per call differ from their batched answer by up to "
             f"{check['batch_diff']:.2g}" if "batch_diff" in check else "")  # a metrics.json from before: no such check
    return ((f"{fmt}: " if named_format else "") + f"{check['agreement']:.2%} of predicted labels agree, "
            f"largest probability difference {check['max_prob_diff']:.4f}; "
            + (f"test accuracy {check['accuracy']:.4f} against PyTorch's {torch_accuracy:.4f}" if torch_accuracy is not None
               else f"validation accuracy {check['accuracy']:.4f}")
            + f", paired: {check['verdict']}{alone}{refused}")


def near_duplicates_section(nd: dict) -> list[Block]:
    """What ingest grouped as near-duplicates (kept together by the split), with its top pairs."""
    if not nd["enabled"]:
        return [Para("Near-duplicate detection is off (`ingest.near_duplicates.enabled`): the "
                     "split only keeps exact duplicates apart.")]
    found = f"Near-duplicates (word {nd['shingle_size']}-shingles, Jaccard ≥ {nd['threshold']}): "
    if not nd["groups"]:
        return [Para(found + "none.")]
    sizes = ", ".join(f"{count} of {size}" for size, count in nd["group_sizes"].items())
    mixed = nd["mixed_label_groups"]
    return [Para(found + f"**{nd['groups']} groups holding {nd['documents_in_groups']} documents** "
                 f"(groups of each size: {sizes}); each group sits in one split. Mixed-label "
                 f"groups: {len(mixed)}" + (f", {mixed[0]['action']}." if mixed else ".")),
            Table(["document", "near-duplicate", "Jaccard"],
                  [[p["a"], p["b"], f"{p['jaccard']:.4f}"] for p in nd["top_pairs"]])]


def how_read(tokens: dict) -> str:
    """What tokenize.truncation leaves unread (token stats from before it was counted: the
    share truncated alone)."""
    if tokens.get("truncation") == "chunks":
        return (f"**read whole** in windows of max_length {tokens['max_length']}: {tokens['windows_mean']} "
                f"per document (at most {tokens['windows_max']}); {tokens['pct_multi_window']} % of the "
                "documents take more than one.")
    unread = (f", **{tokens['pct_tokens_unread']} % of all tokens unread**"
              if "pct_tokens_unread" in tokens else "")
    return f"**{tokens['pct_truncated']} % truncated** at max_length {tokens['max_length']}{unread}."


def corrections_note(ingest: dict) -> list[Block]:
    """What the corrections file (ingest --corrections) relabelled and dropped; nothing without one
    or with a header-only one (the demo's), so that such a report reads as before."""
    relabelled = (ingest.get("relabelled_by_corrections") or {}).get("count", 0)
    dropped = (ingest.get("dropped_by_corrections") or {}).get("count", 0)
    if not relabelled and not dropped:
        return []
    return [Para(f"Corrections ({(ingest.get('corrections') or {}).get('file', 'the corrections file')}): "
                 f"{relabelled} relabelled, {dropped} dropped.")]


def data_section(ingest: dict, tokens: dict, counts: dict, histogram: pd.DataFrame) -> list[Block]:
    skipped = ", ".join(f"{k} {v}" for k, v in ingest["skipped"].items()) or "none"
    fallback = sum(n for enc, n in ingest["encodings"].items() if enc not in ("utf-8", "utf-16"))
    return [
        Heading("Data"),
        Para(f"Source `{ingest['source']}`: {ingest.get('rows_seen', ingest.get('files_seen'))} "
                 f"{'rows' if 'rows_seen' in ingest else 'files'} seen, {ingest['kept']} "
             f"kept; skipped: {skipped}. Decoded by fallback encoding: {fallback}. Duplicates "
             f"differing only in whitespace/Unicode form: {ingest['duplicates_not_byte_identical']}."),
        *corrections_note(ingest),
        split_table(list(ingest["per_class"]), counts),
        *near_duplicates_section(ingest["near_duplicates"]),
        Heading("Token lengths"),
        Para(f"Mean {tokens['mean']}, median {tokens['p50']}, p90 {tokens['p90']}, max {tokens['max']}; "
             + how_read(tokens)),
        Figure("token lengths", figures.token_lengths(histogram, tokens["max_length"]))]


def mistakes_section(predictions: pd.DataFrame, corpus: pd.DataFrame) -> list[Block]:
    wrong = predictions[~predictions["correct"]].nlargest(MISTAKES, "probability")
    wrong = wrong.merge(corpus[["doc_id", "text", "source_path"]], on="doc_id", how="left")
    rows = [[r.source_path, r.label, r.predicted, f"{r.probability:.3f}",
             " ".join(str(r.text).split())[:SNIPPET] + "…"] for r in wrong.itertuples()]
    blocks: list[Block] = [Heading(f"Most confident mistakes (top {MISTAKES})")]
    if not rows:
        return blocks + [Para("No test document was misclassified.")]
    return blocks + [Table(["document", "true", "predicted", "probability", "text"], rows)]


def lineage_section(model_params: dict, run: dict, hashes: dict) -> list[Block]:
    return [Heading("Params and lineage"),
            Table(["param", "value"], [[k, v] for k, v in flatten(model_params).items()]),
            Table(["lineage", "value"],
                  [["MLflow run", run["run_id"]], ["MLflow model", run["model_uri"]]]
                  + [[k, v] for k, v in hashes.items()])]


def _comparison_blocks(cmp: dict) -> list[Block]:
    """The gate's comparison with a champion tested on another data version."""
    left = cmp["left_out"]
    blocks: list[Block] = [
        Para(f"The champion (version {cmp['champion_version']}) was tested on another data version, "
             f"so both were scored on this version's test documents it never saw: {cmp['n']} of "
             f"{left['challenger_test']} ({left['champion_trained_on']} left out as trained or "
             f"validated on, {left['near_duplicate_of_champion_training']} as near-duplicates of "
             f"those). Gate `{cmp['rule']}`: {cmp['reason']}.")]
    if cmp["n"]:
        blocks.append(Table(["model", "accuracy", "macro-F1"],
                            [[who, f"{cmp[who]['accuracy']:.4f}", f"{cmp[who]['macro_f1']:.4f}"]
                             for who in ("challenger", "champion")]))
    return blocks


def _count(kind: dict) -> int | str:
    """A diff kind's count, with how many of the relabelled the corrections file made."""
    by = kind.get("by_corrections")
    return f"{kind['count']} ({by} of them by the corrections file)" if by else kind["count"]


def data_version_section(diff: dict, registry: dict | None, counts: dict) -> list[Block]:
    """What changed since the champion's data, how the champion was compared, its last moves."""
    blocks: list[Block] = [Heading("Data version")]
    repairs = counts.get("repairs") or []
    if repairs:
        blocks.append(Para(f"Split (`{counts.get('method')}`): {len(repairs)} near-duplicate group(s) moved "
                           "so that every class is in every split: " +
                           "; ".join(f"{r['label']} {r['from']} → {r['to']}" for r in repairs) + "."))
    if diff.get("against_version") is None:
        blocks.append(Para(f"No data diff: {diff.get('why', 'no champion to compare with')}."))
    else:
        moves = diff.get("split_moves") or {}
        blocks.append(Para(f"Against the champion's data (version {diff['against_version']}): "
                           f"{diff['old_documents']} → {diff['new_documents']} documents; "
                           f"{moves.get('moved', 0)} of those in both changed split "
                           f"({moves.get('test_to_train', 0)} from test to train)."))
        blocks.append(Table(["change", "documents", "per class", "examples"],
                            [[kind, _count(diff[kind]),
                              ", ".join(f"{c} {n}" for c, n in diff[kind]["per_class"].items()),
                              ", ".join(map(described, diff[kind]["examples"]))]
                             for kind in ("added", "removed", "relabelled", "edited")]))
        dropped = diff["removed"].get("dropped_at_ingest") or {}
        if dropped.get("count"):
            blocks.append(Para(f"Of the removed, {dropped['count']} are still in the source: ingest dropped "
                               "them (" + ", ".join(f"{r} {n}" for r, n in dropped["per_reason"].items())
                               + "), e.g. " + ", ".join(map(described, dropped["examples"])) + "."))
    if registry and registry.get("champion_comparison"):
        blocks += _comparison_blocks(registry["champion_comparison"])
    if registry and registry.get("history"):
        blocks.append(Table(["champion moved", "from", "to", "why"],
                            [[m["when"], m["from"] or "—", m["to"], m["why"]]
                             for m in registry["history"]]))
    return blocks
