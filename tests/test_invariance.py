"""A text gets the same answer whatever else is in its batch (issue 51): for every format the
served model can be (int8, the float32 file the export check falls back to, PyTorch), texts of very
different lengths scored alone, in one batch, in small batches, shuffled and each between two
long texts give the same labels and probabilities within SAME_ANSWER_ATOL. The model is the
tiny random BERT from conftest, exported by the exporter itself; a control shows that the
same checks catch ONNX Runtime's per-batch dynamic int8, which main shipped."""
import shutil

import numpy as np
import pytest
from onnxruntime.quantization import QuantType, quantize_dynamic

from textclf.inference.frames import PROB_PREFIX, SAME_ANSWER_ATOL
from textclf.inference.onnx_predictor import OnnxPredictor
from textclf.inference.predictor import Predictor
from textclf.model.checksums import write_checksums
from textclf.model.export import export_model, format_folder

from test_export import HEADS, saved

WORDS = ("shares rose after the bank reported record profits while the striker scored twice and a "
         "new phone with a faster chip goes on sale next week the minister said on monday").split()
TEXTS = ["Rates", "The striker scored twice.", *[" ".join(WORDS[i % len(WORDS)] for i in range(n))
                                                for n in (3, 7, 12, 20, 31, 45, 58, 80)]]
LONG = [" ".join(reversed(WORDS)) * 3, " ".join(WORDS) * 4]  # past max_length (64): padding for the rest


@pytest.fixture(scope="module")
def predictors(tmp_path_factory, tiny_random_bert) -> dict:
    """format -> its predictor: the int8 export as the exporter writes it (before the export
    stage's check keeps one format: this untrained model has no validation split), the float32
    file beside it alone (format_folder, as a folder that keeps it holds it), the PyTorch model folder."""
    tmp = tmp_path_factory.mktemp("invariance")
    folder = saved(tmp / "model", tiny_random_bert, HEADS[0])
    export_model(folder, tmp / "export", "onnx-int8")
    return {"onnx-int8": OnnxPredictor(tmp / "export"),
            "onnx": OnnxPredictor(format_folder(tmp / "export", "onnx", tmp / "float32")),
            "torch": Predictor(folder), "folder": tmp}


def answers(predictor, texts: list[str], batch_size: int) -> tuple[list[str], np.ndarray]:
    """predict's labels and probabilities (N, C) for `texts`, in batches of batch_size."""
    predictor.batch_size = batch_size
    frame = predictor.predict(texts)
    return list(frame["label"]), frame[[f"{PROB_PREFIX}{c}" for c in predictor.labels]].to_numpy()


def moves(predictor) -> dict[str, tuple[int, float]]:
    """Each way of batching -> (labels changed, largest probability difference) against every
    text scored alone."""
    alone = [answers(predictor, [t], 1) for t in TEXTS]
    labels, probs = [a[0][0] for a in alone], np.concatenate([a[1] for a in alone])  # (N, C)
    assert np.ptp(probs, axis=0).max() > 0.01, "the model gives every text the same answer: no test"
    order = np.random.default_rng(0).permutation(len(TEXTS))
    out = {}
    for size in (32, 3):
        ways = {"in one call": answers(predictor, TEXTS, size),
                "shuffled": answers(predictor, [TEXTS[i] for i in order], size)}
        ways["shuffled"] = [ways["shuffled"][0][i] for i in np.argsort(order)], ways["shuffled"][1][np.argsort(order)]
        beside = [answers(predictor, [LONG[0], t, LONG[1]], size) for t in TEXTS]
        ways["between two long texts"] = [b[0][1] for b in beside], np.stack([b[1][1] for b in beside])
        for way, (got_labels, got) in ways.items():
            out[f"{way}, batches of {size}"] = (sum(a != b for a, b in zip(got_labels, labels)),
                                                float(np.abs(got - probs).max()))
    return out


@pytest.mark.parametrize("fmt", ["onnx-int8", "onnx", "torch"])
def test_a_texts_answer_does_not_depend_on_its_batch(predictors, fmt):
    found = moves(predictors[fmt])
    assert all(changed == 0 and diff <= SAME_ANSWER_ATOL for changed, diff in found.values()), found


def test_the_check_catches_per_batch_int8_scales(predictors):
    """The control: the same float32 export quantized as main did (ONNX Runtime's dynamic
    quantization, one activation scale per batch) fails these checks by far."""
    folder = predictors["folder"]
    dynamic = shutil.copytree(folder / "float32", folder / "dynamic")
    quantize_dynamic(str(folder / "float32" / "model.onnx"), str(dynamic / "model.onnx"),
                     weight_type=QuantType.QInt8, per_channel=True)
    write_checksums(dynamic)
    found = moves(OnnxPredictor(dynamic))
    assert max(diff for _, diff in found.values()) > 1000 * SAME_ANSWER_ATOL, found
