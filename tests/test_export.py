"""The exported model (ONNX float32 and int8) against the PyTorch one, for every head; the
check evaluate runs before an export is served, and its fallback to PyTorch. The encoder is
the tiny RANDOM BERT from conftest: these tests check wiring and numerical parity, not accuracy."""
import dataclasses
import json
import logging
from functools import partial
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import onnx
import pytest
import torch

from textclf.config import ModelParams, TextCNNParams, TokenizeParams
from textclf.errors import UserError
from textclf.cpu import has_vnni, this_cpu
from textclf.inference.loading import load_predictor
from textclf.data.tokenizing import encode_texts
from textclf.inference.onnx_predictor import OnnxPredictor, token_batches
from textclf.inference.predictor import Predictor
from textclf.inference.proba import predict_proba
from textclf.model.checksums import write_checksums
from textclf.model.export import export_model
from textclf.model.modeling import build_model, load_classifier, load_tokenizer, pad_id, save_model
from textclf.model.quantize import quantize_rows
from textclf.report.document import to_markdown
from textclf.report.sections import serving_section

from conftest import run_baseline, run_evaluate, run_train, write_params

LABELS = ["business", "sport", "tech"]
TEXTS = ["Shares rose sharply after the bank reported record profits.",
         "The striker scored twice.",
         "A new phone with a faster chip goes on sale next week, the company said on Monday. " * 8,
         "Rates", "The club sold its goalkeeper to a rival for a record fee after a long season."]
HEADS = [ModelParams(head="sequence_classification"), ModelParams(head="pooled", pooling="mean"),
         ModelParams(head="textcnn", textcnn=TextCNNParams(kernel_sizes=[2, 3], num_filters=8))]


def vnni() -> bool:
    """Whether this CPU has VNNI: without it ONNX Runtime's u8 x s8 int8 product saturates with
    8-bit weights, and the tiny random model's int8 probabilities drift further from PyTorch's
    (0.134 on an AVX2-only EPYC, 2026-12-03; evaluate's agreement check catches a drift that
    changes labels, and serves float32 or PyTorch instead)."""
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return "avx512_vnni" in flags or "avx_vnni" in flags


def saved(folder, bert, cfg: ModelParams, tokenize: TokenizeParams = TokenizeParams(max_length=64)):
    torch.manual_seed(0)
    cfg = dataclasses.replace(cfg, name=str(bert))
    model, _ = build_model(cfg, LABELS)
    save_model(model.eval(), folder, load_tokenizer(cfg.name), {"model": cfg, "tokenize": tokenize})
    return folder


@pytest.mark.parametrize("cfg", HEADS, ids=lambda c: c.head)
def test_every_head_exports_with_pytorchs_probabilities(tmp_path, tiny_random_bert, cfg):
    """Dynamic batch and sequence axes (batches of 2 and 1, lengths 4 to 64 tokens, padded
    rows): float32 gives PyTorch's probabilities, int8 close to them."""
    folder = saved(tmp_path / "model", tiny_random_bert, cfg)
    reference = Predictor(folder, batch_size=2).predict_proba(TEXTS)  # (N, C)
    for fmt, tolerance in (("onnx", 1e-5), ("onnx-int8", 0.1 if vnni() else 0.2)):
        meta = export_model(folder, tmp_path / fmt, fmt)
        assert meta["labels"] == LABELS and meta["head"] == cfg.head
        probs = OnnxPredictor(tmp_path / fmt, batch_size=2).predict_proba(TEXTS)
        assert probs.shape == reference.shape and np.allclose(probs.sum(axis=1), 1, atol=1e-5)
        assert np.abs(probs - reference).max() < tolerance, (fmt, np.abs(probs - reference).max())


def test_the_onnx_predictor_refuses_what_the_pytorch_one_refuses(tmp_path, tiny_random_bert):
    folder = saved(tmp_path / "model", tiny_random_bert, HEADS[0])
    export_model(folder, tmp_path / "onnx", "onnx")
    onnx, torch_ = load_predictor(str(tmp_path / "onnx")), load_predictor(str(folder))
    assert isinstance(onnx, OnnxPredictor) and isinstance(torch_, Predictor)
    for bad in (["fine", "  "], ["fine", 7]):
        messages = []
        for predictor in (onnx, torch_):
            with pytest.raises(UserError) as err:
                predictor.predict(bad)
            messages.append(str(err.value))
        assert messages[0] == messages[1]
    assert len(onnx.predict([])) == 0 and list(onnx.predict(TEXTS[:2]).columns) == \
        list(torch_.predict(TEXTS[:2]).columns)


