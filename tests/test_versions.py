"""The document-level diff of two data versions counts exactly what was added, removed,
relabelled and edited, per class, and which documents changed split."""
import pandas as pd
import pytest

from textclf.data.versions import diff, summary
from textclf.errors import UserError


def version(rows: list[tuple[str, str, str, str]]) -> pd.DataFrame:
    """(path, label, text, split) -> a split table as the split stage writes it."""
    frame = pd.DataFrame(rows, columns=["source_path", "label", "content_hash", "split"])
    return frame.assign(doc_id="id-" + frame["source_path"])


OLD = version([("sport/1.txt", "sport", "match", "train"), ("sport/2.txt", "sport", "goal", "test"),
               ("tech/1.txt", "tech", "chip", "train"), ("tech/2.txt", "tech", "code", "validation"),
               ("tech/3.txt", "tech", "disk", "test"), ("biz/1.txt", "biz", "bank", "train")])


def test_each_kind_is_counted_exactly_per_class_with_examples():
    new = version([("sport/1.txt", "sport", "match", "train"),       # unchanged
                   ("tech/2.txt", "tech", "goal", "test"),           # sport/2 relabelled to tech
                   ("tech/1.txt", "tech", "chip v2", "train"),       # edited: same path, other text
                   ("tech/3.txt", "tech", "disk", "train"),          # unchanged text, moved test -> train
                   ("biz/2.txt", "biz", "loan", "test"),             # added
                   ("biz/3.txt", "biz", "fund", "train")])           # added
    found = diff(OLD, new)  # tech/2 ("code") and biz/1 ("bank") removed
    assert {k: found[k]["count"] for k in ("added", "removed", "relabelled", "edited")} == \
        {"added": 2, "removed": 2, "relabelled": 1, "edited": 1}
    assert found["added"]["per_class"] == {"biz": 2}
    assert found["removed"]["per_class"] == {"biz": 1, "tech": 1}
    assert found["relabelled"]["examples"] == [
        {"path": "tech/2.txt", "label": "tech", "old_label": "sport"}]
    assert found["edited"]["examples"] == [{"path": "tech/1.txt"}]
    assert found["unchanged"] == 2 and (found["old_documents"], found["new_documents"]) == (6, 6)
    assert found["split_moves"] == {"moved": 1, "test_to_train": 1, "by_route": {"test->train": 1}}
    assert summary(found).startswith("2 added, 2 removed, 1 relabelled, 1 edited, 2 unchanged; 1 changed split")


def test_the_same_version_has_no_changes():
    found = diff(OLD, OLD.sample(frac=1, random_state=0))
    assert all(found[k]["count"] == 0 for k in ("added", "removed", "relabelled", "edited"))
    assert found["unchanged"] == 6 and found["split_moves"]["moved"] == 0


def test_a_table_that_is_no_version_is_refused_in_one_line():
    with pytest.raises(UserError, match=r"no column\(s\) \['content_hash'\]"):
        diff(OLD.drop(columns="content_hash"), OLD)
    with pytest.raises(UserError, match="holds a document twice"):
        diff(pd.concat([OLD, OLD.head(1)]), OLD)
