"""The metadata filter language: parsing and validating a filter against a version's metadata schema, and
compiling it to SQL over the store's `doc_meta (key, value, id)` table, indexed on (key, value, id).

    F := {"field": v}                                 equality (v: string, number or bool)
       | {"field": {"eq": v}} | {"field": {"in": [v, …]}}
       | {"field": {"gt"|"gte"|"lt"|"lte": v, …}}      a range; several bounds in one object all apply
       | {"and": [F, …]} | {"or": [F, …]}
       | {"f1": …, "f2": …}                            several fields in one object: all must match (and)

Types come from the schema (`field → "int" | "float" | "str" | "bool" | "json"`, or a union such as
"int|str" when rows disagree). Numbers match int and float fields alike; strings match str fields and their
ranges compare as text (ISO dates sort correctly); bools match bool fields and have no ranges; "json" fields
(lists, objects) cannot be filtered. A document without the field never matches. Unknown fields, operators or
mistyped values, and values outside the metadata schema (`indexer.runtime.metadata`: integers beyond 64 bits,
NaN or infinities, strings with lone surrogates) raise `FilterError` with the reason (the API turns it into a
422). `and` and `or` are reserved words: a metadata field of that name cannot be filtered.

This module is pure (no SQLite, no FAISS): `Store.filter_ids` runs what `compile_sql` returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from indexer.runtime.metadata import scalar_problem

MAX_DEPTH = 16  # nesting of and/or
MAX_VALUES = 10_000  # values in all `in` lists and comparisons together (SQLite binds at most 32,766)
RANGE_OPS = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
OPS = ("eq", "in", *RANGE_OPS)
Scalar = str | int | float | bool


class FilterError(ValueError):
    """A filter that does not parse or does not fit the metadata schema; the message says why."""


@dataclass(frozen=True)
class Eq:
    field: str
    value: Scalar


@dataclass(frozen=True)
class In:
    field: str
    values: tuple[Scalar, ...]


@dataclass(frozen=True)
class Range:
    field: str
    bounds: tuple[tuple[str, Scalar], ...]  # (op, value), op in RANGE_OPS


@dataclass(frozen=True)
class And:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Or:
    items: tuple[Node, ...]


Node = Eq | In | Range | And | Or


def _kind(v: object) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "str"
    return "null" if v is None else type(v).__name__


def _family(kind: str) -> str:
    return "number" if kind in ("int", "float") else kind


class _Parser:
    def __init__(self, schema: Mapping[str, str]) -> None:
        self.schema = schema
        self.values = 0

    def field_families(self, field: str) -> set[str]:
        if field not in self.schema:
            names = sorted(self.schema)
            known = ", ".join(names[:30]) + (f", … ({len(names)} in all)" if len(names) > 30 else "") \
                or "none: this version has no metadata"
            raise FilterError(f"unknown field {field!r} (fields: {known})")
        families = {_family(k) for k in self.schema[field].split("|")}
        filterable = families - {"json", "null"}
        if not filterable:
            raise FilterError(f"field {field!r} holds {self.schema[field]} values (lists or objects), which "
                              f"cannot be filtered")
        return filterable

    def value(self, field: str, v: object, families: set[str], op: str) -> Scalar:
        kind = _kind(v)
        if kind not in ("bool", "int", "float", "str"):
            raise FilterError(f"{field}: {op} needs a string, number or bool, got {kind}")
        problem = scalar_problem(v)  # the metadata schema's rules: 64-bit integers, finite floats, valid Unicode
        if problem:
            raise FilterError(f"{field}: {op} value: {problem}")
        if _family(kind) not in families:
            article = "an" if kind == "int" else "a"
            raise FilterError(f"{field}: {op} {v!r} is {article} {kind} but the field holds {self.schema[field]}")
        self.values += 1
        if self.values > MAX_VALUES:
            raise FilterError(f"filter has more than {MAX_VALUES} values")
        return v  # type: ignore[return-value]

    def node(self, obj: object, depth: int) -> Node:
        if depth > MAX_DEPTH:
            raise FilterError(f"filter nests and/or deeper than {MAX_DEPTH}")
        if not isinstance(obj, dict) or not obj:
            raise FilterError(f"a filter is a non-empty object, got {_show(obj)}")
        parts: list[Node] = []
        for key, cond in obj.items():
            if key in ("and", "or"):
                if not isinstance(cond, list) or not cond:
                    raise FilterError(f"{key!r} needs a non-empty list of filters, got {_show(cond)}")
                items = tuple(self.node(c, depth + 1) for c in cond)
                parts.append(items[0] if len(items) == 1 else (And(items) if key == "and" else Or(items)))
            else:
                parts.append(self.condition(str(key), cond))
        return parts[0] if len(parts) == 1 else And(tuple(parts))

    def condition(self, field: str, cond: object) -> Node:
        families = self.field_families(field)
        if not isinstance(cond, dict):
            return Eq(field, self.value(field, cond, families, "equality"))
        if not cond:
            raise FilterError(f"{field}: empty condition (use one of {', '.join(OPS)})")
        unknown = [op for op in cond if op not in OPS]
        if unknown:
            raise FilterError(f"{field}: unknown operator {unknown[0]!r} (operators: {', '.join(OPS)})")
        parts: list[Node] = []
        if "eq" in cond:
            parts.append(Eq(field, self.value(field, cond["eq"], families, "eq")))
        if "in" in cond:
            values = cond["in"]
            if not isinstance(values, list) or not values:
                raise FilterError(f"{field}: 'in' needs a non-empty list, got {_show(values)}")
            parts.append(In(field, tuple(self.value(field, v, families, "in") for v in values)))
        bounds = tuple((op, self.value(field, cond[op], families, op)) for op in RANGE_OPS if op in cond)
        if bounds:
            kinds = {_family(_kind(v)) for _, v in bounds}
            if "bool" in kinds:
                raise FilterError(f"{field}: bools have no order (use equality)")
            if len(kinds) > 1:
                raise FilterError(f"{field}: a range mixes numbers and strings")
            parts.append(Range(field, bounds))
        return parts[0] if len(parts) == 1 else And(tuple(parts))


def _show(v: object) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def parse_filter(obj: object, schema: Mapping[str, str]) -> Node:
    """Validate a filter (the JSON value of a request's `filter`) against `schema`; raises `FilterError`."""
    return _Parser(schema).node(obj, 0)


def fields_of(node: Node) -> set[str]:
    if isinstance(node, (And, Or)):
        return set().union(*(fields_of(n) for n in node.items))
    return {node.field}


def _param(v: Scalar) -> Scalar:
    return int(v) if isinstance(v, bool) else v  # the store holds JSON true/false as 1/0 (SQLite's json_each)


def _leaf_sql(node: Eq | In | Range) -> tuple[str, list[Any]]:
    params: list[Any] = [node.field]
    if isinstance(node, Eq):
        where = "value = ?"
        params.append(_param(node.value))
    elif isinstance(node, In):
        where = f"value IN ({','.join('?' * len(node.values))})"
        params += [_param(v) for v in node.values]
    else:
        clauses = []
        for op, v in node.bounds:
            clauses.append(f"value {RANGE_OPS[op]} ?")
            params.append(v)
        # The value column has no type affinity: in SQLite's order every number sorts before every string. A
        # range with one bound would run into the other type; the sentinel '' (the smallest string) stops it.
        numeric = not isinstance(node.bounds[0][1], str)
        if numeric and not any(op in ("lt", "lte") for op, _ in node.bounds):
            clauses.append("value < ''")
        if not numeric and not any(op in ("gt", "gte") for op, _ in node.bounds):
            clauses.append("value >= ''")
        where = " AND ".join(clauses)
    return f"SELECT id FROM doc_meta WHERE key = ? AND {where}", params


def compile_sql(node: Node) -> tuple[str, list[Any]]:
    """One SELECT returning the matching document ids, each once but in no particular order (and = INTERSECT,
    or = UNION of the parts, each an index range scan on (key, value)). The caller sorts: numpy sorts the ids
    of one range scan in half the time SQLite's ORDER BY takes (16 vs 35 ms for 25k of 50k documents)."""
    return _sql(node)


def _sql(node: Node) -> tuple[str, list[Any]]:
    if isinstance(node, (And, Or)):
        parts = [_sql(n) for n in node.items]
        glue = " INTERSECT " if isinstance(node, And) else " UNION "
        return glue.join(f"SELECT id FROM ({s})" for s, _ in parts), [p for _, ps in parts for p in ps]
    return _leaf_sql(node)


def matches(node: Node, metadata: Mapping[str, Any]) -> bool:
    """Whether one document's metadata matches: the reference semantics of the SQL (tests compare the two; a
    caller may use it for a handful of documents)."""
    if isinstance(node, And):
        return all(matches(n, metadata) for n in node.items)
    if isinstance(node, Or):
        return any(matches(n, metadata) for n in node.items)
    if node.field not in metadata:
        return False
    v = metadata[node.field]
    if isinstance(v, (list, dict)) or v is None:
        return False

    def same(a: Any, b: Scalar) -> bool:  # noqa: ANN401
        fa, fb = _family(_kind(a)), _family(_kind(b))
        bools = {fa, fb} <= {"bool", "number"}
        return (fa == fb or bools) and _param(a) == _param(b)

    if isinstance(node, Eq):
        return same(v, node.value)
    if isinstance(node, In):
        return any(same(v, x) for x in node.values)
    numeric = not isinstance(node.bounds[0][1], str)
    if isinstance(v, str) == numeric:
        return False
    cmp = {"gt": lambda a, b: a > b, "gte": lambda a, b: a >= b, "lt": lambda a, b: a < b,
           "lte": lambda a, b: a <= b}
    return all(cmp[op](_param(v), b) for op, b in node.bounds)
