"""The CPU a model was checked on and the one it runs on: the instruction-set flags that decide
which int8 kernels ONNX Runtime picks (read from /proc/cpuinfo on Linux; none elsewhere)."""
from __future__ import annotations

import sys
from pathlib import Path

# AVX2 alone: ONNX Runtime's u8 x s8 kernels add adjacent products in int16 and may saturate;
# VNNI (AVX-512 or AVX) adds them in int32; AMX and AVX-512 BF16 are the next kernels' (issue 61)
FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_tile", "avx512_bf16")
VNNI = ("avx512_vnni", "avx_vnni")
CPUINFO = Path("/proc/cpuinfo")


def this_cpu() -> dict:
    """-> {platform, flags: those of FLAGS this CPU has}; flags [] where /proc/cpuinfo is not
    read (not Linux): unknown, not absent."""
    flags: set[str] = set()
    if sys.platform.startswith("linux") and CPUINFO.is_file():
        for line in CPUINFO.read_text(errors="replace").splitlines():
            if line.startswith("flags"):  # every core lists the same; the first is enough
                flags = set(line.split(":", 1)[1].split())
                break
    return {"platform": sys.platform, "flags": [f for f in FLAGS if f in flags]}


def has_vnni(cpu: dict) -> bool:
    return any(f in cpu.get("flags", ()) for f in VNNI)


def vnni_differs(checked: dict | None, here: dict) -> str | None:
    """One line when an int8 model checked on `checked` (export.json's `cpu`) runs on `here`
    with VNNI where it had none or the reverse (another int8 kernel, other answers), else
    None; None too where either CPU's flags were not read (not Linux)."""
    if not checked or not all(c.get("platform", "").startswith("linux") for c in (checked, here)):
        return None
    if has_vnni(checked) == has_vnni(here):
        return None
    def named(c: dict) -> str:
        return "VNNI" if has_vnni(c) else "no VNNI (" + (" ".join(c["flags"]) or "no AVX2") + ")"
    return (f"this int8 model was checked on a CPU with {named(checked)} and runs on one with {named(here)}: "
            "ONNX Runtime picks other int8 kernels, so its answers may differ from the ones checked; "
            "serve.format onnx gives the same answers on any CPU")
