"""Review the documents whose label is suspect, and turn the decisions into corrections.

    python -m textclf.labelissues review                      # -> label_review.csv, the flagged documents
    python -m textclf.labelissues review --all --out all.csv  # every document, worst first
    python -m textclf.labelissues accept label_review.csv     # -> data/corrections.csv, then `dvc repro`

`review` reads reports/label_issues.parquet (the labels stage) and the corpus (a snippet of each
text) and writes a CSV to open in a spreadsheet: doc_id, source_path, split, given, suggested,
quality, group and group_labels (a near-duplicate group that holds two labels: its id, and the
labels its other documents carry), snippet, and `label`, prefilled with the suggestion. It lists
the flagged documents and every document of a mixed-label group (ingest keeps such groups:
ingest.near_duplicates.conflicts: keep), worst first, a group's rows together. Edit `label` (a class, several
joined by "|" for a multi-label corpus, `drop`, or blank for undecided) and save it as CSV.
`accept` adds each decided row whose label differs from the given one to the corrections file
(doc = the source_path); a row that contradicts a correction already there stops it in one line,
and nothing is written. Ingest applies the file (docs/data_versions.md, "Correcting labels").
"""
from __future__ import annotations

import argparse
import csv
import io
import logging
from pathlib import Path

import pandas as pd

from textclf.common import UserError, atomic_path, run_stage, setup_logging
from textclf.data.mixed_groups import together

log = logging.getLogger("labelissues")

ISSUES = "reports/label_issues.parquet"
CORPUS = "data/interim/corpus.parquet"
CORRECTIONS = "data/corrections.csv"
REVIEW = "label_review.csv"
NEEDED = ("doc_id", "source_path", "split", "given", "suggested", "quality", "flagged", "group", "group_labels")
SHEET = ["doc_id", "source_path", "split", "given", "suggested", "quality", "group", "group_labels"]
SNIPPET = 200  # characters of each text in the review file


def _read_issues(path: str) -> pd.DataFrame:
    if not Path(path).is_file():
        raise UserError(f"{path} does not exist: `dvc repro labels` writes it (or give --issues).")
    table = pd.read_parquet(path)
    missing = [c for c in NEEDED if c not in table]
    if missing:
        raise UserError(f"{path} has no column(s) {missing}: it is no label-issues table of this version; rerun "
                        "`dvc repro labels`.")
    return table


def review(issues: str, corpus: str, out: str, everything: bool = False) -> int:
    """The review CSV at `out` -> how many documents it lists (flagged ones, or `everything`)."""
    table = _read_issues(issues)
    if not everything:
        table = table[table["flagged"].astype(bool) | (table["group_labels"] != "")]
    table = together(table.sort_values("quality", kind="stable"))  # worst first, a group's rows together
    if not Path(corpus).is_file():
        raise UserError(f"{corpus} does not exist: the review quotes each text from the corpus ingest wrote "
                        "(`dvc repro ingest`, or give --corpus).")
    texts = pd.read_parquet(corpus, columns=["doc_id", "text"]).set_index("doc_id")["text"]
    unknown = table.loc[~table["doc_id"].isin(texts.index), "doc_id"]
    if len(unknown):
        raise UserError(f"{issues} names {len(unknown)} document(s) {corpus} does not hold (e.g. "
                        f"{unknown.iloc[0]}): they are of another data version; rerun `dvc repro labels`.")
    snippet = texts.reindex(table["doc_id"]).map(lambda t: " ".join(t.split())[:SNIPPET]).to_numpy()
    sheet = table[SHEET].assign(group=table["group"].where(table["group_labels"] != "", ""), snippet=snippet)
    sheet["label"] = sheet["suggested"]
    with atomic_path(out) as tmp:
        sheet.to_csv(tmp, index=False, float_format="%.4f")
    log.info("%s: %d document(s) to review (%d in near-duplicate groups with two labels); edit the `label` "
             "column (a class, `drop`, or blank), then `python -m textclf.labelissues accept %s`", out, len(sheet),
             int((sheet["group_labels"] != "").sum()), out)
    return len(sheet)


def _rows(path: str, needed: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    """A CSV's rows (line number, row), refusing one without the `needed` columns."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: cannot read it as UTF-8 CSV ({err}); save it as CSV (UTF-8).") from None
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in needed if c not in (reader.fieldnames or [])]
    if missing:
        raise UserError(f"{path} has no column(s) {missing} (header: {reader.fieldnames}); keep the header "
                        "the command wrote.")
    return [(line, {k: (v or "").strip() for k, v in row.items() if k}) for line, row in enumerate(reader, 2)]


def accept(review_file: str, corrections: str) -> int:
    """The decisions in `review_file` merged into `corrections` -> how many rows were added."""
    decided = [(line, row) for line, row in _rows(review_file, ("doc_id", "source_path", "given", "label"))
               if row["label"] and row["label"] != row["given"]]  # blank: undecided; the given: kept
    existing = _rows(corrections, ("doc", "label")) if Path(corrections).is_file() else []
    said = {row["doc"]: (f"{corrections} row {line}", row["label"]) for line, row in existing}
    added: list[dict[str, str]] = []
    for line, row in decided:
        if not row["source_path"] or not row["doc_id"]:
            raise UserError(f"{review_file} row {line} decides {row['label']!r} but names no document (blank doc_id "
                            "or source_path): keep the columns the review command wrote.")
        for name in (row["doc_id"], row["source_path"]):
            if name in said and said[name][1] != row["label"]:
                raise UserError(f"{review_file} row {line} decides {row['label']!r} for {name}, but "
                                f"{said[name][0]} says {said[name][1]!r}: edit one of them, then accept again.")
        if not any(name in said for name in (row["doc_id"], row["source_path"])):
            added.append({"doc": row["source_path"], "label": row["label"]})  # a path reads well in a diff
            said[row["doc_id"]] = said[row["source_path"]] = (f"{review_file} row {line}", row["label"])
    rows = [{"doc": r["doc"], "label": r["label"]} for _, r in existing] + added
    with atomic_path(corrections) as tmp:
        pd.DataFrame(rows, columns=["doc", "label"]).to_csv(tmp, index=False)
    log.info("%s: %d correction(s) added (%d now); `dvc repro` applies them, `python -m textclf.datadiff "
             "HEAD workspace` shows them", corrections, len(added), len(rows))
    return len(added)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    look = commands.add_parser("review", help="write a review CSV prefilled with the suggestions")
    look.add_argument("--issues", default=ISSUES, help=f"the label-issues table (default {ISSUES})")
    look.add_argument("--corpus", default=CORPUS, help=f"the corpus, for the snippets (default {CORPUS})")
    look.add_argument("--out", default=REVIEW, help=f"the review CSV to write (default {REVIEW})")
    look.add_argument("--all", action="store_true", help="every document, not only the flagged ones")
    take = commands.add_parser("accept", help="merge a reviewed CSV into the corrections file")
    take.add_argument("review", help="the review CSV, its `label` column edited")
    take.add_argument("--corrections", default=CORRECTIONS, help=f"the file ingest applies (default {CORRECTIONS})")
    args = parser.parse_args(argv)
    setup_logging()
    if args.command == "review":
        review(args.issues, args.corpus, args.out, args.all)
    else:
        accept(args.review, args.corrections)


if __name__ == "__main__":
    run_stage(main)
