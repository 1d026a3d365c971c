"""Helpers and options of benchmarks/speed/throughput.py (the benchmark itself never runs in the suite)."""
import sys

import numpy as np
import pytest

from conftest import REPO
from textclf.config import EvaluateParams

sys.path[:0] = [str(REPO / "benchmarks" / "speed"), str(REPO / "benchmarks")]  # as the scripts run
import throughput  # noqa: E402
from throughput_helpers import chunks, mfu, padding_of, pick_documents, token_budget_batches, train_flops  # noqa: E402
from timing import best_run, goal, rotated, table  # noqa: E402


def test_pick_documents_is_seeded_distinct_and_sorted():
    picked = pick_documents(100, 10, seed=1)
    assert picked == pick_documents(100, 10, seed=1) != pick_documents(100, 10, seed=2)
    assert len(set(picked)) == 10 and picked == sorted(picked) and max(picked) < 100
    assert pick_documents(5, None, 0) == pick_documents(5, 50, 0) == [0, 1, 2, 3, 4]


def test_padding_of_dynamic_and_fixed_width():
    lengths = [4, 2, 3, 3]
    dynamic = padding_of([[0, 1], [2, 3]], lengths)  # widths 4 and 3 -> 8 + 6 padded tokens
    assert dynamic == {"real_tokens": 12, "padded_tokens": 14, "padding": pytest.approx(2 / 14)}
    fixed = padding_of([[0, 1], [2, 3]], lengths, width=8)
    assert fixed["padded_tokens"] == 32 and fixed["padding"] == pytest.approx(20 / 32)


def test_chunks_keep_input_order():
    assert chunks(5, 2) == [[0, 1], [2, 3], [4]]


def test_token_budget_batches_cover_everything_within_budget():
    lengths = np.random.default_rng(0).integers(10, 512, size=500).tolist()
    batches = token_budget_batches(lengths, budget=16 * 512, seed=3)
    assert sorted(i for b in batches for i in b) == list(range(500))
    assert all(len(b) * max(lengths[i] for i in b) <= 16 * 512 for b in batches)
    assert batches == token_budget_batches(lengths, budget=16 * 512, seed=3)
    sizes = {max(lengths[i] for i in b): len(b) for b in batches}
    assert sizes[min(sizes)] > 16 >= sizes[max(sizes)]  # short documents: more rows per batch
    assert token_budget_batches([600, 5], budget=100, seed=0)  # a document over budget still goes


def test_train_flops_matches_hand_count():
    # 6 * N * tokens + 12 * layers * hidden * sum(T^2)
    assert train_flops(1000, [2, 3], layers=2, hidden=4) == 6 * 1000 * 5 + 12 * 2 * 4 * (4 + 9)
    bert_base = train_flops(85_000_000, [512] * 32, layers=12, hidden=768)
    assert bert_base == pytest.approx(6 * 85e6 * 512 * 32 + 12 * 12 * 768 * 512**2 * 32)
    assert mfu(989e12, 2.0) == pytest.approx(0.5)
    assert mfu(1e12, 1.0, peak=4e12) == pytest.approx(0.25)


def test_best_run_keeps_the_fastest_and_lists_all():
    best = best_run([{"samples_per_s": 2.0, "id": "a"}, {"samples_per_s": 3.0, "id": "b"}])
    assert best["id"] == "b" and best["all"] == [2.0, 3.0]


def test_rotated_changes_who_goes_first():
    assert [rotated(["a", "b", "c"], r)[0] for r in range(4)] == ["a", "b", "c", "a"]


def test_goal_pass_fail_skip_and_upper_bounds():
    assert goal("x", 1.4, 1.3)["result"] == "PASS"
    assert goal("x", 1.4, 1.3, extra_ok=False)["result"] == "FAIL"  # e.g. loss differs
    assert goal("x", 1.2, 1.3)["result"] == "FAIL"
    assert goal("x", None, 1.3, note="why")["result"] == "SKIP"
    assert goal("x", 1.1, 1.2, at_most=True)["result"] == "PASS"
    assert goal("x", 1.3, 1.2, at_most=True) == {"goal": "x", "value": "1.30", "target": "<= 1.2",
                                                 "result": "FAIL", "note": ""}


def test_table_is_markdown():
    text = table([{"a": 1, "b": 2.34567}, {"a": 10, "b": 123.456}], ["a", "b"])
    assert text.splitlines() == ["| a | b |", "|---|---|", "| 1 | 2.346 |", "| 10 | 123.5 |"]


@pytest.mark.parametrize("script", ["benchmarks/speed/throughput.py", "benchmarks/speed/throughput_child.py"])
def test_benchmark_scripts_compile(script):
    """The benchmark never runs here, so at least its scripts must parse."""
    source = (REPO / script).read_text()
    compile(source, script, "exec")  # raises SyntaxError / IndentationError


def test_gpu_variants_and_levers_are_valid_choices():
    args = throughput.parse_args(["--gpu-bench", "--gpu-variants", "ours", "ours-batch128"])
    assert args.gpu_variants == ["ours", "ours-batch128"]
    assert set(throughput.parse_args([]).gpu_variants) <= set(throughput.GPU_VARIANTS)
    assert throughput.parse_args([]).infer_batch == EvaluateParams().batch_size
