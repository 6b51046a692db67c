"""Configuration errors as a person reads them: one line per problem, in the form
`field: what is wrong`, naming the value and what is allowed.

pydantic's own rendering takes four lines per error, with its error type, the input's
repr and a link to its site; the operator's `InvalidSpec` condition, the sidecar's
start-up log and `mcpcache check-config` all show these lines instead.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from .units import format_duration

_SHOWN = 60
"""A value longer than this is cut (a whole object or list says little on one line)."""

_PATTERNS = {
    r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$": "use lowercase letters, digits, '-' and '.', "
    "starting and ending with a letter or digit",
    r"^[^\x00-\x1f]+$": "must not contain control characters",
}
"""The models' patterns, said in words."""


def location(path: Iterable[int | str], prefix: str = "") -> str:
    """`servers[0].cache.ttl` from pydantic's ('servers', 0, 'cache', 'ttl')."""
    text = prefix
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def shown(value: Any) -> str:
    """A value as the file wrote it: YAML-like, on one line, cut when long."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif value is None:
        text = "null"
    elif isinstance(value, str):
        text = repr(value)
    else:
        text = str(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def _is_duration(annotation: Any) -> bool:
    """Whether a field's type is `Duration` (seconds in memory, a string in files), so
    that its value and bounds are shown as durations, not as seconds."""
    for meta in getattr(annotation, "__metadata__", ()):
        if getattr(meta, "func", None) is format_duration:
            return True
    return any(_is_duration(a) for a in getattr(annotation, "__args__", ()) or ())


def _is_duration_at(model: type[BaseModel] | None, path: tuple[int | str, ...]) -> bool:
    """Whether the field a location ends at is a `Duration` (pydantic keeps a field's
    own annotations in `metadata`, those of an optional one in its annotation)."""
    if not path or isinstance(path[-1], int):
        return False
    owner = _model_at(model, path[:-1])
    if owner is None:
        return False
    for name, field in owner.model_fields.items():
        if path[-1] in (name, field.alias):
            own = any(getattr(meta, "func", None) is format_duration for meta in field.metadata)
            return own or _is_duration(field.annotation)
    return False


def _field_names(model: type[BaseModel] | None) -> list[str]:
    if model is None:
        return []
    return [field.alias or name for name, field in model.model_fields.items()]


def _unknown(name: str, model: type[BaseModel] | None) -> str:
    names = _field_names(model)
    close = difflib.get_close_matches(name, names, n=1)
    if close:
        return f"is not a field here; did you mean {close[0]}?"
    if names:
        return f"is not a field here; the fields are {', '.join(names)}"
    return "is not a field here"


def _rule(error: ErrorDetails, duration: bool) -> str:
    """What is allowed, for each kind of error the models raise."""
    kind, ctx = error["type"], error.get("ctx") or {}

    def limit(key: str) -> str:
        bound = ctx.get(key)
        return format_duration(float(bound)) if duration and bound is not None else str(bound)

    rules: dict[str, Callable[[], str]] = {
        "greater_than": lambda: f"must be more than {limit('gt')}",
        "greater_than_equal": lambda: f"must be at least {limit('ge')}",
        "less_than": lambda: f"must be less than {limit('lt')}",
        "less_than_equal": lambda: f"must be at most {limit('le')}",
        "bool_type": lambda: "must be true or false",
        "bool_parsing": lambda: "must be true or false",
        "int_type": lambda: "must be a whole number",
        "int_parsing": lambda: "must be a whole number",
        "int_from_float": lambda: "must be a whole number",
        "float_type": lambda: "must be a number",
        "float_parsing": lambda: "must be a number",
        "string_type": lambda: "must be a string",
        "string_pattern_mismatch": lambda: _PATTERNS.get(
            str(ctx.get("pattern")), f"must match {ctx.get('pattern')}"
        ),
        "string_too_short": lambda: (
            "must not be empty"
            if ctx.get("min_length") == 1
            else f"must be at least {ctx.get('min_length')} characters"
        ),
        "string_too_long": lambda: f"must be at most {ctx.get('max_length')} characters",
        "too_long": lambda: f"must have at most {ctx.get('max_length')} items",
        "too_short": lambda: f"must have at least {ctx.get('min_length')} items",
        "literal_error": lambda: f"must be {ctx.get('expected')}",
        "enum": lambda: f"must be {ctx.get('expected')}",
        "dict_type": lambda: "must be a mapping",
        "model_type": lambda: "must be a mapping",
        "model_attributes_type": lambda: "must be a mapping",
        "list_type": lambda: "must be a list",
        "tuple_type": lambda: "must be a list",
        "url_parsing": lambda: "must be a URL",
    }
    make = rules.get(kind)
    return make() if make is not None else str(error["msg"])


def problem(error: ErrorDetails, model: type[BaseModel] | None = None, prefix: str = "") -> str:
    """One error as `field: what is wrong`. `model` is the model the location starts
    from (to name the fields a misspelt one could be); `prefix` goes before the path."""
    where = location(error["loc"], prefix)
    at = f"{where}: " if where else ""
    kind = error["type"]
    if kind == "missing":
        return f"{at}is required"
    if kind == "extra_forbidden":
        return f"{at}{_unknown(str(error['loc'][-1]), _model_at(model, error['loc'][:-1]))}"
    if kind in ("value_error", "assertion_error"):
        # Our validators' messages name the value and what is allowed already.
        reason = (error.get("ctx") or {}).get("error")
        return at + str(reason if reason is not None else error["msg"])
    duration = _is_duration_at(model, tuple(error["loc"]))
    value = error.get("input")
    if duration and isinstance(value, int | float) and not isinstance(value, bool):
        text = format_duration(float(value))
    elif duration and isinstance(value, str):
        text = value
    else:
        text = shown(value)
    return f"{at}{text} is not allowed: {_rule(error, duration)}"


def _model_at(model: type[BaseModel] | None, path: Iterable[int | str]) -> type[BaseModel] | None:
    """The model a location leads to, following fields whose type is a model (or a list
    or optional of one); None where the path leaves the models."""
    for part in path:
        if model is None:
            return None
        if isinstance(part, int):
            continue
        field = next(
            (f for n, f in model.model_fields.items() if part in (n, f.alias)),
            None,
        )
        model = _inner_model(field.annotation) if field is not None else None
    return model


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in getattr(annotation, "__args__", ()) or ():
        if (found := _inner_model(argument)) is not None:
            return found
    return None


def problems(
    exc: ValidationError, model: type[BaseModel] | None = None, prefix: str = ""
) -> list[str]:
    """Every error of a validation, one line each, in the order pydantic found them."""
    return list(dict.fromkeys(problem(e, model, prefix) for e in exc.errors()))


def environment_problem(variable: str, value: str, allowed: str) -> str:
    return f"{variable}: {shown(value)} is not allowed: {allowed}"


__all__ = [
    "environment_problem",
    "location",
    "problem",
    "problems",
    "shown",
]
