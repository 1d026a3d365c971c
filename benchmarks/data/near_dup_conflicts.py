"""Near-duplicate groups with two labels kept (ingest.near_duplicates.conflicts: keep, the default
since issue 50) or dropped whole (drop): the documents each keeps, and the test scores of the
baseline stage (and, with --finetune, a short fine-tune) under each, on BBC or Debian's fortunes.

    .venv/bin/python benchmarks/data/near_dup_conflicts.py --corpus fortunes --work /tmp/ndc-fortunes
    .venv/bin/python benchmarks/data/near_dup_conflicts.py --corpus bbc --work /tmp/ndc-bbc
    .venv/bin/python benchmarks/data/near_dup_conflicts.py --corpus fortunes --work /tmp/ndc-fortunes-ft \\
        --finetune --no-baseline --max-length 64 --max-steps 600 [--train-seed 43]

Each policy runs the real stages (ingest, split, baseline; tokenize and train with --finetune)
with params.yaml's other defaults. The two test sets differ: keep's holds the mixed-label groups
that drop removes, and nothing else moves (the stable split places a group by its own key), so
the scores are compared on the test documents both hold; keep's score on its mixed-group test
documents is printed apart. fortunes: benchmarks/serving/int8_agreement.py builds it (not committed).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

import pandas as pd
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: corpora, timing
from timing import ROOT  # noqa: E402  (first: this checkout's textclf)
from corpora import BBC, fortunes_corpus  # noqa: E402

log = logging.getLogger("near-dup-conflicts")
POLICIES = ("drop", "keep")


def run_policy(work: Path, source: Path, conflicts: str, args) -> None:
    """The stages in work/<conflicts>/ with ingest.near_duplicates.conflicts = conflicts."""
    from stages import baseline, ingest, split, tokenize
    from stages import train as train_stage

    folder = work / conflicts
    folder.mkdir(parents=True, exist_ok=True)
    os.chdir(folder)
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{folder / 'mlflow.db'}"
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["ingest"]["source"] = str(source)
    params["ingest"]["near_duplicates"]["conflicts"] = conflicts
    params["tokenize"]["max_length"] = args.max_length
    params["train"].update(epochs=1, max_steps=args.max_steps, seed=args.train_seed)
    (folder / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    p = ["--params", str(folder / "params.yaml")]
    ingest.main(p + ["--corpus", "c.parquet", "--report", "r.json"])
    split.main(p + ["--corpus", "c.parquet", "--splits", "sp.parquet", "--counts", "n.json"])
    if not args.no_baseline:
        baseline.main(p + ["--corpus", "c.parquet", "--splits", "sp.parquet", "--out", "b.json", "--predictions",
                           "bp.parquet"])
    if args.finetune:
        tokenize.main(p + ["--corpus", "c.parquet", "--tokens", "t.parquet", "--stats", "s.json",
                           "--histogram", "h.csv"])
        train_stage.main(p + ["--tokens", "t.parquet", "--splits", "sp.parquet", "--model-dir", "model",
                              "--curve", "curve.csv", "--guards", "guards.json", "--movement", "mv.csv",
                              "--run-file", "run.json", "--checkpoint-dir", "ckpt"])
        model_predictions(folder)


def model_predictions(folder: Path) -> None:
    """The fine-tuned model's test predictions (doc_id, label, predicted) -> folder/mp.parquet."""
    from textclf.inference.loading import load_predictor

    corpus = pd.read_parquet(folder / "c.parquet", columns=["doc_id", "text"]).set_index("doc_id")
    splits = pd.read_parquet(folder / "sp.parquet")
    test = splits[splits["split"] == "test"]
    predictor = load_predictor(str(folder / "model"))
    probs = predictor.predict_proba(corpus.loc[test["doc_id"], "text"].tolist())
    predicted = [predictor.labels[i] for i in probs.argmax(axis=1)]
    test.assign(predicted=predicted)[["doc_id", "label", "predicted"]].to_parquet(folder / "mp.parquet")


def scores(frame: pd.DataFrame) -> str:
    from sklearn.metrics import accuracy_score, f1_score

    if frame.empty:
        return "n 0"
    return (f"n {len(frame)}, accuracy {accuracy_score(frame['label'], frame['predicted']):.4f}, "
            f"macro-F1 {f1_score(frame['label'], frame['predicted'], average='macro'):.4f}")


def compare(work: Path, predictions: str, what: str) -> None:
    """Each policy's scores on its whole test set and on the test documents both hold."""
    frames = {c: pd.read_parquet(work / c / predictions) for c in POLICIES}
    both = set(frames["drop"]["doc_id"]) & set(frames["keep"]["doc_id"])
    mixed = json.loads((work / "keep" / "r.json").read_text())["near_duplicates"]["mixed_label_groups"]
    in_mixed = set(pd.read_parquet(work / "keep" / "c.parquet", columns=["doc_id", "group"])
                   .query("group in @groups", local_dict={"groups": [g["group"] for g in mixed]})["doc_id"])
    for c, frame in frames.items():
        log.info("%s, conflicts: %s: all test documents: %s; the %d both hold: %s", what, c, scores(frame), len(both),
                 scores(frame[frame["doc_id"].isin(both)]))
    keep = frames["keep"]
    log.info("%s, conflicts: keep, its test documents in mixed-label groups: %s", what,
             scores(keep[keep["doc_id"].isin(in_mixed)]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", choices=["bbc", "fortunes"], default="fortunes")
    parser.add_argument("--work", required=True)
    parser.add_argument("--finetune", action="store_true", help="also tokenize, train one epoch, predict test")
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--max-steps", type=int, default=0, help="train.max_steps (0: the whole epoch)")
    parser.add_argument("--train-seed", type=int, default=42, help="train.seed (the fine-tune's spread over seeds)")
    parser.add_argument("--no-baseline", action="store_true", help="skip the baseline stage (with --finetune)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    source = fortunes_corpus(work / "corpus", 5) if args.corpus == "fortunes" else BBC
    for conflicts in POLICIES:
        run_policy(work, source, conflicts, args)
    for c in POLICIES:
        report = json.loads((work / c / "r.json").read_text())
        nd = report["near_duplicates"]
        log.info("conflicts: %s: seen %d, kept %d, skipped %s; %d mixed-label groups (%d documents)", c,
                 report["files_seen"], report["kept"], report["skipped"], nd["near_duplicate_mixed_groups"],
                 nd["near_duplicate_mixed_documents"])
    if not args.no_baseline:
        compare(work, "bp.parquet", "baseline")
    if args.finetune:
        compare(work, "mp.parquet", "fine-tune")


if __name__ == "__main__":
    main()