def test_serve_format_torch_exports_nothing_and_a_torch_folder_is_no_onnx_model(tmp_path, tiny_random_bert):
    folder = saved(tmp_path / "model", tiny_random_bert, HEADS[0])
    export_model(folder, tmp_path / "export", "torch")
    assert sorted(p.name for p in (tmp_path / "export").iterdir()) == ["checksums.json", "export.json"]
    with pytest.raises(UserError, match="holds no ONNX model"):
        OnnxPredictor(tmp_path / "export")
    with pytest.raises(UserError, match="not an exported model folder"):
        OnnxPredictor(folder)


def broken_export(folder, export_dir, name: str | None = None) -> None:
    """An export whose head answers the first class for every text: what a broken exporter
    or a quantization that ruins a model (Optimum #151) would serve. `name`: the file to
    replace (by default the one export.json names)."""
    model, _ = __import__("textclf.model.modeling", fromlist=["x"]).load_classifier(folder)
    with torch.no_grad():
        head = model.hf.classifier
        head.weight.zero_()
        head.bias.copy_(torch.arange(head.bias.numel(), 0, -1).float())
    from textclf.model.checksums import write_checksums
    from textclf.model.export import export_float
    export_float(model, export_dir / (name or json.loads((export_dir / "export.json").read_text())["file"]))
    write_checksums(export_dir)  # as the exporter writes them: the file is broken, not damaged


def evaluate_export(p: list[str], metrics: str) -> dict:
    """The evaluate stage alone on the export folder as it is -> metrics.json's serving."""
    from stages import evaluate
    evaluate.main(p + ["--tokens", "t.parquet", "--splits", "sp.parquet", "--model-dir", "model",
                       "--run-file", "run.json", "--guards", "guards.json", "--baseline", "b.json",
                       "--baseline-predictions", "bp.parquet", "--corpus", "c.parquet", "--export", "export",
                       "--data-diff", "diff.json", "--metrics", metrics, "--confusion", "conf.csv",
                       "--per-class", "pc.csv", "--per-class-json", "pc.json", "--predictions", "pred.parquet"])
    return json.loads(Path(metrics).read_text())["serving"]


def decided(tmp: Path, model_dir: Path) -> dict:
    """The export stage's check on the export folder as it is (export.check.served_format,
    on the prepared validation split) -> export.json."""
    from textclf.export.check import served_format
    from textclf.model.batching import read_token_splits
    meta = json.loads((tmp / "export" / "export.json").read_text())
    validation = read_token_splits(str(tmp / "t.parquet"), str(tmp / "sp.parquet"), list(meta["labels"]),
                                   names=("validation",))[0]["validation"]
    return served_format(tmp / "export", meta, validation, str(model_dir), str(tmp / "params.yaml"))[0]


