"""Reading a published suite's rows: each field checked, a row that cannot be read refused by its file, row
number and field (every suite reads through these)."""

from __future__ import annotations


def where(source: str, row: int) -> str:
    return f"{source} row {row}"


def text_of(row: dict, field: str, at: str) -> str:
    """One non-blank text field of a row."""
    value = row.get(field)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{at}: field {field!r} must be non-empty text, got {value!r:.80}")
    return value


def turns_of(row: dict, field: str, at: str) -> tuple[str, ...]:
    """A row's user turns: a non-empty list of non-blank texts."""
    return as_turns(row.get(field), field, at)


def as_turns(value, field: str, at: str) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not value or not all(isinstance(t, str) and t.strip() for t in value):
        raise ValueError(f"{at}: field {field!r} must be a non-empty list of non-empty texts, got {value!r:.80}")
    return tuple(value)


def id_of(row: dict, field: str, at: str) -> str:
    """The schema's own id, as text (a null id is refused: it could not tell two prompts apart)."""
    value = row.get(field)
    if value is None or isinstance(value, (list, dict)) or str(value) == "":
        raise ValueError(f"{at}: field {field!r} must be an id (text or a number), got {value!r:.80}")
    return str(value)
