"""Per-step series of records read back, held as C doubles. No torch here.

A list of Python floats costs 32 bytes a point (the float and its pointer); a record of a
million-step cell carries a million-point loss curve and a scale curve twice as long, so records
read back as lists took ~100 MB each, and a summary of a few of them a gigabyte. As an
array('d') a point costs 8 bytes, with the same values: the file still holds every point.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import PlainSerializer, PlainValidator
from pydantic_core import PydanticCustomError


class Series(array):
    """A float series as array('d'): equal to a list of the same floats, as the list it stands for
    was, and sliced into a Series."""

    def __new__(cls, values: Iterable[float] = ()) -> Series:
        return super().__new__(cls, "d", values)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, tuple, array)):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None  # type: ignore[assignment]  # mutable, as a list is

    def __getitem__(self, index):  # type: ignore[override]
        item = super().__getitem__(index)
        return Series(item) if isinstance(index, slice) else item

    def __repr__(self) -> str:
        return repr(list(self))


def series_field(max_points: int) -> Any:
    """The annotation of a series field read back: at most `max_points` numbers (the strings
    "NaN", "Infinity", "-Infinity" of the record dialect included), written back as a list."""

    def validate(values: object) -> Series:
        if isinstance(values, Series):
            return values
        if not isinstance(values, (list, tuple)) or len(values) > max_points:
            raise PydanticCustomError("series", "a list of at most {most} numbers", {"most": max_points})
        try:
            return Series(values)  # C speed for plain numbers
        except TypeError:
            return Series(_number(value) for value in values)

    return Annotated[Series, PlainValidator(validate), PlainSerializer(list, return_type=list[float])]


def _number(value: object) -> float:
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity"):
        return float(value)
    raise PydanticCustomError("series", "a list of numbers")