def test_the_export_keeps_int8_else_float32_else_nothing_as_validation_decides(prepared, caplog):
    """The export stage checks serve.format onnx-int8 against PyTorch on validation and keeps
    the first format that passes (int8, the float32 file beside it, else none: PyTorch serves),
    alone in the folder, named by export.json's `format`: what predict, --table and the logged
    model all load. One warning line names each format not kept and why."""
    tmp, p = prepared
    write_params(tmp / "params.yaml", serve={"format": "onnx-int8", "min_agreement": 0.99})
    run_train(p)

    def exported() -> dict:
        return export_model(tmp / "model", tmp / "export", "onnx-int8", review={"coverage": 0.9, "review_below": 0.5})
    meta = exported()
    assert (meta["file"], meta["fallback"]["format"], meta["fallback"]["file"]) == \
        ("model.int8.onnx", "onnx", "model.onnx")
    # the chain's wiring apart from what int8 is: an int8 file that answers as float32 passes every check
    onnx.save(onnx.load(tmp / "export" / "model.onnx"), tmp / "export" / "model.int8.onnx")
    write_checksums(tmp / "export")
    int8 = decided(tmp, tmp / "model")
    assert (int8["requested"], int8["format"], int8["check"]["fallback"], list(int8["check"]["checks"])) == \
        ("onnx-int8", "onnx-int8", None, ["onnx-int8"])
    assert int8["cpu"]["platform"] and "fallback" not in int8 and isinstance(load_predictor("export"), OnnxPredictor)
    assert sorted(f.name for f in (tmp / "export").iterdir()) == ["checksums.json", "export.json",
                                                                  "model.int8.onnx", "tokenizer.json"]

    exported()
    broken_export(tmp / "model", tmp / "export", "model.int8.onnx")  # int8 answers one class
    with caplog.at_level(logging.WARNING):
        f32 = decided(tmp, tmp / "model")
    assert (f32["format"], f32["file"], f32["check"]["checks"]["onnx"]["agreement"]) == ("onnx", "model.onnx", 1.0)
    assert f32["check"]["checks"]["onnx-int8"]["agreement"] < 0.99
    assert "validation labels" in f32["check"]["fallback"] and "below serve.min_agreement 99.00%" in f32["check"]["fallback"]
    assert [r for r in caplog.records if r.message.startswith("serving onnx, not onnx-int8: ")]
    assert load_predictor("export").format == "onnx" and not (tmp / "export" / "model.int8.onnx").exists()

    exported()
    broken_export(tmp / "model", tmp / "export", "model.int8.onnx")
    broken_export(tmp / "model", tmp / "export", "model.onnx")  # float32 too
    neither = decided(tmp, tmp / "model")
    assert neither["format"] == "torch" and neither["check"]["fallback"].startswith("onnx-int8: ")
    assert sorted(f.name for f in (tmp / "export").iterdir()) == ["checksums.json", "export.json"]
    with pytest.raises(UserError, match="did not pass the export's check: onnx-int8: .*the PyTorch model serves"):
        load_predictor("export")


def test_an_export_that_test_does_not_confirm_is_logged_but_never_champion(prepared, caplog):
    """Evaluate confirms on test the format the export kept, and never serves another (the
    folder would then answer apart from the registry): one that disagrees on test is logged
    and registered as the folder holds it, with the reason in one warning, metrics.json,
    MLflow and the report, and as the guard alarm served_format, so champion stays put."""
    tmp, p = prepared
    write_params(tmp / "params.yaml", serve={"format": "onnx"})
    run_train(p)
    run_baseline(p)
    run_evaluate(p)  # the export passes: float32 agrees with PyTorch
    good = json.loads((tmp / "metrics.json").read_text())
    assert (good["serving"]["format"], good["serving"]["agreement"], good["serving"]["unconfirmed"]) == ("onnx", 1.0, None)
    assert good["serving"]["max_prob_diff"] < 1e-5 and good["serving"]["fallback"] is None
    assert good["registry"]["promoted"] and "served_format" not in good["guards"]

    broken_export(tmp / "model", tmp / "export")  # what a broken exporter would leave, after the export's check
    with caplog.at_level(logging.WARNING):
        bad = evaluate_export(p, "m2.json")
    assert (bad["format"], bad["requested"]) == ("onnx", "onnx") and bad["agreement"] < 0.99
    assert "test labels (" in bad["unconfirmed"] and "agree with PyTorch's, below serve.min_agreement 99.00%" in bad["unconfirmed"]
    assert [r for r in caplog.records if r.message.startswith("serving onnx as the export decided on validation")]
    metrics = json.loads((tmp / "m2.json").read_text())
    assert metrics["guards"]["served_format"] == "fail"
    assert (metrics["registry"]["version"], metrics["registry"]["champion"], metrics["registry"]["promoted"]) == (2, 1, False)
    texts = TEXTS[:3]
    pd.testing.assert_frame_equal(load_predictor("export").predict(texts), load_predictor(bad["model_uri"]).predict(texts))
    run = mlflow.get_run(json.loads((tmp / "run.json").read_text())["run_id"])
    assert run.data.tags["serve.unconfirmed"] == bad["unconfirmed"] and run.data.tags["serve.format"] == "onnx"
    report = to_markdown(serving_section(metrics))
    assert "the test split does not confirm it" in report and "never becomes champion" in report


