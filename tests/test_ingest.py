"""Ingest rules: every file under the source is either kept or counted under one skip reason."""
from __future__ import annotations

import codecs
import io
import json
import os
import signal
import stat
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `stages` is not an installed package
    sys.path.insert(0, str(REPO))

from stages import ingest  # noqa: E402
from textclf.data.corpus import COLUMNS, build_corpus  # noqa: E402
from textclf.data.sources import open_source  # noqa: E402

BBC = REPO / ".." / "shared" / "data" / "bbc"
MAX = 10_000
BASE = {
    "alpha": ["apples grow on trees", "bananas are yellow", "cherries are red"],
    "beta": ["cars have four wheels", "bikes have two wheels", "boats float on water"],
}


def make_corpus(root: Path, classes: dict[str, list[str]] = BASE) -> Path:
    """root/<class>/<n>.txt, UTF-8, one distinct document per file."""
    for label, texts in classes.items():
        (root / label).mkdir(parents=True, exist_ok=True)
        for i, text in enumerate(texts, 1):
            (root / label / f"{i}.txt").write_text(text, encoding="utf-8")
    return root


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def build(root: Path, max_bytes: int = MAX, min_per_class: int = 2):
    frame, report = build_corpus(root, max_bytes, min_per_class)
    assert report["files_seen"] == report["kept"] + sum(report["skipped"].values())
    assert report["kept"] == len(frame)
    assert list(frame.columns) == COLUMNS
    return frame, report


def row(frame: pd.DataFrame, path: str) -> pd.Series:
    rows = frame[frame.source_path == path]
    assert len(rows) == 1, f"{path} not kept exactly once"
    return rows.iloc[0]


def test_clean_base_corpus(tmp_path):
    frame, report = build(make_corpus(tmp_path / "c"))
    assert report["files_seen"] == 6 and report["kept"] == 6
    assert report["skipped"] == {}
    assert report["encodings"] == {"utf-8": 6}
    assert report["per_class"] == {"alpha": 3, "beta": 3}
    assert frame.doc_id.is_unique
    assert row(frame, "alpha/2.txt").text == "bananas are yellow"


def test_cp1252_fallback(tmp_path):
    root = make_corpus(tmp_path / "c")
    write(root / "alpha" / "win.txt", b"caf\xe9 \x93quoted\x94")
    frame, report = build(root)
    assert report["files_seen"] == 7 and report["kept"] == 7 and report["skipped"] == {}
    assert report["encodings"] == {"utf-8": 6, "cp1252": 1}
    doc = row(frame, "alpha/win.txt")
    assert doc.encoding == "cp1252"
    assert doc.text == "caf\u00e9 \u201cquoted\u201d"


def test_boms_utf8_and_utf16(tmp_path):
    root = make_corpus(tmp_path / "c")
    write(root / "alpha" / "bom8.txt", codecs.BOM_UTF8 + "na\u00efve r\u00e9sum\u00e9".encode())
    write(root / "beta" / "le.txt", codecs.BOM_UTF16_LE + "little \u00e9ndian".encode("utf-16-le"))
    write(root / "beta" / "be.txt", codecs.BOM_UTF16_BE + "big \u00e9ndian".encode("utf-16-be"))
    frame, report = build(root)
    assert report["files_seen"] == 9 and report["kept"] == 9 and report["skipped"] == {}
    assert report["encodings"] == {"utf-8": 7, "utf-16": 2}
    bom8 = row(frame, "alpha/bom8.txt")
    assert bom8.text == "na\u00efve r\u00e9sum\u00e9" and bom8.encoding == "utf-8"
    assert row(frame, "beta/le.txt").text == "little \u00e9ndian"
    assert row(frame, "beta/be.txt").text == "big \u00e9ndian"
    assert row(frame, "beta/be.txt").encoding == "utf-16"
    assert not frame.text.str.contains("\ufeff").any()


