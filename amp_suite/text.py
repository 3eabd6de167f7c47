"""Text from outside the program, made safe to show. No torch here.

Reasons, names, labels, paths and record strings come from matrix files, the command line and
hand-editable results.jsonl lines. On a terminal, a control character in them (ESC, CR, C1's CSI)
would move the cursor, recolour or rewrite what is shown, and a `[/]` would be read as rich
markup (a MarkupError that aborts the matrix); in Markdown, a line break would start a heading
and a pipe a table cell. Every such string passes through one of these functions on its way out;
the styling the program adds itself ("[green]ok[/]") is left alone because it never does.
"""

from __future__ import annotations

import re

from rich.markup import escape

# C0 controls and DEL, C1 controls (0x9b is a one-byte CSI), and the bidirectional overrides and
# isolates, which reorder what a terminal or browser shows ("Trojan Source").
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# What Markdown would read as markup, each escaped with the backslash CommonMark gives every ASCII
# punctuation mark: a tag's "<", an entity's "&" (as in "&gt;"), a pipe, and a heading's "#" or a
# quote's ">" where they start the text. Elsewhere ">" is plain: "cc >= 8.0" reads as itself.
_MARKDOWN = re.compile(r"[<|]|&(?=#?\w+;)|^[#>]")


def printable(text: object) -> str:
    """The text with each control character replaced by a space (a line break too: one value, one line)."""
    return _CONTROL.sub(" ", str(text))


def plain(text: object) -> str:
    """For a string rich reads as markup: printable, with anything that looks like a tag escaped."""
    return escape(printable(text))


def markdown_cell(text: object) -> str:
    """For Markdown (a table cell, a note, a heading): printable, with tags, entities and pipes
    escaped, so the text can neither end its line or cell nor become HTML, and still reads as
    itself where report.md is read as plain text."""
    shown = printable(text).replace("\\", "\\\\")
    return _MARKDOWN.sub(lambda found: "\\" + found.group(), shown)