def test_a_format_folder_holds_one_format_and_never_copies_a_damaged_file(tmp_path, tiny_random_bert):
    """What evaluate checks and logs: one format's file alone, named by its export.json; a
    damaged source file is refused, not given a fresh checksum; the other format's damage is
    not this format's concern."""
    from textclf.model.export import format_folder
    export_model(saved(tmp_path / "model", tiny_random_bert, HEADS[0]), tmp_path / "export", "onnx-int8")
    with open(tmp_path / "export" / "model.onnx", "r+b") as fh:  # the float32 file damaged
        fh.seek(1000)
        fh.write(b"\0" * 64)
    with pytest.raises(UserError, match="model.onnx is not the file that was saved"):
        format_folder(tmp_path / "export", "onnx", tmp_path / "f32")
    int8 = format_folder(tmp_path / "export", "onnx-int8", tmp_path / "int8")
    meta = json.loads((int8 / "export.json").read_text())
    assert (meta["format"], meta["file"], "fallback" in meta) == ("onnx-int8", "model.int8.onnx", False)
    assert sorted(f.name for f in int8.iterdir()) == ["checksums.json", "export.json", "model.int8.onnx",
                                                      "tokenizer.json"]
    assert OnnxPredictor(int8).predict_proba(TEXTS).shape == (len(TEXTS), len(LABELS))


def test_an_export_of_another_format_fails_in_one_line(prepared):
    tmp, p = prepared
    run_train(p)
    run_baseline(p)
    from stages import export
    export.main(p + ["--tokens", "t.parquet", "--splits", "sp.parquet", "--model-dir", "model",  # params.yaml: onnx-int8
                     "--out", "export"])
    write_params(tmp / "params.yaml", serve={"format": "onnx"})
    with pytest.raises(UserError, match="holds a onnx-int8 export, but serve.format is onnx"):
        from stages import evaluate
        evaluate.main(p + ["--tokens", "t.parquet", "--splits", "sp.parquet", "--model-dir", "model",
                           "--run-file", "run.json", "--guards", "guards.json", "--baseline", "b.json",
                           "--baseline-predictions", "bp.parquet", "--corpus", "c.parquet",
                           "--export", "export", "--data-diff", "diff.json", "--metrics", "m.json",
                           "--confusion", "conf.csv", "--per-class", "pc.csv", "--per-class-json", "pc.json", "--predictions", "pred.parquet"])


def test_token_batches_cover_every_row_once_within_the_budget():
    lengths = [256, 10, 128, 256, 40, 256, 256, 256, 3]
    batches = token_batches(lengths, batch_size=16, budget=600)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert all(len(b) * max(lengths[i] for i in b) <= 600 or len(b) == 1 for b in batches)
    assert [len(b) for b in batches][:3] == [2, 2, 2]  # five of 256 in pairs, the fifth with the 128
    assert token_batches([5000], 16, 600) == [[0]]  # a row longer than the budget runs alone


