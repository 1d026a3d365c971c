"""The CPU that checked a model (textclf.cpu): recorded by the export stage in export.json and
by evaluate as MLflow tags; an int8 model loaded on a CPU whose VNNI differs from the checking
one says so in one warning line (ONNX Runtime's u8 x s8 kernels without VNNI add adjacent
products in int16 and may saturate: other answers than the ones checked, issue 61)."""
import json
import logging
import sys
from pathlib import Path

import pytest

from textclf.cpu import FLAGS, VNNI, has_vnni, this_cpu, vnni_differs
from textclf.inference.loading import load_predictor
from textclf.model.checksums import write_checksums
from textclf.model.export import export_model

from test_export import HEADS, saved

LINUX = sys.platform.startswith("linux")


def other_kind(cpu: dict) -> dict:
    """A Linux CPU whose VNNI is the opposite of `cpu`'s: AVX2 alone, or AVX-512 with VNNI."""
    return {"platform": "linux", "flags": ["avx2"] if has_vnni(cpu) else ["avx2", "avx512f", "avx512_vnni"]}


@pytest.mark.skipif(not LINUX, reason="flags are read from /proc/cpuinfo")
def test_this_cpus_flags_are_those_of_proc_cpuinfo():
    listed = set(next(line for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("flags")).split(":", 1)[1].split())
    assert this_cpu() == {"platform": sys.platform, "flags": [f for f in FLAGS if f in listed]}
    assert has_vnni(this_cpu()) == bool(listed & set(VNNI))


def test_only_a_vnni_difference_between_linux_cpus_is_said():
    avx2, vnni = {"platform": "linux", "flags": ["avx2"]}, {"platform": "linux", "flags": ["avx2", "avx_vnni"]}
    assert "checked on a CPU with VNNI and runs on one with no VNNI (avx2)" in vnni_differs(vnni, avx2)
    assert "checked on a CPU with no VNNI (avx2) and runs on one with VNNI" in vnni_differs(avx2, vnni)
    assert vnni_differs(avx2, {"platform": "linux", "flags": ["avx2", "avx512f"]}) is None  # VNNI on neither
    assert vnni_differs(vnni, {"platform": "darwin", "flags": []}) is None  # unread there: unknown, not absent
    assert vnni_differs(None, avx2) is None  # an export from before exports recorded their CPU


def test_an_int8_model_checked_on_another_kind_of_cpu_says_so_once(tmp_path, tiny_random_bert, caplog):
    folder = saved(tmp_path / "model", tiny_random_bert, HEADS[0])
    here = this_cpu()
    for fmt in ("onnx-int8", "onnx"):
        meta = export_model(folder, tmp_path / fmt, fmt)
        for checked, warned in ((here, 0), (other_kind(here), int(LINUX and fmt == "onnx-int8"))):
            (tmp_path / fmt / "export.json").write_text(json.dumps({**meta, "cpu": checked}))
            write_checksums(tmp_path / fmt)  # as the export stage writes them
            caplog.clear()
            with caplog.at_level(logging.WARNING):
                load_predictor(str(tmp_path / fmt)).predict(["The striker scored twice."])
            lines = [r.message for r in caplog.records if "int8 model was checked on a CPU" in r.message]
            assert len(lines) == warned, (fmt, checked, lines)
            assert all(len(line.splitlines()) == 1 and str(tmp_path / fmt) in line for line in lines)
