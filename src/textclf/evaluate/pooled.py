"""Model vs baseline pooled over several split seeds: one paired test on every test document of
every seed, where one seed's ~300 documents are too few to tell a point from noise.

Two views of the same per-document outcomes (each seed's model and baseline on its own test split):
- **documents once, the headline** (`verdict`): random splits share test documents, and a
  document twice in test is not two independent draws. Each document counts once, with the
  sign of (model right - baseline right) summed over the seeds that tested it; an exact sign
  test over the documents whose sum is not 0. It needs no independence between seeds.
- **pooled McNemar** over every (seed, document) pair (`pairs_verdict`): the discordant pairs of
  all seeds summed, b (only the model right) against c (only the baseline), exact binomial under
  H0 (the Mantel-Haenszel test for matched pairs). It counts a document tested under k seeds
  as k independent pairs, so where seeds share test documents its p is too small; it equals the
  headline where they share none.
"""
from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from textclf.errors import UserError
from textclf.evaluate.comparison import BETTER, NO_DIFFERENCE, WORSE, mcnemar_exact

COLUMNS = ("doc_id", "model_correct", "baseline_correct")


class NoModelOutcomes(UserError):
    """An experiment's predictions without the trained model's outcome (evaluate before 2026-12-07)."""


def seed_outcomes(model: pd.DataFrame, baseline: pd.DataFrame) -> pd.DataFrame:
    """One seed's evaluate outputs (test_predictions: doc_id, model_correct; baseline_predictions:
    doc_id, label, predicted) -> doc_id, model_correct, baseline_correct, on the same documents.
    model_correct is the trained model's outcome, which each seed's metrics.json compares; the
    file's `correct` is the served format's (a blend with the baseline, an int8 export), which
    may answer otherwise."""
    if "model_correct" not in model:
        raise NoModelOutcomes("an experiment's test_predictions.parquet has no model_correct column (written by "
                        "evaluate since 2026-12-07): rerun its evaluate stage to pool it.")
    base = baseline.assign(baseline_correct=baseline["label"] == baseline["predicted"])
    joined = model[["doc_id", "model_correct"]].merge(base[["doc_id", "baseline_correct"]], on="doc_id", how="outer",
                                                indicator=True)
    if (joined["_merge"] != "both").any():
        raise UserError(f"model and baseline were scored on different test documents "
                        f"({int((joined['_merge'] != 'both').sum())} in one only): rerun evaluate.")
    return joined[list(COLUMNS)].astype(
        {"model_correct": bool, "baseline_correct": bool})


def _verdict(b: int, c: int, p: float, alpha: float) -> str:
    if p < alpha:
        return BETTER if b > c else WORSE
    return NO_DIFFERENCE


def pooled_comparison(seeds: Sequence[pd.DataFrame], alpha: float = 0.05) -> dict:
    """`seeds`: per split seed, seed_outcomes' frame -> both pooled tests (module docstring)."""
    if not seeds or any(len(s) == 0 for s in seeds):
        raise UserError("a pooled comparison needs every seed's test outcomes; one seed has none.")
    both = pd.concat(seeds, ignore_index=True)  # (pairs, 3)
    m, base = both["model_correct"].to_numpy(bool), both["baseline_correct"].to_numpy(bool)
    b, c = int((m & ~base).sum()), int((~m & base).sum())
    p = mcnemar_exact(b, c)
    net = (both["model_correct"].astype(int) - both["baseline_correct"].astype(int)).groupby(both["doc_id"]).sum()
    db, dc = int((net > 0).sum()), int((net < 0).sum())
    p_docs = mcnemar_exact(db, dc)  # the sign test: the same exact binomial on the signs
    return {"seeds": len(seeds), "pairs": len(both), "documents": int(net.size),
            "model_accuracy": float(m.mean()), "baseline_accuracy": float(base.mean()),
            "difference": float(m.mean() - base.mean()),
            "model_only": b, "baseline_only": c, "mcnemar_p": p,
            "documents_model_ahead": db, "documents_baseline_ahead": dc, "sign_p": p_docs,
            "alpha": alpha, "verdict": _verdict(db, dc, p_docs, alpha),
            "pairs_verdict": _verdict(b, c, p, alpha)}


def pooled_lines(result: dict) -> str:
    """The two pooled tests in two sentences, the headline first, for the multi-seed table."""
    return (f"Pooled over {result['seeds']} split seeds ({result['pairs']} test documents, "
            f"{result['documents']} distinct): model {result['model_accuracy'] * 100:.2f} % against "
            f"baseline {result['baseline_accuracy'] * 100:.2f} %. Each document once (sign test, the verdict): "
            f"the model ahead on {result['documents_model_ahead']}, the baseline on "
            f"{result['documents_baseline_ahead']}, p = {result['sign_p']:.3g}: {result['verdict']}.\n"
            f"Every (seed, document) pair (exact McNemar on the summed discordant pairs; a document in "
            f"several seeds' tests counts several times, so its p is too small where they overlap): "
            f"{result['model_only']} only the model gets right, {result['baseline_only']} only the "
            f"baseline, p = {result['mcnemar_p']:.3g}: {result['pairs_verdict']}.")


def outcomes_frame(doc_ids: Sequence[str], model_correct: Sequence[bool],
                   baseline_correct: Sequence[bool]) -> pd.DataFrame:
    """A seed's outcomes from arrays (benchmarks that score outside the pipeline)."""
    return pd.DataFrame({"doc_id": list(doc_ids), "model_correct": list(map(bool, model_correct)),
                         "baseline_correct": list(map(bool, baseline_correct))})