def test_chunks_predictors_read_every_window_and_pool_as_evaluate_does(tmp_path, tiny_random_bert):
    """A model trained with tokenize.truncation chunks (max_length 24, stride 6): the Predictor
    and the ONNX predictor window a text as the tokenize stage does and give each text the
    softmax of its windows' logits pooled by model.chunk_pooling, computed here window by
    window; evaluate's path (predict_proba on the stored windows) gives the same; mean and
    max differ on the long text, and agree on the texts of one window."""
    tokenize = TokenizeParams(max_length=24, truncation="chunks", stride=6)
    got = {}
    for pooling in ("mean", "max"):
        folder = saved(tmp_path / pooling, tiny_random_bert, ModelParams(chunk_pooling=pooling), tokenize)
        tokenizer, (model, _) = load_tokenizer(str(folder)), load_classifier(folder)
        enc = encode_texts(tokenizer, TEXTS, 24, "chunks", 6)
        assert max(enc.counts) >= 5 and min(enc.counts) == 1  # the long text: many windows
        with torch.no_grad():  # each window alone, unpadded: no batching shared with the predictors
            logits = np.stack([model(torch.tensor([w]), torch.ones(1, len(w), dtype=torch.long))[0].numpy()
                               for w in enc.ids])
        pool = {"mean": np.mean, "max": np.max}[pooling]
        pooled = np.stack([pool(logits[enc.owner == d], axis=0) for d in range(len(TEXTS))])
        expected = torch.softmax(torch.from_numpy(pooled), -1).numpy()
        got[pooling] = Predictor(folder, batch_size=2).predict_proba(TEXTS)
        assert np.abs(got[pooling] - expected).max() < 1e-5
        evaluate = predict_proba(model, enc.ids, 16, pad_id(tokenizer), torch.device("cpu"), owner=enc.owner,
                                 pooling=pooling)  # what evaluate runs on the token store's rows
        assert np.abs(evaluate - got[pooling]).max() < 1e-5
        meta = export_model(folder, tmp_path / f"{pooling}-onnx", "onnx")
        assert (meta["truncation"], meta["stride"], meta["chunk_pooling"]) == ("chunks", 6, pooling)
        onnx = OnnxPredictor(tmp_path / f"{pooling}-onnx", batch_size=2)
        assert np.abs(onnx.predict_proba(TEXTS) - got[pooling]).max() < 1e-5
        assert np.abs(onnx.proba_of_ids(enc.ids, enc.owner) - evaluate).max() < 1e-5  # evaluate's check
    long = int(np.argmax(enc.counts))
    assert np.abs(got["mean"][long] - got["max"][long]).max() > 1e-4
    single = [d for d, n in enumerate(enc.counts) if n == 1]
    assert np.allclose(got["mean"][single], got["max"][single], atol=1e-6)


def test_an_export_without_chunks_says_nothing_of_windows(tmp_path, tiny_random_bert):
    meta = export_model(saved(tmp_path / "model", tiny_random_bert, HEADS[0]), tmp_path / "onnx", "onnx")
    assert meta["truncation"] == "head+tail" and not {"stride", "chunk_pooling"} & set(meta)


