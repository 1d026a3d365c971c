"""A tiny document model so report.md and report.html say the same thing: a list of
blocks rendered twice. HTML embeds figures as base64 PNG (one self-contained file);
Markdown lists the figure titles only. A long table shows its first rows and folds the rest
into a <details> element (both renderings: GitHub and GitLab render it in Markdown too)."""
from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass

from textclf.severity import ALARM, PASS, SEVERITY, WARNING

CSS = """body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}
table{border-collapse:collapse;margin:.5rem 0 1rem}td,th{border:1px solid #ccc;padding:.25rem .5rem;
text-align:left;vertical-align:top;font-size:.9rem}th{background:#f3f3f3}img{max-width:100%}
table{display:block;max-width:100%;overflow-x:auto}tr.low td{background:#fdecea}
details{margin:-.5rem 0 1rem}summary{cursor:pointer;color:#1565c0}
.warn{background:#fdecea;border-left:4px solid #c62828;padding:.5rem 1rem;font-weight:bold}
.pass{color:#2e7d32}.fail{color:#c62828;font-weight:bold}.note{color:#b26a00;font-weight:bold}figure{margin:1rem 0}"""


# a guard status cell is coloured by its severity
STATUS_CLASS = {status: {ALARM: "fail", WARNING: "note", PASS: "pass"}[kind] for status, kind in SEVERITY.items()}


@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Para:
    text: str  # **bold** and `code` are the only markup


@dataclass
class Alert:
    text: str


@dataclass
class Table:
    header: list[str]
    rows: list[list]
    shown: int | None = None  # rows shown; the rest fold away (None: every row)
    marked: frozenset[int] = frozenset()  # rows (indices) to highlight: a class at zero, say
    rest: str = "rows"  # what the folded rows are, in the fold's summary: "the other 42 classes"

    def parts(self) -> tuple[list[list], list[list]]:
        """-> (rows shown, rows folded)."""
        cut = len(self.rows) if self.shown is None else self.shown
        return self.rows[:cut], self.rows[cut:]

    def summary(self) -> str:
        return f"the other {len(self.parts()[1])} {self.rest}"


@dataclass
class Figure:
    title: str
    png: bytes


Block = Heading | Para | Alert | Table | Figure  # what a report is a list of


def _inline_html(text: str) -> str:
    text = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", html.escape(text))
    return re.sub(r"`(.+?)`", r"<code>\1</code>", text)


def _md_cell(value) -> str:
    return " ".join(str(value).split()).replace("|", "\\|")


def to_markdown(blocks: list[Block]) -> str:
    out = []
    for b in blocks:
        if isinstance(b, Heading):
            out += ["#" * b.level + " " + b.text, ""]
        elif isinstance(b, Para):
            out += [b.text, ""]
        elif isinstance(b, Alert):
            out += [f"> **WARNING: {b.text}**", ""]
        elif isinstance(b, Table):
            shown, folded = b.parts()
            out += _md_table(b.header, shown)
            if folded:
                out += [f"<details><summary>{html.escape(b.summary())}</summary>", ""]
                out += _md_table(b.header, folded) + ["</details>", ""]
        elif isinstance(b, Figure):
            out += [f"*Figure: {b.title} (in report.html)*", ""]
    return "\n".join(out)


def _md_table(header: list[str], rows: list[list]) -> list[str]:
    return (["| " + " | ".join(map(_md_cell, header)) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(map(_md_cell, row)) + " |" for row in rows] + [""])


def _status_cell(value) -> str:
    text = html.escape(str(value))
    if isinstance(value, str) and value in STATUS_CLASS:
        return f'<span class="{STATUS_CLASS[value]}">{text}</span>'
    return text


def _html_table(header: list[str], rows: list[list], marked: frozenset[int]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join(("<tr class='low'>" if i in marked else "<tr>")
                   + "".join(f"<td>{_status_cell(c)}</td>" for c in row) + "</tr>" for i, row in enumerate(rows))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def to_html(blocks: list[Block], title: str) -> str:
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
           f"<style>{CSS}</style></head><body>"]
    for b in blocks:
        if isinstance(b, Heading):
            out.append(f"<h{b.level}>{html.escape(b.text)}</h{b.level}>")
        elif isinstance(b, Para):
            out.append(f"<p>{_inline_html(b.text)}</p>")
        elif isinstance(b, Alert):
            out.append(f"<p class='warn'>WARNING: {html.escape(b.text)}</p>")
        elif isinstance(b, Table):
            shown, folded = b.parts()
            out.append(_html_table(b.header, shown, b.marked))
            if folded:
                marked = frozenset(i - len(shown) for i in b.marked)
                out.append(f"<details><summary>{html.escape(b.summary())}</summary>"
                           f"{_html_table(b.header, folded, marked)}</details>")
        elif isinstance(b, Figure):
            data = base64.b64encode(b.png).decode("ascii")
            out.append(f"<figure><img alt='{html.escape(b.title)}' src='data:image/png;base64,{data}'>"
                       f"<figcaption>{html.escape(b.title)}</figcaption></figure>")
    out.append("</body></html>")
    return "\n".join(out)