def test_empty_and_whitespace_only(tmp_path):
    root = make_corpus(tmp_path / "c")
    write(root / "alpha" / "empty.txt", b"")
    write(root / "alpha" / "blank.txt", b" \n\t \r\n")
    write(root / "beta" / "bom_only.txt", codecs.BOM_UTF8)
    frame, report = build(root)
    assert report["files_seen"] == 9 and report["kept"] == 6
    assert report["skipped"] == {"empty": 3}
    assert report["encodings"] == {"utf-8": 6}
    assert {f["path"] for f in report["skipped_files"]} == {
        "alpha/empty.txt", "alpha/blank.txt", "beta/bom_only.txt"}


def test_binary_file(tmp_path):
    root = make_corpus(tmp_path / "c")
    write(root / "alpha" / "image.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00")
    write(root / "beta" / "bom.bin", b"\xff\xfe\x00\x00\x80\x81")  # NUL characters after a UTF-16 BOM
    frame, report = build(root)
    assert report["files_seen"] == 8 and report["kept"] == 6
    assert report["skipped"] == {"binary": 2}
    assert report["encodings"] == {"utf-8": 6}
    assert not {"alpha/image.png", "beta/bom.bin"} & set(frame.source_path)


def test_too_large(tmp_path):
    root = make_corpus(tmp_path / "c")
    write(root / "alpha" / "at_limit.txt", b"a" * 100)  # the limit itself is allowed
    write(root / "beta" / "over.txt", b"b" * 101)
    frame, report = build(root, max_bytes=100)
    assert report["files_seen"] == 8 and report["kept"] == 7
    assert report["skipped"] == {"too_large": 1}
    assert report["encodings"] == {"utf-8": 7}
    assert report["skipped_files"] == [{"path": "beta/over.txt", "reason": "too_large"}]
    row(frame, "alpha/at_limit.txt")


def test_symlink_outside_root_is_skipped_and_never_read(tmp_path):
    root = make_corpus(tmp_path / "c")
    secret = write(tmp_path / "outside" / "secret.txt", b"TOP SECRET outside the corpus")
    (root / "alpha" / "leak.txt").symlink_to(secret)
    (root / "beta" / "leakdir").symlink_to(secret.parent, target_is_directory=True)
    frame, report = build(root)
    assert report["files_seen"] == 8 and report["kept"] == 6
    assert report["skipped"] == {"symlink_outside_root": 2}
    assert report["encodings"] == {"utf-8": 6}
    assert not frame.text.str.contains("SECRET").any()


def test_symlink_inside_root_is_followed(tmp_path):
    root = make_corpus(tmp_path / "c")
    # The target sits at the top level (ignored as a document itself), so the link is kept.
    write(root / "notes.txt", b"dates are sweet")
    (root / "alpha" / "link.txt").symlink_to(root / "notes.txt")
    # A link back up to the root must not make the walk loop.
    (root / "beta" / "loop").symlink_to(root, target_is_directory=True)
    frame, report = build(root)
    assert report["files_seen"] == 7 and report["kept"] == 7 and report["skipped"] == {}
    assert report["encodings"] == {"utf-8": 7}
    assert report["ignored_top_level"] == ["notes.txt"]
    link = row(frame, "alpha/link.txt")
    assert link.text == "dates are sweet" and link.label == "alpha"


def test_dangling_symlink_inside_root_is_skipped(tmp_path):
    root = make_corpus(tmp_path / "c")
    (root / "alpha" / "dangling.txt").symlink_to(root / "alpha" / "missing.txt")
    frame, report = build(root)
    assert report["files_seen"] == 7 and report["kept"] == 6
    assert sum(report["skipped"].values()) == 1


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")
def test_fifo_is_not_opened(tmp_path):
    root = make_corpus(tmp_path / "c")
    os.mkfifo(root / "alpha" / "pipe")

    def hung(signum, frame):
        raise TimeoutError("ingest blocked on the FIFO")

    # Opening a FIFO with no writer blocks forever; the alarm turns that into a failure.
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(5)
    try:
        frame, report = build(root)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert report["files_seen"] == 7 and report["kept"] == 6
    assert report["skipped"] == {"not_a_regular_file": 1}
    assert report["encodings"] == {"utf-8": 6}