def test_int8_quantizes_a_weight_shared_by_two_matmuls_once(tmp_path):
    """Issue 60, item 10: one weight feeding two MatMuls (tied projections) was written as two
    initializers of one name each time, an invalid graph for a strict checker."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = rng.normal(size=(8, 4)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "w"], ["ya"]), helper.make_node("MatMul", ["b", "w"], ["yb"])], "tied",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3, 8]) for n in ("a", "b")],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3, 4]) for n in ("ya", "yb")],
        [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "f.onnx")
    assert quantize_rows(tmp_path / "f.onnx", tmp_path / "q.onnx") == 2
    names = [init.name for init in onnx.load(tmp_path / "q.onnx").graph.initializer]
    assert len(names) == len(set(names)) and "w_int8" in names
    onnx.checker.check_model(str(tmp_path / "q.onnx"))
    a = rng.normal(size=(2, 3, 8)).astype(np.float32)
    ya, yb = ort.InferenceSession(str(tmp_path / "q.onnx")).run(None, {"a": a, "b": a})
    assert ya.shape == (2, 3, 4) and np.isfinite(ya).all() and np.array_equal(ya, yb)  # one weight, one answer


def test_after_int8_falls_back_the_folder_and_the_registry_answer_alike(prepared, caplog, monkeypatch):
    """Issue 61: evaluate served float32 where export.json still named int8, so `predict
    models/export` and the registered model gave 5 of 400 texts other labels. The export stage
    now decides on validation and the folder holds what serves: at serve.min_agreement 1.0 the
    tiny random model's int8 (which moves its near-uniform probabilities) is not kept, and the
    folder, the logged model and the registered version give every text the same numbers. Its
    activations at 3 levels, not 127: on a CPU with VNNI 8-bit int8 kept every label of its
    few validation documents (2026-12-07), and the fallback is what is under test here."""
    tmp, p = prepared
    monkeypatch.setattr("textclf.model.export.quantize_rows", partial(quantize_rows, levels=3))
    write_params(tmp / "params.yaml", serve={"format": "onnx-int8", "min_agreement": 1.0})
    run_train(p)
    run_baseline(p)
    with caplog.at_level(logging.WARNING):
        run_evaluate(p)
    meta = json.loads((tmp / "export" / "export.json").read_text())
    assert (meta["requested"], meta["format"], meta["check"]["split"]) == ("onnx-int8", "onnx", "validation")
    assert meta["check"]["checks"]["onnx-int8"]["agreement"] < 1.0 and "serve.min_agreement" in meta["check"]["fallback"]
    assert sorted(f.name for f in (tmp / "export").iterdir()) == ["checksums.json", "export.json", "model.onnx",
                                                                  "tokenizer.json"]  # int8 is not there to load
    serving = json.loads((tmp / "metrics.json").read_text())["serving"]
    assert (serving["format"], serving["fallback"]) == ("onnx", meta["check"]["fallback"])
    texts = [t for t in pd.read_parquet(tmp / "c.parquet")["text"].head(40)] + TEXTS
    answers = [load_predictor(m).predict(texts) for m in  # predict and --table load through load_predictor
               ("export", serving["model_uri"], "models:/textclf/1", "models:/textclf@champion")]
    answers.append(mlflow.pyfunc.load_model("models:/textclf@champion").predict(pd.DataFrame({"text": texts})))
    for other in answers[1:]:  # REST and Spark: the pyfunc
        pd.testing.assert_frame_equal(answers[0], other, check_exact=True)
    assert [r for r in caplog.records if r.message.startswith("serving onnx, not onnx-int8: ")]
    run = mlflow.get_run(json.loads((tmp / "run.json").read_text())["run_id"])
    assert (run.data.tags["serve.format"], run.data.tags["serve.requested"]) == ("onnx", "onnx-int8")
    # the CPU that checked it (issue 61, item 3): in export.json and on the run
    assert meta["cpu"] == this_cpu() and run.data.tags["serve.cpu.flags"] == (" ".join(meta["cpu"]["flags"]) or "none")
    assert run.data.tags["serve.cpu.vnni"] == str(has_vnni(meta["cpu"])).lower()
    report = to_markdown(serving_section(json.loads((tmp / "metrics.json").read_text())))
    assert "The export's check on the " in report and "onnx-int8: " in report and "Served: **onnx**" in report


def test_int8_variants_keep_a_named_matmul_float_and_smoothing_keeps_the_product(tmp_path):
    """The options benchmarks/serving/int8_variants.py measures (issue 61 item 1): keep_float
    leaves a MatMul as it was, SmoothQuant's x / s against s · W is the same product (an outlier
    channel no longer sets the row's scale, so it comes closer), and 7 bits stay close."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = rng.normal(size=(16, 4)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "w"], ["y"], name="/layer.0/keep/MatMul")], "one",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [5, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 4])],
                              [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "f.onnx")
    a = rng.normal(size=(5, 16)).astype(np.float32)
    a[:, 3] *= 50  # an outlier channel, as BERT's hidden states have
    exact = a @ w

    def error(**kw) -> float:
        replaced = quantize_rows(tmp_path / "f.onnx", tmp_path / "q.onnx", **kw)
        y = ort.InferenceSession(str(tmp_path / "q.onnx")).run(None, {"a": a})[0]
        return replaced, float(np.abs(y - exact).max())

    assert error(keep_float=lambda name: "/keep/" in name) == (0, pytest.approx(0, abs=1e-4))
    replaced, plain = error()
    s = np.ones(16, np.float32)
    s[3] = 50
    bound = 0.05 * np.abs(exact).max()
    smoothed = error(smooth={"a": s})[1]
    assert replaced == 1 and smoothed < bound  # the same product, to int8's precision
    if plain > bound:  # int16 pair sums saturate on AVX2 without VNNI (off by 43 on outputs up to 162):
        assert smoothed < plain / 4  # the tamed outlier channel no longer does (with VNNI, none does)
    # 7 bits: coarser steps, but no int16 pair sum saturates (on any CPU), so only a bound
    assert error(levels=63)[1] < bound
