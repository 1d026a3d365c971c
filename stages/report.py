"""Stage report: the stage outputs -> reports/report.md (data accounting, token lengths,
training curve, test metrics, confusion matrix)."""
from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from textclf.io import read_json, run_stage, setup_logging, stage_parser

log = logging.getLogger("report")


def table(rows: list[list], header: list[str]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def headline(metrics: dict) -> list[str]:
    """Accuracy, macro-F1, the gap to the TF-IDF baseline and every guard, at a glance."""
    base, gap = metrics["baseline"], metrics["gap"]
    lines = [f"**Test accuracy {metrics['accuracy']:.4f}, macro-F1 {metrics['macro_f1']:.4f}** — "
             f"TF-IDF baseline {base['accuracy']:.4f} / {base['macro_f1']:.4f}, "
             f"gap {gap['accuracy']:+.4f} / {gap['macro_f1']:+.4f}.", ""]
    if gap["accuracy"] < 0:
        lines += ["> **WARNING: the fine-tuned model loses to the TF-IDF baseline.**", ""]
    guards = ", ".join(f"{name}: {status}" for name, status in metrics["guards"].items())
    return lines + [f"Guards — {guards}.", ""]


def data_section(ingest: dict, tokens: dict, counts: dict) -> list[str]:
    skipped = ", ".join(f"{k} {v}" for k, v in ingest["skipped"].items()) or "none"
    fallback = sum(n for enc, n in ingest["encodings"].items() if enc not in ("utf-8", "utf-16"))
    return [
        "## Data", "",
        f"Source `{ingest['source']}`: {ingest['files_seen']} files seen, {ingest['kept']} kept; "
        f"skipped: {skipped}. Decoded by fallback encoding: {fallback}. "
        "Duplicates differing only in whitespace/Unicode form: "
        f"{ingest['duplicates_not_byte_identical']}.", "",
        table([[s] + [counts[s].get(c, 0) for c in ingest["per_class"]] for s in counts],
              ["split"] + list(ingest["per_class"])), "",
        "## Token lengths", "",
        f"Mean {tokens['mean']}, median {tokens['p50']}, p90 {tokens['p90']}, max {tokens['max']}; "
        f"{tokens['pct_truncated']} % truncated at max_length {tokens['max_length']}.", ""]


def results_section(curve: pd.DataFrame, metrics: dict) -> list[str]:
    labels = list(metrics["per_class"])
    return [
        "## Training curve", "",
        table(curve.round(4).astype(object).values.tolist(), list(curve.columns)), "",
        "## Test metrics", "",
        f"Accuracy **{metrics['accuracy']:.4f}**, macro-F1 **{metrics['macro_f1']:.4f}** "
        f"on {metrics['n_test']} documents.", "",
        table([[c] + [f"{s[k]:.3f}" for k in ("precision", "recall", "f1")] + [s["support"]]
               for c, s in metrics["per_class"].items()],
              ["class", "precision", "recall", "F1", "support"]), "",
        "## Confusion matrix (rows: actual, columns: predicted)", "",
        table([[a] + [metrics["confusion"][a][p] for p in labels] for a in labels], [""] + labels), ""]


def main(argv: list[str] | None = None) -> None:
    parser = stage_parser(__doc__)
    for name in ("ingest-report", "token-stats", "split-counts", "curve", "metrics", "out"):
        parser.add_argument(f"--{name}", required=True)
    args = parser.parse_args(argv)
    setup_logging()
    metrics = read_json(args.metrics)
    lines = ["# Training report", ""] + headline(metrics)
    lines += data_section(read_json(args.ingest_report), read_json(args.token_stats),
                          read_json(args.split_counts))
    lines += results_section(pd.read_csv(args.curve), metrics)
    Path(args.out).write_text("\n".join(lines), encoding="utf-8")
    log.info("wrote %s", args.out)


if __name__ == "__main__":
    run_stage(main)