def test_hidden_dirs_and_files_never_become_labels(tmp_path):
    root = make_corpus(tmp_path / "c")
    write(root / ".git" / "config", b"[core]\n")
    write(root / ".git" / "objects" / "ab" / "cdef", b"blob text")
    write(root / ".ipynb_checkpoints" / "notes-checkpoint.txt", b"checkpoint text")
    write(root / "alpha" / ".DS_Store", b"Bud1 finder metadata")
    frame, report = build(root)
    assert set(frame.label) == {"alpha", "beta"}
    assert report["per_class"] == {"alpha": 3, "beta": 3}
    # Hidden top-level folders are not class folders: listed as ignored, not seen.
    assert sorted(report["ignored_top_level"]) == [".git", ".ipynb_checkpoints"]
    assert report["files_seen"] == 7 and report["kept"] == 6
    assert report["skipped"] == {"hidden": 1}
    assert report["encodings"] == {"utf-8": 6}


def test_duplicates_kept_once(tmp_path):
    root = make_corpus(tmp_path / "c")
    write(root / "alpha" / "4.txt", b"apples grow on trees")  # byte-identical to alpha/1.txt
    write(root / "alpha" / "5.txt", b"  apples grow\n\ton   trees \n")  # whitespace only
    write(root / "beta" / "4.txt", "cafe\u0301 racer".encode())  # NFD ...
    write(root / "beta" / "5.txt", "caf\u00e9 racer".encode())  # ... and NFC
    frame, report = build(root)
    assert report["files_seen"] == 10 and report["kept"] == 7
    assert report["skipped"] == {"duplicate": 3}
    assert report["encodings"] == {"utf-8": 10}  # counted before de-duplication
    assert report["duplicates_not_byte_identical"] == 2
    assert sorted(sorted(g) for g in report["duplicate_groups"]) == [
        ["alpha/1.txt", "alpha/4.txt", "alpha/5.txt"], ["beta/4.txt", "beta/5.txt"]]
    assert (frame.text.str.split().str.join(" ") == "apples grow on trees").sum() == 1
    assert frame.content_hash.is_unique
    assert report["per_class"] == {"alpha": 3, "beta": 4}


def test_conflicting_labels_dropped_from_both(tmp_path):
    root = make_corpus(tmp_path / "c")
    write(root / "alpha" / "4.txt", b"the same words twice")
    write(root / "beta" / "4.txt", b"the  same words\ntwice")
    frame, report = build(root)
    assert report["files_seen"] == 8 and report["kept"] == 6
    assert report["skipped"] == {"conflicting_label": 2}
    assert report["encodings"] == {"utf-8": 8}
    assert len(report["conflicts"]) == 1
    conflict = report["conflicts"][0]
    assert conflict["labels"] == ["alpha", "beta"]
    assert sorted(conflict["paths"]) == ["alpha/4.txt", "beta/4.txt"]
    assert not frame.text.str.contains("same words").any()


def test_class_below_min_per_class_names_the_class(tmp_path):
    root = make_corpus(tmp_path / "c", {**BASE, "gamma": ["a lonely document"]})
    with pytest.raises(ValueError, match=r"gamma.*min_per_class=2"):
        build_corpus(root, MAX, 2)


def test_single_class_is_an_error(tmp_path):
    root = make_corpus(tmp_path / "c", {"alpha": BASE["alpha"]})
    with pytest.raises(ValueError, match="at least two"):
        build_corpus(root, MAX, 2)


def test_class_with_every_file_skipped_is_an_error(tmp_path):
    root = make_corpus(tmp_path / "c")
    write(root / "gamma" / "1.bin", b"\x00\x01\x02")
    write(root / "gamma" / "2.txt", b"")
    with pytest.raises(ValueError, match="gamma"):
        build_corpus(root, MAX, 2)


