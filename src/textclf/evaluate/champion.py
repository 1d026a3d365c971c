"""The champion scored on the challenger's documents. When the champion trained on another
data version, both models are scored on the challenger's test documents that the champion
never trained or validated on (by content hash, and by near-duplicate group: a test document
whose group holds a text the champion saw is left out too), and compared with the same paired
test as the baseline (McNemar + bootstrap). The gate (evaluate.gate) decides on that.

Classes compare by name: a document of a class the champion does not know is its error,
since it can only answer with its own classes.
"""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from textclf.evaluate.comparison import BETTER, WORSE, compare
from textclf.data.labelsets import labels_of
from textclf.evaluate.metrics import classification_scores
from textclf.evaluate.multilabel import set_scores
from textclf.inference.loading import load_predictor
from textclf.errors import UserError
from textclf.files import open_parquet
from textclf.tracking.registry import run_file

log = logging.getLogger(__name__)
SEEN = ("train", "validation")
SPLITS_ARTIFACT = "data_version/splits.parquet"  # each run's split table, logged by evaluate


def common_set(challenger: pd.DataFrame, champion: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """Split tables of both versions -> (the challenger's test rows the champion never saw,
    the counts of those left out and why)."""
    seen = set(champion.loc[champion["split"].isin(SEEN), "content_hash"])
    test = challenger[challenger["split"] == "test"]
    by_text = test["content_hash"].isin(seen)
    near = set(challenger.loc[challenger["content_hash"].isin(seen), "group"])
    by_group = test["group"].isin(near) & ~by_text
    left_out = {"challenger_test": len(test), "champion_trained_on": int(by_text.sum()),
                "near_duplicate_of_champion_training": int(by_group.sum())}
    return test[~(by_text | by_group)], left_out


def judge(truth: list[str], challenger: list[str], champion: list[str], rule: str, cfg,
          multilabel: bool = False) -> dict:
    """Both models' predicted labels on the common set -> scores, the paired comparison and
    the gate's decision. `not_worse`: not significantly worse and a macro-F1 at least the
    champion's; `better`: significantly better. Multi-label: the predictions are label sets,
    right when the whole set is (the paired test), macro-F1 over the labels."""
    score = set_scores if multilabel else classification_scores
    y, mine_pred, theirs_pred = (np.asarray(v) for v in (truth, challenger, champion))
    out = {"n": int(len(y)), "rule": rule}
    if not len(y):
        return {**out, "promote": False,
                "reason": "no common test document: every challenger test document was seen by "
                          "the champion in training or validation"}
    mine, theirs = score(y, mine_pred), score(y, theirs_pred)
    cmp = compare(mine_pred == y, theirs_pred == y, cfg.bootstrap, cfg.seed, cfg.alpha)
    if rule == "better":
        promote = cmp["verdict"] == BETTER
        why = "significantly better" if promote else f"not significantly better ({cmp['verdict']})"
    else:
        promote = cmp["verdict"] != WORSE and mine["macro_f1"] >= theirs["macro_f1"]
        why = ("not significantly worse, macro-F1 at least the champion's" if promote else
               "significantly worse" if cmp["verdict"] == WORSE else "a lower macro-F1")
    reason = (f"on {len(y)} common test documents: macro-F1 {mine['macro_f1']:.4f} vs the champion's "
              f"{theirs['macro_f1']:.4f}, {cmp['verdict']} (McNemar p = {cmp['mcnemar_p']:.3g}): {why}")
    return {**out, "challenger": mine, "champion": theirs, "comparison": cmp, "promote": promote,
            "reason": reason}


def class_changes(challenger: list[str], champion: list[str]) -> dict:
    """Classes only one of the two models knows."""
    return {"only_challenger": sorted(set(challenger) - set(champion)),
            "only_champion": sorted(set(champion) - set(challenger))}


def read_texts(corpus: str, doc_ids: list[str]) -> list[str]:
    """The texts of `doc_ids` (a test split's worth at most), in that order."""
    wanted, found = set(doc_ids), {}
    for batch in open_parquet(corpus).iter_batches(batch_size=10_000, columns=["doc_id", "text"]):
        for doc, text in zip(batch.column("doc_id").to_pylist(), batch.column("text").to_pylist()):
            if doc in wanted:
                found[doc] = text
    missing = wanted - found.keys()
    if missing:
        raise UserError(f"{len(missing)} test document(s) of the split are not in {corpus}: the "
                        "split was made from another corpus; rerun `dvc repro split`.")
    return [found[d] for d in doc_ids]


class Challenge:
    """What evaluate knows about the challenger, and the champion's data version once read:
    the registry calls it with the champion's tags when the two were tested on other splits."""

    def __init__(self, name: str, splits: pd.DataFrame, predictions: pd.DataFrame, corpus: str, cfg,
                 multilabel: bool = False):
        self.name, self.splits, self.predictions, self.corpus = name, splits, predictions, corpus
        self.cfg, self.multilabel = cfg, multilabel
        self.champion_splits: pd.DataFrame | None = None

    def read_champion(self, champion: dict | None, tracking_uri: str) -> pd.DataFrame | None:
        """The champion's split table, logged with its run, or None (no champion, or one
        registered before split tables were logged)."""
        path = champion and run_file(tracking_uri, champion["run_id"], SPLITS_ARTIFACT)
        self.champion_splits = pd.read_parquet(path) if path else None
        return self.champion_splits

    def __call__(self, champion: dict) -> dict | None:
        if self.champion_splits is None:
            log.warning("the champion (version %s) was registered before runs carried their split "
                        "table (%s): it cannot be scored on this version's documents and stays "
                        "champion; promote by hand if meant", champion["version"], SPLITS_ARTIFACT)
            return None
        common, left_out = common_set(self.splits, self.champion_splits)
        doc_ids = common["doc_id"].tolist()
        predictor = load_predictor(f"models:/{self.name}/{champion['version']}")  # what it serves
        if (predictor.thresholds is not None) != self.multilabel:
            log.warning("the champion (version %s) answers %s, this model %s: the two cannot be scored "
                        "alike, so the champion stays; promote by hand if meant", champion["version"],
                        *(("label sets", "one class per document") if predictor.thresholds is not None
                          else ("one class per document", "label sets")))
            return None
        theirs = predictor.predict(read_texts(self.corpus, doc_ids))["label"].tolist() if doc_ids else []
        mine = self.predictions.set_index("doc_id").loc[doc_ids, "predicted"].tolist()
        result = judge(common["label"].tolist(), mine, theirs, self.cfg.gate, self.cfg, self.multilabel)
        known = sorted(self.splits["label"].unique())
        if self.multilabel:  # label sets -> the labels in them
            known = sorted({label for s in known for label in labels_of(s)})
        classes = class_changes(known, predictor.labels)
        if classes["only_challenger"] or classes["only_champion"]:
            result["reason"] += (f"; classes only the challenger knows: {classes['only_challenger']}, "
                                 f"only the champion: {classes['only_champion']}")
        log.info("champion version %s vs this version: %s", champion["version"], result["reason"])
        tags = {"gate.rule": result["rule"], "gate.common_documents": result["n"],
                "gate.promote": result["promote"], "gate.champion_version": champion["version"],
                # the test documents, then those left out of them: gate.left_out.challenger_test=23
                # read as 23 left out
                "gate.challenger_test_documents": left_out["challenger_test"],
                **{f"gate.left_out.{k}": v for k, v in left_out.items() if k != "challenger_test"}}
        if result["n"]:
            tags.update({"gate.macro_f1": f"{result['challenger']['macro_f1']:.6f}",
                         "gate.champion_macro_f1": f"{result['champion']['macro_f1']:.6f}",
                         "gate.verdict": result["comparison"]["verdict"]})
        return {**result, "champion_version": int(champion["version"]), "left_out": left_out,
                "classes": classes, "tags": tags}
