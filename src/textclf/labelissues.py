"""Review the documents whose label is suspect, and turn the decisions into corrections.

    python -m textclf.labelissues review                      # -> label_review.csv, the flagged documents
    python -m textclf.labelissues review --all --out all.csv  # every document, worst first
    python -m textclf.labelissues accept label_review.csv     # -> data/corrections.csv, then `dvc repro`

`review` reads reports/label_issues.parquet (the labels stage) and the corpus (a snippet of each
text) and writes a CSV to open in a spreadsheet: doc_id, source_path, split, given, suggested,
quality, group and group_labels (a near-duplicate group that holds two labels: its id, and the
labels its other documents carry), snippet, and `label`, prefilled with the suggestion. It lists
the flagged documents and every document of a mixed-label group (ingest keeps such groups:
ingest.near_duplicates.conflicts: keep), worst first, a group's rows together, leaving out the
documents the corrections file decides already. Edit `label` (a class, several joined by "|"
for a multi-label corpus, `drop`, or blank for undecided) and save it as CSV.
`accept` adds each decided row to the corrections file (doc = the source_path): a new label, a
drop, or the given label kept (marked `kept`, remembered: the next review leaves it out, until
the source itself labels the document otherwise); an exact copy ingest
dropped gets its text's answer. Every row is checked first as ingest will check it (a class the
corpus has, a document it holds, a field too many, a row that contradicts the file or another
row of the sheet, a near-duplicate left behind with the old label under conflicts: drop): every
problem in one line, nothing written.
A sheet exactly as review prefilled it is refused unless --all-suggestions takes it unread.
Ingest applies the file (docs/data_versions.md, "Correcting labels").
"""
from __future__ import annotations

import argparse
import csv
import io
import logging
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from textclf.config import Params, load_params
from textclf.errors import UserError
from textclf.files import atomic_path
from textclf.stage import run_stage, setup_logging
from textclf.data.corrections import KEPT, YES
from textclf.data.decisions import Corpus, file_form, problems, read_corpus, refuse, with_copies
from textclf.data.labelsets import is_multilabel
from textclf.data.mixed_groups import together

log = logging.getLogger("labelissues")

ISSUES = "reports/label_issues.parquet"
CORPUS = "data/interim/corpus.parquet"
CORRECTIONS = "data/corrections.csv"
REVIEW = "label_review.csv"
PARAMS = "params.yaml"
EXTRA = "_extra"  # a row's fields beyond the header
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


def review(issues: str, corpus: str, out: str, everything: bool = False, corrections: str = CORRECTIONS) -> int:
    """The review CSV at `out` -> how many documents it lists (flagged ones not decided in
    `corrections` already, or `everything`)."""
    table = _read_issues(issues)
    if not everything:
        table = table[table["flagged"].astype(bool) | (table["group_labels"] != "")]
        table = _undecided(table, corrections, is_multilabel(pq.read_schema(corpus).metadata)
                           if Path(corpus).is_file() else False)
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
    multilabel = is_multilabel(pq.read_schema(corpus).metadata)
    for column in ("given", "suggested"):  # a label set as the corrections file writes it: a|b
        sheet[column] = [file_form(x, multilabel) for x in sheet[column]]
    sheet["label"] = sheet["suggested"]
    with atomic_path(out) as tmp:
        sheet.to_csv(tmp, index=False, float_format="%.4f")
    log.info("%s: %d document(s) to review (%d in near-duplicate groups with two labels); edit the `label` "
             "column (a class%s, `drop`, or blank), then `python -m textclf.labelissues accept %s`", out, len(sheet),
             int((sheet["group_labels"] != "").sum()), ", several joined by |" if multilabel else "", out)
    return len(sheet)