def test_odd_unicode_class_names_preserved(tmp_path):
    classes = {"C++": ["templates and pointers", "operator overloading"],
               "a b": ["space in the name", "another spaced doc"],
               "\u00fc": ["umlaut class one", "umlaut class two"]}
    frame, report = build(make_corpus(tmp_path / "c", classes))
    assert report["files_seen"] == 6 and report["kept"] == 6 and report["skipped"] == {}
    assert report["encodings"] == {"utf-8": 6}
    assert set(frame.label) == {"C++", "a b", "\u00fc"}
    assert report["per_class"] == {"C++": 2, "a b": 2, "\u00fc": 2}


def test_wrapper_folder_is_descended(tmp_path):
    outer = tmp_path / "c"
    make_corpus(outer / "bbc")
    write(outer / "bbc" / "README.TXT", b"About this data set.")
    frame, report = build(outer)
    assert report["class_root"] == "bbc"
    assert report["ignored_top_level"] == ["bbc/README.TXT"]
    assert report["files_seen"] == 6 and report["kept"] == 6 and report["skipped"] == {}
    assert report["encodings"] == {"utf-8": 6}
    assert set(frame.label) == {"alpha", "beta"}
    assert not frame.text.str.contains("About this").any()


def _zip_folder(folder: Path, dest: Path, extra: dict[str, bytes] = {}) -> Path:
    with zipfile.ZipFile(dest, "w") as zf:
        for path in sorted(folder.rglob("*")):
            zf.write(path, path.relative_to(folder).as_posix())  # folders included, as zip tools do
        for name, data in extra.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFREG | 0o644) << 16  # as `zip` (Info-ZIP) writes it
            zf.writestr(info, data)
    return dest


def test_zip_archive(tmp_path):
    folder = make_corpus(tmp_path / "c")
    write(folder / "alpha" / ".DS_Store", b"finder")
    write(folder / "__MACOSX" / "alpha" / "._1.txt", b"resource fork")  # as macOS zips add
    archive = _zip_folder(folder, tmp_path / "corpus.zip")
    frame, report = build(archive)
    assert report["files_seen"] == 8 and report["kept"] == 6
    assert report["skipped"] == {"hidden": 2}
    assert report["encodings"] == {"utf-8": 6}
    assert set(frame.label) == {"alpha", "beta"}
    assert row(frame, "beta/3.txt").text == "boats float on water"


def test_tar_gz_archive_with_wrapper(tmp_path):
    folder = make_corpus(tmp_path / "c")
    archive = tmp_path / "corpus.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(folder, arcname="corpus")
    frame, report = build(archive)
    assert report["class_root"] == "corpus"
    assert report["files_seen"] == 6 and report["kept"] == 6 and report["skipped"] == {}
    assert report["encodings"] == {"utf-8": 6}
    assert row(frame, "corpus/alpha/1.txt").label == "alpha"


