"""Model vs baseline: the exact McNemar test, the bootstrap interval and the verdict,
against cases worked out by hand."""
import numpy as np
import pytest

from textclf.multiseed import t_interval
from textclf.tracking.dvc_exps import queue_states, states_of, task_ids
from textclf.evaluate.comparison import (BETTER, NO_DIFFERENCE, WORSE, bootstrap_interval, compare, headline,
                                mcnemar_exact, per_class_accuracy, verdict)


@pytest.mark.parametrize("b, c, expected", [
    (0, 0, 1.0),              # no discordant document: nothing to test
    (5, 0, 2 / 32),           # 2 * P(X <= 0), X ~ Bin(5, 1/2) = 2/32 = 0.0625
    (0, 6, 2 / 64),           # symmetric: 0.03125
    (3, 3, 1.0),              # 2 * P(X <= 3 | n=6) = 2 * 42/64 > 1 -> 1
    (10, 2, 2 * (1 + 12 + 66) / 4096),  # 2 * P(X <= 2 | n=12) = 158/4096 = 0.0386
])
def test_mcnemar_exact_matches_hand_computed_binomial_tails(b, c, expected):
    assert mcnemar_exact(b, c) == pytest.approx(expected)


def test_bootstrap_interval_degenerate_and_seeded():
    same = np.array([True, False, True, True])
    assert bootstrap_interval(same, same, 500, seed=0) == (0.0, 0.0)  # differences all 0
    always = np.ones(20, bool)
    assert bootstrap_interval(always, ~always, 500, seed=0) == (1.0, 1.0)
    rng = np.random.default_rng(1)
    a, b = rng.random(300) < 0.95, rng.random(300) < 0.9
    first = bootstrap_interval(a, b, 2000, seed=7)
    assert first == bootstrap_interval(a, b, 2000, seed=7)  # seeded: the same interval
    diff = a.mean() - b.mean()
    assert first[0] < diff < first[1]
    # the normal approximation of the paired difference's standard error, by hand
    d = a.astype(float) - b.astype(float)
    se = d.std() / np.sqrt(len(d))
    assert first[0] == pytest.approx(diff - 1.96 * se, abs=0.01)
    assert first[1] == pytest.approx(diff + 1.96 * se, abs=0.01)


@pytest.mark.parametrize("p, low, high, expected", [
    (0.01, 0.005, 0.03, BETTER),
    (0.01, -0.03, -0.005, WORSE),
    (0.20, 0.001, 0.03, NO_DIFFERENCE),   # interval excludes 0 but McNemar does not agree
    (0.04, -0.001, 0.03, NO_DIFFERENCE),  # McNemar significant, interval touches 0
    (0.05, 0.01, 0.03, NO_DIFFERENCE),    # p must be below alpha, not equal
])
def test_verdict_needs_both_tests(p, low, high, expected):
    assert verdict(p, low, high, alpha=0.05) == expected


def test_a_one_document_gap_is_no_significant_difference():
    """+0.3 points on ~317 documents (the BBC test split) is noise: never "better"."""
    model = np.ones(317, bool)
    baseline = np.ones(317, bool)
    model[:3] = False       # the model gets 3 documents wrong...
    baseline[3:7] = False   # ...the baseline 4 others: the model is 1 document (+0.32 points) ahead
    cmp = compare(model, baseline, 2000, seed=0, alpha=0.05)
    assert (cmp["model_only"], cmp["baseline_only"]) == (4, 3)
    assert cmp["difference"] == pytest.approx(1 / 317)
    assert cmp["mcnemar_p"] == pytest.approx(1.0)  # 2 * P(X <= 3 | n=7) = 2 * 64/128
    assert cmp["verdict"] == NO_DIFFERENCE and cmp["ci_low"] < 0 < cmp["ci_high"]
    assert headline(cmp).startswith("**No significant difference from the baseline**: +0.32 points")