def _undecided(table: pd.DataFrame, corrections: str, multilabel: bool) -> pd.DataFrame:
    """The documents no row of `corrections` decides (a relabel, a drop or a kept label that
    the table's given label still matches: a keep the source moved away from is undecided)."""
    if not Path(corrections).is_file():
        return table
    given = dict(zip(table["doc_id"], table["given"])) | dict(zip(table["source_path"], table["given"]))
    named = {row["doc"] for _, row in _rows(corrections, ("doc", "label"))
             if row.get(KEPT) != YES or row["doc"] not in given
             or file_form(given[row["doc"]], multilabel) == file_form(row["label"], multilabel)}
    left = table[~(table["doc_id"].isin(named) | table["source_path"].isin(named))]
    if len(left) < len(table):
        log.info("%d document(s) decided in %s already are left out (review --all lists every document)",
                 len(table) - len(left), corrections)
    return left


def _rows(path: str, needed: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    """A CSV's rows (line number, row; a row with more fields than the header gets EXTRA),
    refusing one without the `needed` columns."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: cannot read it as UTF-8 CSV ({err}); save it as CSV (UTF-8).") from None
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in needed if c not in (reader.fieldnames or [])]
    if missing:
        raise UserError(f"{path} has no column(s) {missing} (header: {reader.fieldnames}); keep the header "
                        "the command wrote.")
    return [(line, {k or EXTRA: (v if isinstance(v, str) else "|".join(v or [])).strip() for k, v in row.items()})
            for line, row in enumerate(reader, 2)]


def decided(review_file: str, corpus: Corpus, said: dict[str, tuple[str, str]]) -> tuple[dict, list[str]]:
    """The sheet's decided rows -> ({doc_id: (line, label in file form, source_path)}, problems):
    each row checked on its own and against the corrections already `said` ({name: (where, label)})."""
    out: dict[str, tuple[int, str, str]] = {}
    found: list[str] = []
    for line, row in _rows(review_file, ("doc_id", "source_path", "given", "label")):
        label = file_form(row["label"], corpus.multilabel)
        if not label:
            continue  # blank: undecided
        if row.get(EXTRA):
            found.append(f"row {line} has more fields than the header ({row[EXTRA][:40]!r}): a comma in a "
                         "cell needs quotes")
        elif not row["source_path"] or not row["doc_id"]:
            found.append(f"row {line} decides {label!r} but names no document (blank doc_id or source_path)")
        elif (doc := corpus.find(row["doc_id"]) or corpus.find(row["source_path"])) is None:
            found.append(f"row {line}: {row['source_path']} is not in the corpus (another data version? "
                         "write the sheet again with `review`)")
        else:
            for name in (row["doc_id"], row["source_path"]):
                if name in said and said[name][1] != label:
                    found.append(f"row {line} decides {label!r} for {name}, but {said[name][0]} says "
                                 f"{said[name][1]!r}")
            if doc in out and out[doc][1] != label:  # keyed by document: the later row would win unseen
                found.append(f"rows {out[doc][0]} and {line} decide {corpus.table.at[doc, 'source_path']} two ways "
                             f"({out[doc][1]!r} / {label!r}): keep one")
                continue
            out.setdefault(doc, (line, label, row["source_path"]))
    return out, found


def unread(review_file: str, multilabel: bool) -> int:
    """How many relabels a sheet holds exactly as `review` prefilled it, where no cell was
    edited (0 where a person changed any `label`, or there is nothing to relabel)."""
    rows = [r for _, r in _rows(review_file, ("given", "suggested", "label"))]
    form = [(file_form(r["label"], multilabel), file_form(r["suggested"], multilabel),
             file_form(r["given"], multilabel)) for r in rows]
    if any(label != suggested for label, suggested, _ in form):
        return 0
    return sum(label != given for label, _, given in form)


def accept(review_file: str, corrections: str, corpus_path: str = CORPUS, params: str = PARAMS,
           all_suggestions: bool = False) -> int:
    """The decisions in `review_file` merged into `corrections` -> how many rows were added.
    A kept label is a row too (ingest changes nothing for it; review leaves it out next time)."""
    corpus = read_corpus(corpus_path)
    existing = _rows(corrections, ("doc", "label")) if Path(corrections).is_file() else []
    said = {row["doc"]: (f"{corrections} row {line}", file_form(row["label"], corpus.multilabel))
            for line, row in existing if not _stale(row, corpus)}  # a stale keep: the sheet may decide anew
    decisions, found = decided(review_file, corpus, said)
    copies, clash = with_copies(decisions, corpus, said)
    standing = {doc: label for name, (_, label) in said.items() if (doc := corpus.find(name))}
    found += clash + problems({d: v[:2] for d, v in decisions.items()}, corpus, _conflicts(params), standing)
    refuse(review_file, found)
    if (n := unread(review_file, corpus.multilabel)) and not all_suggestions:
        raise UserError(f"{review_file}: its {n} relabels are the suggestions exactly as `review` prefilled "
                        f"them (no `label` cell was edited), so accept would write {n} corrections nobody "
                        "read: review them, or pass --all-suggestions to take them as they are. Nothing was written.")
    added = [{"doc": path, "label": label, KEPT: YES if label == corpus.table.at[doc, "label"] else ""}
             for doc, (_, label, path) in decisions.items()
             if path not in said and doc not in said]  # a path reads well in a diff
    kept = sum(r[KEPT] == YES for r in added)
    anew = {corpus.find(r["doc"]) for r in added}
    rows = [{"doc": r["doc"], "label": r["label"], KEPT: r.get(KEPT, "")} for _, r in existing
            if not (_stale(r, corpus) and corpus.find(r["doc"]) in anew)] + added + copies
    with atomic_path(corrections) as tmp:
        pd.DataFrame(rows, columns=["doc", "label", KEPT]).to_csv(tmp, index=False)
    log.info("%s: %d row(s) added (%d change(s), %d kept label(s), remembered: `review` leaves them out; "
             "%d exact copies given their text's answer), %d now; `dvc repro` applies them, "
             "`python -m textclf.datadiff HEAD workspace` shows them",
             corrections, len(added) + len(copies), len(added) - kept, kept, len(copies), len(rows))
    return len(added) + len(copies)


def _stale(row: dict[str, str], corpus: Corpus) -> bool:
    """A kept label the corpus no longer carries: the source moved on, and ingest ignores the row."""
    doc = corpus.find(row["doc"])
    return (row.get(KEPT) == YES and doc is not None
            and corpus.table.at[doc, "label"] != file_form(row["label"], corpus.multilabel))


def _conflicts(params: str) -> str:
    """ingest.near_duplicates.conflicts as the params file says, checked as every stage reads
    it (its default where the file does not say, or where there is no file)."""
    return (load_params(params) if Path(params).is_file() else Params()).ingest.near_duplicates.conflicts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    look = commands.add_parser("review", help="write a review CSV prefilled with the suggestions")
    look.add_argument("--issues", default=ISSUES, help=f"the label-issues table (default {ISSUES})")
    look.add_argument("--corpus", default=CORPUS, help=f"the corpus, for the snippets (default {CORPUS})")
    look.add_argument("--out", default=REVIEW, help=f"the review CSV to write (default {REVIEW})")
    look.add_argument("--all", action="store_true", help="every document, not only the flagged ones")
    look.add_argument("--corrections", default=CORRECTIONS,
                      help=f"documents decided there already are left out (default {CORRECTIONS})")
    take = commands.add_parser("accept", help="merge a reviewed CSV into the corrections file")
    take.add_argument("review", help="the review CSV, its `label` column edited")
    take.add_argument("--corrections", default=CORRECTIONS, help=f"the file ingest applies (default {CORRECTIONS})")
    take.add_argument("--corpus", default=CORPUS, help=f"the corpus the decisions are checked against (default {CORPUS})")
    take.add_argument("--params", default=PARAMS, help=f"for ingest.near_duplicates.conflicts (default {PARAMS})")
    take.add_argument("--all-suggestions", action="store_true",
                      help="take an unedited sheet's suggestions as they are (else refused, unread)")
    args = parser.parse_args(argv)
    setup_logging()
    if args.command == "review":
        review(args.issues, args.corpus, args.out, args.all, args.corrections)
    else:
        accept(args.review, args.corrections, args.corpus, args.params, args.all_suggestions)


if __name__ == "__main__":
    run_stage(main)
