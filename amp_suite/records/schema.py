"""Each record field's role and unit, declared once beside the field. No torch here.

A field says what it is (`measured` for a quantity a cell measured, with its unit and the
instrument that measures it), and the rest is derived from that: the tracker's metrics, the
instrument's share of the record and the report's per-cell table. A new measured quantity is its
instrument plus one `measured(...)` field; nothing else lists it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

Role = Literal["identity", "parameter", "measured", "diagnostic"]
# What a measured quantity is about: the report's per-cell tables, one per topic, each fits a screen.
Topic = Literal["speed", "timing", "memory", "accuracy", "precision", "GPU", "scaling"]


def measured(
    unit: str, description: str | None = None, *, topic: Topic = "speed", instrument: str | None = None,
    default: Any = None,
) -> Any:  # fmt: skip
    """A scalar a cell measured: a column of the report's per-cell table of its `topic`, and in the
    tracker. `unit` as people write it ("ms", "MB", "TFLOP/s", "fraction"; "" for a loss or a score);
    `instrument`: the module whose reading fills it, where one fills a block of fields (gpu_state)."""
    extra = {"role": "measured", "unit": unit, "instrument": instrument, "topic": topic}
    return Field(default, description=description, json_schema_extra=extra)  # type: ignore[arg-type]


def declared(role: Role, description: str | None = None, *, instrument: str | None = None, default: Any = None) -> Any:
    """A field that is not a charted quantity, with its role (and the instrument that fills it)."""
    extra = {"role": role, "unit": None, "instrument": instrument}
    return Field(default, description=description, json_schema_extra=extra)  # type: ignore[arg-type]


def _extra(model: type[BaseModel], name: str) -> dict[str, Any]:
    extra = model.model_fields[name].json_schema_extra
    return extra if isinstance(extra, dict) else {}


def fields_of(model: type[BaseModel], *, role: Role | None = None, instrument: str | None = None) -> tuple[str, ...]:
    """The fields declared with this role and/or instrument, in declaration order."""
    return tuple(
        name
        for name in model.model_fields
        if (role is None or _extra(model, name).get("role") == role)
        and (instrument is None or _extra(model, name).get("instrument") == instrument)
    )


def unit_of(model: type[BaseModel], name: str) -> str | None:
    return _extra(model, name).get("unit")


def topic_of(model: type[BaseModel], name: str) -> Topic | None:
    return _extra(model, name).get("topic")


def instruments_of(model: type[BaseModel]) -> tuple[str, ...]:
    """The instruments that fill the model's fields, in the order their first field is declared."""
    named = (_extra(model, name).get("instrument") for name in model.model_fields)
    return tuple(dict.fromkeys(name for name in named if name))