def test_a_large_gap_is_better_and_the_reverse_worse():
    model, baseline = np.ones(300, bool), np.ones(300, bool)
    baseline[:30] = False
    better = compare(model, baseline, 2000, seed=0, alpha=0.05)
    assert better["verdict"] == BETTER and better["mcnemar_p"] == pytest.approx(2 / 2 ** 30)
    assert headline(better).startswith("**Better than the baseline**: +10.00 points")
    worse = compare(baseline, model, 2000, seed=0, alpha=0.05)
    assert worse["verdict"] == WORSE and headline(worse).startswith("**Worse than the baseline**")


def test_compare_refuses_mismatched_documents():
    with pytest.raises(ValueError, match="same test documents: 3 vs 2"):
        compare([True] * 3, [True] * 2, 100, 0, 0.05)


def test_per_class_accuracy_side_by_side():
    out = per_class_accuracy(["a", "b", "c"], ["a", "a", "b", "b"], ["a", "b", "b", "b"],
                             ["a", "a", "a", "b"])
    assert out == {"a": {"support": 2, "model": 0.5, "baseline": 1.0},
                   "b": {"support": 2, "model": 1.0, "baseline": 0.5},
                   "c": {"support": 0, "model": 0.0, "baseline": 0.0}}


def test_t_interval_over_seeds_by_hand():
    """mean 0.02, sd 0.01, n 3: half-width t(0.975, 2) * 0.01 / sqrt(3) = 4.3027 * 0.005774."""
    mean, low, high = t_interval([0.01, 0.02, 0.03])
    assert mean == pytest.approx(0.02)
    assert (high - mean) == pytest.approx(mean - low) == pytest.approx(0.024841, abs=1e-5)
    assert t_interval([0.5]) == (0.5, 0.5, 0.5)


def test_queue_states_match_whole_experiment_names():
    """`dvc queue status` lines: seeds-s1 must not take seeds-s10's state."""
    status = ("Task     Name        Created    Status\n"
              "1a2b3c4  seeds-s10   10:00 AM   Running\n"
              "4d5e6f7  seeds-s1    10:00 AM   Success\n"
              "8a9b0c1  seeds-s2    10:01 AM   Failed\n")
    assert queue_states(status, ["seeds-s1", "seeds-s2", "seeds-s3"]) == {"seeds-s1": "Success",
                                                                         "seeds-s2": "Failed"}


def test_a_rerun_is_followed_by_its_task_id_not_by_a_failed_try_of_its_name():
    """DVC lists running, then queued, then failed, then successful tasks: by name, the failed
    first try of seeds-s0 hid its queued rerun (the wait ended at once, "failed")."""
    status = ("Task     Name        Created    Status\n"
              "e37c2b8  seeds-s0    09:00 PM   Queued\n"
              "6cef31a  seeds-s0    08:10 PM   Failed\n"
              "bd51d04  seeds-s1    08:10 PM   Success\n")
    assert queue_states(status, ["seeds-s0"]) == {"seeds-s0": "Failed"}  # what the name alone says
    assert task_ids(status, "seeds-s0") == {"e37c2b8", "6cef31a"} and task_ids(status, "seeds") == set()
    assert states_of(status, {"seeds-s0": "e37c2b8", "seeds-s1": "bd51d04", "gone": "0000000"}) == {
        "seeds-s0": "Queued", "seeds-s1": "Success"}
    assert states_of(status, {"seeds-s1": "seeds-s1"}) == {"seeds-s1": "Success"}  # a name, where no id is kept


def test_multiseed_summarize_without_experiments_says_so_at_once(tmp_path, monkeypatch):
    """Issue 60, item 10: `multiseed --summarize` walked every commit with `dvc exp show
    --all-commits` (3 minutes) to say there are no experiments; git's refs say it at once."""
    import subprocess
    import time

    from textclf.multiseed import main
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    monkeypatch.chdir(tmp_path)
    started = time.perf_counter()
    with pytest.raises(SystemExit, match="no experiment named bbc-s<seed> in this repository"):
        main(["--summarize", "--name", "bbc"])
    assert time.perf_counter() - started < 10
