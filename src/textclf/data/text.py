"""Bytes to text, by the same rules for a corpus file, a file to classify and stdin.

Kept apart from corpus.py so that inference (predict, the served model) imports nothing
from ingest: no near-duplicate detection, no source readers, none of their libraries.
"""
from __future__ import annotations

import codecs

from textclf.data.ingest_report import SkipReason


def decode(data: bytes) -> tuple[str | None, str]:
    """Bytes -> (text, encoding), or (None, skip reason)."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            text = data.decode("utf-16")
        except UnicodeDecodeError:
            return None, SkipReason.UNDECODABLE
        # NUL bytes are no text behind a BOM either (\xff\xfe\x00\x00 also begins UTF-32)
        return (None, SkipReason.BINARY) if "\x00" in text else (text, "utf-16")
    if b"\x00" in data:
        return None, SkipReason.BINARY
    try:
        return data.decode("utf-8-sig"), "utf-8"
    except UnicodeDecodeError:
        pass
    try:
        return data.decode("cp1252"), "cp1252"
    except UnicodeDecodeError:  # the five bytes cp1252 leaves undefined
        return data.decode("latin-1"), "latin-1"


def not_text(head: bytes) -> str | None:
    """A text file's first bytes -> why they are no UTF-8 text (a NUL byte: binary; else the
    first byte UTF-8 cannot hold), or None. A multi-byte character cut at the end is text."""
    if b"\x00" in head:
        return "binary: a NUL byte in its first bytes"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as err:
        if err.start < len(head) - 3:
            return f"not UTF-8: byte 0x{head[err.start]:02x} at offset {err.start}"
    return None
