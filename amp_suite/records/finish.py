"""One place finishes a cell's record. No torch here.

The cell writes its record; the stages after it add what the cell could not know: the worker its
log, the batch search the cell's identity (it ran at the batch found, it is recorded as batch
"auto"), the comparison how it was timed, the runner its ids, the parity rule and the deployment's
facts. Each stage hands its fields over by name, and they are merged and validated once. A field
two stages both name is an error: which value wins is a decision, never the accident of an order.
The cell's pipeline merges the parts of its measurement the same way (`merged`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from amp_suite.records.results import CellRecord

Parts = Mapping[str, Mapping[str, Any]]  # a part's name (the stage that gives it) -> its fields


class FieldCollision(ValueError):
    """Two parts of a record name the same field."""


def merged(parts: Parts) -> dict[str, Any]:
    """The parts' fields as one dict; a field named by two parts raises FieldCollision, naming both."""
    fields: dict[str, Any] = {}
    given_by: dict[str, str] = {}
    for part, values in parts.items():
        for name, value in values.items():
            if name in given_by:
                raise FieldCollision(f"{name} is given twice: by {given_by[name]} and by {part}")
            given_by[name] = part
            fields[name] = value
    return fields


def finished(record: CellRecord, added: Parts) -> CellRecord:
    """The record with every stage's fields (by stage), validated once: a misspelt field or a wrong
    type is an error, as it is for a new record. A stage's field replaces the cell's own value."""
    fields = merged(added)
    return record.updated(**fields) if fields else record
