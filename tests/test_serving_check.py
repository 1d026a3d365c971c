"""evaluate's check of a served format against itself: each test document scored alone and in
batches (format_check.one_per_call, SAME_ANSWER_ATOL; the export stage runs it on validation). The predictors here are stand-ins whose
answer does or does not depend on the rest of the call: what is checked is the check."""
import numpy as np

from textclf.evaluate import format_check
from textclf.evaluate.format_check import chain_result, one_per_call
from textclf.inference.frames import SAME_ANSWER_ATOL
from textclf.inference.pooling import pool_logits
from textclf.inference.onnx_predictor import softmax


class Stand:
    """proba_of_ids as OnnxPredictor's: rows -> logits from their ids, pooled by `owner`;
    `leak` adds leak x (the rows in the call) to every logit of class 0, as a quantization
    whose scale is taken over the whole batch moves every row by what else is in it."""
    format = "stand-in"

    def __init__(self, leak: float = 0.0, classes: int = 3):
        self.leak, self.classes = leak, classes

    def proba_of_ids(self, input_ids, owner=None) -> np.ndarray:
        rows = np.array([[np.sin(sum(ids) * (c + 1)) for c in range(self.classes)] for ids in input_ids])
        rows[:, 0] += self.leak * len(input_ids)
        return softmax(rows if owner is None else pool_logits(rows, np.asarray(owner), "mean"))


IDS = [[101, 7 * i + 3, 102] for i in range(12)]


def test_an_answer_that_depends_on_the_batch_is_found_and_one_that_does_not_is_not():
    for leak, differ in ((0.0, 0), (1e-3, len(IDS))):
        predictor = Stand(leak)
        found = one_per_call(predictor, IDS, None, predictor.proba_of_ids(IDS), seed=0)
        assert found["batch_differ"] == differ and found["single_calls"] == len(IDS)
        assert (found["batch_diff"] > SAME_ANSWER_ATOL) == bool(differ)


def test_a_documents_windows_make_one_call():
    """With chunks, a document alone is all its windows pooled: a window scored apart from
    its document would differ from the batched answer."""
    owner = np.array([0, 1, 0, 2, 1, 1, 3, 2, 0, 3, 3, 1])  # windows of four documents, interleaved
    predictor = Stand()
    found = one_per_call(predictor, IDS, owner, predictor.proba_of_ids(IDS, owner), seed=0)
    assert (found["single_calls"], found["batch_differ"], found["batch_diff"]) == (4, 0, 0.0)
    shuffled = predictor.proba_of_ids(IDS, owner)[[1, 0, 3, 2]]  # answers given to other documents
    assert one_per_call(predictor, IDS, owner, shuffled, seed=0)["batch_differ"] == 4


def test_a_large_test_split_is_sampled_the_same_way_each_run(monkeypatch):
    monkeypatch.setattr(format_check, "SINGLE_CALLS", 5)
    calls = []

    class Counting(Stand):
        def proba_of_ids(self, input_ids, owner=None):
            calls.append([list(ids) for ids in input_ids])
            return super().proba_of_ids(input_ids, owner)
    predictor = Counting(leak=1e-3)
    batched = Stand(leak=1e-3).proba_of_ids(IDS)
    first = one_per_call(predictor, IDS, None, batched, seed=3)
    assert (first["single_calls"], first["batch_differ"]) == (5, 5) and all(len(c) == 1 for c in calls)
    sample, calls[:] = list(calls), []
    assert one_per_call(predictor, IDS, None, batched, seed=3) == first and calls == sample


def test_a_format_that_answers_by_its_batch_is_not_served_and_the_next_is(caplog):
    """chain_result: the int8 check's reason is the one warning line; float32 is served."""
    def check(fmt, reasons, differ):
        return {"format": fmt, "agreement": 1.0, "max_prob_diff": 0.01, "accuracy": 0.9, "verdict": "no",
                "comparison": {}, "batch_diff": 0.05 if differ else 0.0, "single_calls": 8, "batch_differ": differ,
                "reasons": reasons}
    why = "8 of 8 test documents scored one per call differ from their batched answer by up to 0.05"
    result = chain_result("onnx-int8", [check("onnx-int8", [why], 8), check("onnx", [], 0)])
    assert (result["format"], result["fallback"], result["batch_differ"]) == ("onnx", why, 0)
    assert result["checks"]["onnx-int8"]["batch_differ"] == 8
    assert [r.message for r in caplog.records] == [f"serving onnx, not onnx-int8: {why}"]