def test_zip_path_traversal_members_are_counted_not_written(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    folder = make_corpus(tmp_path / "c")
    (tmp_path / "in").mkdir()
    archive = _zip_folder(folder, tmp_path / "in" / "corpus.zip",
                          {"../evil.txt": b"EVIL traversal", "/etc/x": b"EVIL absolute",
                           "alpha/../../evil.txt": b"EVIL nested"})
    frame, report = build(archive)
    assert report["files_seen"] == 9 and report["kept"] == 6
    assert report["skipped"] == {"unsafe_archive_member": 3}
    assert report["encodings"] == {"utf-8": 6}
    assert set(frame.label) == {"alpha", "beta"}
    assert not frame.text.str.contains("EVIL").any()
    for where in (tmp_path.parent, tmp_path, tmp_path / "in", work.parent, work):
        assert not (where / "evil.txt").exists()
    assert not (tmp_path / "etc").exists()


def test_tar_link_members_are_skipped_never_read(tmp_path):
    folder = make_corpus(tmp_path / "c")
    archive = tmp_path / "corpus.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(folder, arcname=".")
        for name, kind in (("alpha/passwd", tarfile.SYMTYPE), ("beta/hard", tarfile.LNKTYPE)):
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, "/etc/passwd"
            tf.addfile(info)
        info = tarfile.TarInfo("../evil.txt")
        info.size = 4
        tf.addfile(info, io.BytesIO(b"EVIL"))
    frame, report = build(archive)
    assert report["files_seen"] == 9 and report["kept"] == 6
    assert report["skipped"] == {"not_a_regular_file": 2, "unsafe_archive_member": 1}
    assert report["encodings"] == {"utf-8": 6}
    assert not frame.text.str.contains("root:").any()
    assert not (tmp_path.parent / "evil.txt").exists()


def test_zip_written_by_python_writestr(tmp_path):
    archive = tmp_path / "corpus.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for label, texts in BASE.items():
            for i, text in enumerate(texts, 1):
                zf.writestr(f"{label}/{i}.txt", text)
    frame, report = build(archive)
    assert report["files_seen"] == 6 and report["kept"] == 6 and report["skipped"] == {}


def test_folder_and_zip_of_same_corpus_give_same_table(tmp_path):
    folder = make_corpus(tmp_path / "c")
    write(folder / "alpha" / "4.txt", b"apples  grow on\ntrees")  # variant of alpha/1.txt
    from_folder, _ = build(folder)
    from_zip, _ = build(_zip_folder(folder, tmp_path / "corpus.zip"))
    assert "alpha/1.txt" in set(from_folder.source_path)  # the first copy by path is kept
    pd.testing.assert_frame_equal(from_folder, from_zip)


def test_class_names_that_prefix_each_other_keep_the_spill_in_corpus_order(tmp_path):
    """`pos`, `pos-strong`, `pos.x`: a corpus is written in path order ("pos-strong/…" before
    "pos/…"), so the entries must come in that order too; then the spill holds the texts in
    corpus order and is read back one batch at a time (Ledger.write takes nothing else)."""
    folder = make_corpus(tmp_path / "c", {"pos": ["good film", "fine acting"], "pos.x": ["odd name",
                                          "odd again"], "pos-strong": ["superb film", "a masterpiece"]})
    archive = _zip_folder(folder, tmp_path / "c.zip", {"pos/./9.txt": b"a path with a dot folder"})
    for source in (folder, archive):
        with open_source(source) as entries:
            paths = ["/".join(e.parts) for e in entries]
        assert paths == sorted(paths), source
        frame, _ = build(source)
        assert frame.source_path.tolist() == sorted(frame.source_path), source


def test_archive_repeated_member_names_keep_doc_ids_unique(tmp_path):
    archive = _zip_folder(make_corpus(tmp_path / "c"), tmp_path / "corpus.zip",
                          {"alpha/./1.txt": b"a different document, same path"})
    frame, report = build(archive)
    assert frame.doc_id.is_unique


def test_missing_source_is_an_error(tmp_path):
    with pytest.raises(ValueError, match=r"ingest\.source.*does not exist"):
        build_corpus(tmp_path / "nope", MAX, 2)


@pytest.mark.parametrize("name, data, match", [
    ("notes.txt", b"just a file", "neither a folder nor an archive"),
    ("corpus.zip", b"not really a zip", "not a readable zip"),
    ("corpus.tar.gz", b"not really a tarball", "not a readable tar"),
])
def test_source_that_is_not_a_corpus_is_an_error(tmp_path, name, data, match):
    source = write(tmp_path / name, data)
    with pytest.raises(ValueError, match=rf"ingest\.source.*{match}"):
        build_corpus(source, MAX, 2)


def test_main_writes_parquet_and_report(tmp_path):
    root = make_corpus(tmp_path / "c")
    write(root / "alpha" / "dup.txt", b"apples grow on trees")
    params = tmp_path / "params.yaml"
    params.write_text(f"ingest:\n  source: {json.dumps(str(root))}\n"
                      "  max_bytes: 1000\n  min_per_class: 2\n", encoding="utf-8")
    corpus, report_path = tmp_path / "out" / "corpus.parquet", tmp_path / "out" / "report.json"
    ingest.main(["--params", str(params), "--corpus", str(corpus), "--report", str(report_path)])
    frame = pd.read_parquet(corpus)
    assert list(frame.columns) == ["doc_id", "label", "text", "source_path", "content_hash",
                                   "encoding", "group", "split_key"]
    assert len(frame) == 6 and frame.doc_id.is_unique
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert report["files_seen"] == 7 and report["kept"] == 6
    assert report["skipped"] == {"duplicate": 1}
    assert report["encodings"] == {"utf-8": 7}
    assert report["files_seen"] == report["kept"] + sum(report["skipped"].values())


def test_demo_report_keys_stay_in_order():
    """ingest_report.json as the report stage and users' scripts read it: its keys, in order."""
    _, report = build_corpus(REPO / "data" / "sample", 1_000_000, 5)
    assert list(report) == ["source", "class_root", "files_seen", "kept", "skipped", "encodings",
                            "per_class", "ignored_top_level", "skipped_files", "duplicate_groups",
                            "duplicates_not_byte_identical", "conflicts", "near_duplicates"]
    assert list(report["near_duplicates"]) == [
        "enabled", "threshold", "shingle_size", "num_perm", "conflicts", "candidate_pairs",
        "checked_pairs", "linked_pairs", "lsh_bands", "groups", "documents_in_groups", "group_sizes",
        "top_pairs", "mixed_label_groups", "near_duplicate_mixed_groups", "near_duplicate_mixed_documents"]
    assert report["source"] == str(REPO / "data" / "sample") and report["files_seen"] == report["kept"] == 80


def test_accounting_that_does_not_add_up_raises_under_python_O():
    """The invariant seen = kept + skipped is an explicit raise: `python -O` drops asserts."""
    code = ("from collections import Counter\n"
            "from textclf.data.ingest_report import AccountingError, IngestReport, SkipReason\n"
            "report = IngestReport('src', seen=3)\n"
            "report.skip(SkipReason.BINARY, 'a/x.bin')\n"
            "try:\n    report.finish(1, Counter(a=1), Counter({'utf-8': 1}))\n"
            "except AccountingError as err:\n    print(err)\n")
    out = subprocess.run([sys.executable, "-O", "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ("ingest saw 3 files but kept 1 and skipped {'binary': 1}: "
                                  "each must be kept or skipped once")


@pytest.mark.slow
@pytest.mark.skipif(not BBC.is_dir(), reason=f"BBC corpus not found at {BBC} (shared/data/bbc)")
def test_real_bbc_corpus():
    frame, report = build(BBC, max_bytes=1_000_000, min_per_class=5)
    assert report["files_seen"] == 2225
    assert report["kept"] == 2125
    assert report["skipped"] == {"duplicate": 100}
    assert report["duplicates_not_byte_identical"] == 2  # the other 98 are exact copies
    assert report["encodings"] == {"utf-8": 2224, "cp1252": 1}
    assert frame.loc[frame.encoding == "cp1252", "source_path"].tolist() == ["sport/199.txt"]
    assert sorted(report["per_class"]) == ["business", "entertainment", "politics", "sport",
                                           "tech"]
    assert "README.TXT" in report["ignored_top_level"]
    assert report["conflicts"] == []


def test_a_corpus_with_nothing_left_fails_on_its_classes_and_leaves_no_output(tmp_path):
    """Every file empty: near-duplicate detection has nothing to sketch, and the class check
    names the empty classes; no corpus and no spill folder is left behind."""
    for name in ("a", "b"):
        (tmp_path / "src" / name).mkdir(parents=True)
        (tmp_path / "src" / name / "x.txt").write_text("  \n")
    out = tmp_path / "out"
    out.mkdir()
    params = tmp_path / "params.yaml"
    params.write_text(f"ingest:\n  source: {json.dumps(str(tmp_path / 'src'))}\n  min_per_class: 1\n")
    with pytest.raises(ValueError, match=r"\{'a': 0, 'b': 0\} have fewer than ingest.min_per_class=1"):
        ingest.main(["--params", str(params), "--corpus", str(out / "c.parquet"), "--report", str(out / "r.json")])
    assert list(out.iterdir()) == []
