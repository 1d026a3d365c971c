"""The paired test pooled over split seeds (issue 42): against scipy's exact binomial test on
constructed outcomes, documents counted once, and the bad inputs."""
import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest

from textclf.errors import UserError
from textclf.evaluate.comparison import BETTER, NO_DIFFERENCE, compare
from textclf.evaluate.pooled import outcomes_frame, pooled_comparison, pooled_lines, seed_outcomes


def outcomes(ids, model, baseline) -> pd.DataFrame:
    return outcomes_frame(ids, model, baseline)


def a_seed(rng, ids, model_rate=0.99, baseline_rate=0.975) -> pd.DataFrame:
    return outcomes(ids, rng.random(len(ids)) < model_rate, rng.random(len(ids)) < baseline_rate)


def test_pooled_mcnemar_is_scipys_exact_binomial_on_the_summed_discordant_pairs():
    rng = np.random.default_rng(0)
    seeds = [a_seed(rng, [f"s{s}-{i}" for i in range(300)]) for s in range(5)]  # no shared document
    got = pooled_comparison(seeds)
    b = sum(int((s.model_correct & ~s.baseline_correct).sum()) for s in seeds)
    c = sum(int((~s.model_correct & s.baseline_correct).sum()) for s in seeds)
    assert (got["model_only"], got["baseline_only"], got["pairs"]) == (b, c, 1500)
    assert got["mcnemar_p"] == pytest.approx(binomtest(b, b + c, 0.5).pvalue)
    # distinct documents: counted once is the same test
    assert got["sign_p"] == pytest.approx(got["mcnemar_p"]) and got["documents"] == 1500


def test_pooling_finds_what_no_single_seed_can():
    """Each seed: the model 4 documents ahead of 300, never significant alone; pooled: 20 vs 0."""
    seeds = []
    for s in range(5):
        model = np.ones(300, bool)
        baseline = np.r_[np.zeros(4, bool), np.ones(296, bool)]
        seeds.append(outcomes([f"s{s}-{i}" for i in range(300)], model, baseline))
        assert compare(model, baseline, 1000, 0, 0.05)["verdict"] == NO_DIFFERENCE  # p = 0.125
    got = pooled_comparison(seeds)
    assert got["verdict"] == got["pairs_verdict"] == BETTER and got["mcnemar_p"] == pytest.approx(2 / 2 ** 20)
    assert "p = 1.91e-06: better" in pooled_lines(got)


def test_the_verdict_counts_a_document_tested_by_every_seed_once():
    """The same 300 test documents in 5 seeds, the model ahead on the same 4 each time: 20
    discordant pairs, but 4 documents. The pooled McNemar's p (1.9e-6) treats them as 20
    independent draws; the verdict is the sign test's, p = 0.125."""
    model, baseline = np.ones(300, bool), np.r_[np.zeros(4, bool), np.ones(296, bool)]
    got = pooled_comparison([outcomes([f"d{i}" for i in range(300)], model, baseline) for _ in range(5)])
    assert got["pairs_verdict"] == BETTER and got["mcnemar_p"] == pytest.approx(2 / 2 ** 20)
    assert got["verdict"] == NO_DIFFERENCE and got["sign_p"] == pytest.approx(0.125)
    assert "p = 0.125: no significant difference." in pooled_lines(got).splitlines()[0]


def test_a_document_tested_by_several_seeds_counts_once_by_its_net_sign():
    one = outcomes(["a", "b", "c"], [True, True, False], [False, False, True])
    two = outcomes(["a", "b", "d"], [True, False, True], [False, True, False])
    got = pooled_comparison([one, two])
    assert (got["model_only"], got["baseline_only"]) == (4, 2)  # every (seed, document) pair
    # a: +2, b: 0 (left out), c: -1, d: +1 -> ahead on 2 documents, behind on 1
    assert (got["documents"], got["documents_model_ahead"], got["documents_baseline_ahead"]) == (4, 2, 1)
    assert got["sign_p"] == pytest.approx(binomtest(2, 3, 0.5).pvalue)


def test_a_seed_outcome_joins_evaluates_two_tables_on_their_documents():
    # `correct` is the served format's (here a blend that got y right), model_correct the trained
    # model's, which metrics.json compares: the pooled test used the served one and disagreed
    # with the seeds' own comparisons (CI, test_every_head_through_dvc_experiments)
    model = pd.DataFrame({"doc_id": ["x", "y"], "correct": [True, True], "model_correct": [True, False]})
    base = pd.DataFrame({"doc_id": ["y", "x"], "label": ["a", "b"], "predicted": ["a", "a"]})
    got = seed_outcomes(model, base).sort_values("doc_id")
    assert got.to_dict("list") == {"doc_id": ["x", "y"], "model_correct": [True, False],
                                   "baseline_correct": [False, True]}
    with pytest.raises(UserError, match="different test documents .1 in one only"):
        seed_outcomes(model, base.iloc[:1])
    with pytest.raises(UserError, match="no model_correct column .* rerun its evaluate stage"):
        seed_outcomes(model.drop(columns="model_correct"), base)
    with pytest.raises(UserError, match="one seed has none"):
        pooled_comparison([outcomes([], [], [])])


def test_multiseed_without_readable_predictions_warns_and_skips_the_pooled_test(caplog):
    """An experiment from before the predictions were outputs (or gc'd): the table, no pooled line."""
    from textclf.multiseed import pooled_or_none

    assert pooled_or_none(["0" * 40]) is None  # a commit this repository does not have
    assert "no pooled test: an experiment's test predictions cannot be read" in caplog.text


def test_multiseed_summarize_tabulates_the_seeds_that_finished(caplog):
    """`--summarize` after 2 of 5 seeds said `No finished experiment named ms-s2, ms-s3, ...`:
    it tabulates what exists, naming the seeds not finished; with none, one line says how."""
    import argparse

    from textclf.multiseed import DEFAULT_SEEDS, finished

    exps = {"ms-s0": {}, "ms-s1": {}, "other-s2": {}}
    default = {s: f"ms-s{s}" for s in DEFAULT_SEEDS}
    assert finished(default, exps, argparse.Namespace(summarize=True, seeds=None, name="ms")) == {0: "ms-s0", 1: "ms-s1"}
    asked = {s: f"ms-s{s}" for s in (0, 1, 2)}
    assert finished(asked, exps, argparse.Namespace(summarize=True, seeds=[0, 1, 2], name="ms")) == {0: "ms-s0", 1: "ms-s1"}
    assert "not finished (yet): ms-s2; the table has the other 2 seeds" in caplog.text
    with pytest.raises(SystemExit, match="no finished experiment named nope-s0.*--name, --seeds"):
        finished({0: "nope-s0"}, exps, argparse.Namespace(summarize=True, seeds=None, name="nope"))
