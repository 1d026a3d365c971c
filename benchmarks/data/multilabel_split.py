"""How evenly the split stage spreads each label of a multi-label corpus built from BBC, by
split.method, through the ingest and split stages' own functions.

    .venv/bin/python benchmarks/data/multilabel_split.py [--seed 0] [--pairs 1500] [--singles 500]
                                                   [--conflicts keep|drop]

The corpus (written to a temporary folder, never into the repository): `--singles` BBC articles
alone, labelled with their class, and `--pairs` documents each joining two articles of
different classes, labelled with both. BBC's 2 225 articles cannot fill 1 500 pairs without
reuse, so pairs reuse articles (never a single's: a lone article and a pair holding it are
near-duplicates). Two pairs sharing a long article are near-duplicates too (Jaccard up to
0.9) with other label sets: `--conflicts keep` (the default here) keeps them as groups, which
the split must keep whole, the case under test; `drop` (params.yaml's) drops about a fifth
of the corpus. Ingest runs with the repo's params.yaml otherwise, ingest.task: multilabel,
near-duplicates on; split with each method at the default fractions and seed. Logged per
method: per label and split, the share of the label's documents in that split against
split.fractions, and the groups the stable split moved.
"""
from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: corpora, timing
from timing import ROOT, table  # noqa: E402  (first: this checkout's textclf)
from corpora import BBC  # noqa: E402
from textclf.files import read_json  # noqa: E402
from textclf.data.corpus import IngestPaths, run_ingest  # noqa: E402
from textclf.data.split_stage import SplitPaths, run_split  # noqa: E402
from textclf.data.splitting import SPLITS  # noqa: E402

PARAMS = ROOT / "params.yaml"
log = logging.getLogger("multilabel_split")


def read(path: Path) -> str:
    """An article's text: UTF-8, or Latin-1 for the one BBC file that is not (as ingest reads it)."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def documents(rng: random.Random, pairs: int, singles: int) -> list[dict]:
    """The JSON Lines rows: `singles` lone articles, then `pairs` joined ones."""
    files = sorted(BBC.glob("*/*.txt"))
    rng.shuffle(files)
    alone, pool = files[:singles], files[singles:]
    by_class: dict[str, list[Path]] = {}
    for f in pool:
        by_class.setdefault(f.parent.name, []).append(f)
    rows = [{"text": read(f), "label": [f.parent.name]} for f in alone]
    for _ in range(pairs):
        first, second = rng.sample(sorted(by_class), 2)
        a, b = rng.choice(by_class[first]), rng.choice(by_class[second])
        rows.append({"text": read(a) + "\n\n" + read(b),
                     "label": [first, second]})
    return rows


def params(folder: Path, source: Path, method: str, conflicts: str) -> Path:
    """The repo's params with the corpus as ingest.source, the multi-label task and `method`."""
    values = yaml.safe_load(PARAMS.read_text())
    values["ingest"].update(source=str(source), task="multilabel", label_delimiter="")
    values["ingest"]["near_duplicates"]["conflicts"] = conflicts
    values["split"]["method"] = method
    path = folder / f"params-{method}.yaml"
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path


def shares(counts: dict, fractions: dict[str, float]) -> list[dict]:
    """split_counts.json -> a row per label: documents, and each split's share of them."""
    rows = []
    for label in sorted(counts["train"]):
        total = sum(counts[s][label] for s in SPLITS)
        rows.append({"label": label, "documents": total,
                     **{s: f"{counts[s][label] / total:.3f} ({counts[s][label]})" for s in SPLITS},
                     "max |share - fraction|": max(abs(counts[s][label] / total - fractions[s]) for s in SPLITS)})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0, help="which articles make the corpus")
    parser.add_argument("--pairs", type=int, default=1500)
    parser.add_argument("--singles", type=int, default=500)
    parser.add_argument("--conflicts", choices=["keep", "drop"], default="keep",
                        help="ingest.near_duplicates.conflicts: pairs sharing an article")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("ingest").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="multilabel-split-") as tmp:
        folder = Path(tmp)
        source = folder / "bbc_multilabel.jsonl"
        source.write_text("".join(json.dumps(r) + "\n" for r in documents(
            random.Random(args.seed), args.pairs, args.singles)), encoding="utf-8")
        run_ingest(IngestPaths(str(params(folder, source, "stable", args.conflicts)), str(folder / "c.parquet"),
                               str(folder / "r.json")))
        report, groups = read_json(folder / "r.json"), read_json(folder / "r.json")["near_duplicates"]
        log.info("ingest (conflicts: %s): %d rows, kept %d, skipped %s; %d near-duplicate groups hold %d "
                 "documents, sizes %s", args.conflicts, report["rows_seen"], report["kept"], report["skipped"],
                 groups["groups"], groups["documents_in_groups"], groups["group_sizes"])
        for method in ("stable", "stratified_shuffle"):
            run_split(SplitPaths(str(params(folder, source, method, args.conflicts)), str(folder / "c.parquet"),
                                 str(folder / f"s-{method}.parquet"), str(folder / f"n-{method}.json")))
            counts = read_json(folder / f"n-{method}.json")
            fractions = yaml.safe_load(PARAMS.read_text())["split"]["fractions"]
            log.info("\nsplit.method %s: documents per split %s (fractions %s)\n%s", method,
                     counts["documents"], fractions,
                     table(shares(counts, fractions), ["label", "documents", *SPLITS, "max |share - fraction|"]))
            log.info("repairs (%d): %s", len(counts["repairs"]), counts["repairs"])


if __name__ == "__main__":
    main()
