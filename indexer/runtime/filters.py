"""The metadata filter language: parsing and validating a filter against a version's metadata schema, and
compiling it to SQL over the store's `doc_meta (key, value, id)` table, indexed on (key, value, id).

    F := {"field": v}                                 equality (v: string, number or bool)
       | {"field": {"eq": v}} | {"field": {"in": [v, …]}}
       | {"field": {"gt"|"gte"|"lt"|"lte": v, …}}      a range; several bounds in one object all apply
       | {"and": [F, …]} | {"or": [F, …]}
       | {"f1": …, "f2": …}                            several fields in one object: all must match (and)

Types come from the schema (`field → "int" | "float" | "str" | "bool" | "json"`, or a union such as
"int|str" when rows disagree). Numbers match int and float fields alike; strings match str fields and their
ranges compare as text (ISO dates sort correctly); bools match bool fields and have no ranges; a bool is never a
number, even in a field that holds both (true does not match 1 nor a range, 1 does not match true: the
store keeps bools as 1/0, and tells them apart by a scan of the field's metadata, only for such fields); "json" fields
(lists, objects) cannot be filtered. A document without the field (or with null in it) never matches, so a field that
no document holds a value in (none written yet, its last holder deleted, or only nulls) matches nothing, whatever its
value's type, as in Elasticsearch, Qdrant and Chroma: in a live collection the fields are data, and a filter that
worked must not turn into an error when the documents holding its field are deleted. Unknown operators or mistyped
values (for a field some document holds), and values outside the metadata schema (`indexer.runtime.metadata`: integers
beyond 64 bits, NaN or infinities, strings with lone surrogates) raise `FilterError` with the reason (the API turns it
into a 422). `and` and `or` are reserved words: a metadata field of that name cannot be filtered.

This module is pure (no SQLite, no FAISS): `Store.filter_ids` runs what `plan` returns (one statement, or for a
filter wider or deeper than SQLite takes in one, several whose ids it combines).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from indexer.runtime.metadata import json_kind, scalar_problem
from indexer.runtime.passage_rows import PASSAGE_KEY


@dataclass(frozen=True)
class FilterLimits:
    """What a filter may hold: the one definition, checked by `check_limits` at the API's edge (before the
    engine) and again by `parse_filter`, stated in docs/search.md and docs/http-api.md. `Store.filter_ids` runs
    every filter within them (`plan` splits what one SQLite statement cannot hold)."""

    depth: int = 16  # nesting of and/or: 16 lists around the deepest condition
    width: int = 1024  # items of one and/or list, and fields of one object (Elasticsearch's old max_clause_count)
    conditions: int = 1024  # field conditions ({"field": ...}) in the whole filter
    values: int = 10_000  # values of one `in` list, and of every comparison of the filter together


LIMITS = FilterLimits()
RANGE_OPS = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
OPS = ("eq", "in", *RANGE_OPS)
Scalar = str | int | float | bool
_ANY_SCALAR = ("bool", "number", "str")  # the families of the filterable values


class FilterError(ValueError):
    """A filter that does not parse or does not fit the metadata schema; the message says why."""


@dataclass(frozen=True)
class Eq:
    field: str
    value: Scalar
    mixed: bool = False  # the field holds bools and numbers, which the store keeps as 1/0 and numbers


@dataclass(frozen=True)
class In:
    field: str
    values: tuple[Scalar, ...]
    mixed: bool = False  # the field holds bools and numbers, which the store keeps as 1/0 and numbers


@dataclass(frozen=True)
class Range:
    field: str
    bounds: tuple[tuple[str, Scalar], ...]  # (op, value), op in RANGE_OPS
    mixed: bool = False  # the field holds bools and numbers, which the store keeps as 1/0 and numbers


@dataclass(frozen=True)
class And:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Or:
    items: tuple[Node, ...]


Node = Eq | In | Range | And | Or


def _kind(v: object) -> str:
    """The schema's kind of a filter value; lists and objects by their Python name (what a refusal says)."""
    kind = json_kind(v)
    return type(v).__name__ if kind == "json" else kind


def _family(kind: str) -> str:
    return "number" if kind in ("int", "float") else kind


class _Parser:
    def __init__(self, schema: Mapping[str, str]) -> None:
        self.schema = schema

    def held(self, field: str) -> bool:
        """Whether some document holds a value (not null) in `field`."""
        return bool(set(self.schema.get(field, "null").split("|")) - {"null"})

    def field_families(self, field: str) -> set[str]:
        """The value families a filter on `field` may compare with: any, where no document holds a value."""
        if field == PASSAGE_KEY:  # a passage row's own record, never a user's field
            raise FilterError("the passage record is not a metadata field and cannot be filtered")
        if (problem := scalar_problem(field)) is not None:  # a name no document could hold (and SQLite cannot bind)
            raise FilterError(f"field name: {problem}")
        if not self.held(field):
            return set(_ANY_SCALAR)
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
        return v  # type: ignore[return-value]

    def node(self, obj: object, depth: int) -> Node:  # depth: bounded by check_limits, which ran first
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
        # bools told apart from numbers by a scan of the field's rows: only for a field that holds both
        mixed = {"bool", "number"} <= families and self.held(field)
        if not isinstance(cond, dict):
            return Eq(field, self.value(field, cond, families, "equality"), mixed)
        if not cond:
            raise FilterError(f"{field}: empty condition (use one of {', '.join(OPS)})")
        unknown = [op for op in cond if op not in OPS]
        if unknown:
            raise FilterError(f"{field}: unknown operator {unknown[0]!r} (operators: {', '.join(OPS)})")
        parts: list[Node] = []
        if "eq" in cond:
            parts.append(Eq(field, self.value(field, cond["eq"], families, "eq"), mixed))
        if "in" in cond:
            values = cond["in"]
            if not isinstance(values, list) or not values:
                raise FilterError(f"{field}: 'in' needs a non-empty list, got {_show(values)}")
            parts.append(In(field, tuple(self.value(field, v, families, "in") for v in values), mixed))
        bounds = tuple((op, self.value(field, cond[op], families, op)) for op in RANGE_OPS if op in cond)
        if bounds:
            kinds = {_family(_kind(v)) for _, v in bounds}
            if "bool" in kinds:
                raise FilterError(f"{field}: bools have no order (use equality)")
            if len(kinds) > 1:
                raise FilterError(f"{field}: a range mixes numbers and strings")
            parts.append(Range(field, bounds, mixed))
        return parts[0] if len(parts) == 1 else And(tuple(parts))


def _show(v: object) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def check_limits(obj: object, limits: FilterLimits = LIMITS) -> None:
    """Raise `FilterError` when filter `obj` exceeds `limits` (depth, width, conditions, values); needs no schema,
    never recurses deeper than `limits.depth` and leaves every other defect to `parse_filter`."""
    conditions = values = 0

    def walk(node: object, depth: int) -> None:
        nonlocal conditions, values
        if depth > limits.depth:
            raise FilterError(f"filter nests and/or deeper than {limits.depth} levels (the limit)")
        if not isinstance(node, dict):
            return
        if len(node) > limits.width:
            raise FilterError(f"a filter object has {len(node)} fields; the limit is {limits.width}")
        for key, cond in node.items():
            if key in ("and", "or"):
                if isinstance(cond, list):
                    if len(cond) > limits.width:
                        raise FilterError(f"{key!r} has {len(cond)} filters; the limit is {limits.width} (nest "
                                          f"them, or use 'in' for many values of one field)")
                    for item in cond:
                        walk(item, depth + 1)
                continue
            conditions += 1
            if conditions > limits.conditions:
                raise FilterError(f"filter has more than {limits.conditions} field conditions (the limit)")
            if isinstance(cond, dict):
                values += sum(len(v) if op == "in" and isinstance(v, list) else 1 for op, v in cond.items())
            else:
                values += 1
            if values > limits.values:
                raise FilterError(f"filter has more than {limits.values} values (the limit, `in` lists included)")

    walk(obj, 0)


def parse_filter(obj: object, schema: Mapping[str, str]) -> Node:
    """Validate a filter (the JSON value of a request's `filter`) against `LIMITS` and `schema`; raises
    `FilterError`."""
    check_limits(obj)
    return _Parser(schema).node(obj, 0)


def _param(v: Scalar) -> Scalar:
    return int(v) if isinstance(v, bool) else v  # the store holds JSON true/false as 1/0 (SQLite's json_each)


# The documents whose field `key` holds a bool (the store's doc_meta has them as 1/0, like numbers): a scan of the
# metadata, run only for a field holding both bools and numbers, so that the two never match each other's filters
_BOOLS = "SELECT d.id FROM doc_ext d, json_each(d.metadata) j WHERE j.key = ? AND j.type IN ('true', 'false')"


def _leaf_sql(node: Eq | In | Range) -> tuple[str, list[Any]]:
    params: list[Any] = [node.field]
    if isinstance(node, (Eq, In)):
        values = (node.value,) if isinstance(node, Eq) else node.values
        if node.mixed:  # bools among the bools, numbers (and strings) among the rest
            groups = [(g, [v for v in values if isinstance(v, bool) == g]) for g in (True, False)]
            clauses = []
            for is_bool, group in groups:
                if group:
                    clauses.append(f"(value IN ({','.join('?' * len(group))}) AND id {'' if is_bool else 'NOT '}IN "
                                   f"({_BOOLS}))")
                    params += [*map(_param, group), node.field]
            where = f"({' OR '.join(clauses)})"
        elif isinstance(node, Eq):
            where = "value = ?"
            params.append(_param(node.value))
        else:
            where = f"value IN ({','.join('?' * len(values))})"
            params += [_param(v) for v in values]
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
        if node.mixed:  # a bool has no order: never in a range
            clauses.append(f"id NOT IN ({_BOOLS})")
            params.append(node.field)
        where = " AND ".join(clauses)
    return f"SELECT id FROM doc_meta WHERE key = ? AND {where}", params


# SQLite's own limits on one statement: SQLITE_MAX_COMPOUND_SELECT (500 terms in one UNION/INTERSECT chain) and
# its parser's stack, which overflows at 15 nested compound subqueries ("parser stack overflow"); 8 leaves room.
SQL_MAX_TERMS = 500
SQL_MAX_NESTING = 8


@dataclass(frozen=True)
class Sql:
    """One statement returning matching ids, each once, in no particular order."""

    sql: str
    params: list[Any]


@dataclass(frozen=True)
class Combine:
    """Intersect (`and`) or unite (`or`) the ids of its parts: done by the caller, over sorted id arrays."""

    op: str  # "and" | "or"
    parts: tuple[Plan, ...]


Plan = Sql | Combine


def compile_sql(node: Node) -> tuple[str, list[Any]]:
    """One SELECT returning the matching document ids, each once but in no particular order (and = INTERSECT,
    or = UNION of the parts, each an index range scan on (key, value)). The caller sorts: numpy sorts the ids
    of one range scan faster than SQLite's ORDER BY does (docs/decisions.md). Only for
    a node that `fits` one statement; `plan` handles every node."""
    return _sql(node)


def fits(node: Node) -> bool:
    """Whether `compile_sql(node)` stays within SQLite's limits on one statement."""
    return _nesting(node, SQL_MAX_NESTING) <= SQL_MAX_NESTING


def _nesting(node: Node, budget: int) -> int:
    """Nesting of compound SELECTs in `node`'s statement (more than `budget` once past it: the walk stops there);
    a chain wider than SQLite takes counts as past any budget."""
    if not isinstance(node, (And, Or)):
        return 0
    if len(node.items) > SQL_MAX_TERMS or budget <= 0:
        return budget + 1
    return 1 + max(_nesting(n, budget - 1) for n in node.items)


def plan(node: Node) -> Plan:
    """How to run `node`: one statement when it fits, else its and/or split into statements of at most
    `SQL_MAX_TERMS` parts each (the parts too deep split in turn) whose ids the caller combines."""
    if fits(node):
        return Sql(*compile_sql(node))
    assert isinstance(node, (And, Or))  # a leaf always fits
    op, cls = ("and", And) if isinstance(node, And) else ("or", Or)
    parts: list[Plan] = []
    batch: list[Node] = []
    for item in node.items:
        if fits(item) and _nesting(item, SQL_MAX_NESTING) < SQL_MAX_NESTING:  # one more level for the batch
            batch.append(item)
            if len(batch) == SQL_MAX_TERMS:
                parts.append(Sql(*compile_sql(cls(tuple(batch)))))
                batch = []
        else:
            parts.append(plan(item))
    if batch:
        parts.append(Sql(*compile_sql(batch[0] if len(batch) == 1 else cls(tuple(batch)))))
    return parts[0] if len(parts) == 1 else Combine(op, tuple(parts))


def run_plan(step: Plan, select: Callable[[str, list[Any]], np.ndarray]) -> np.ndarray:
    """The sorted ids (int64) a plan matches; `select` runs one statement and returns its ids in any order. An
    `and` stops at its first empty part."""
    if isinstance(step, Sql):
        ids = select(step.sql, step.params)
        if len(ids) > 1 and not (ids[1:] > ids[:-1]).all():  # compound selects come sorted already
            ids.sort()
        return ids
    if step.op == "or":
        return np.unique(np.concatenate([run_plan(p, select) for p in step.parts]))
    out = run_plan(step.parts[0], select)
    for part in step.parts[1:]:
        if not len(out):
            break
        out = np.intersect1d(out, run_plan(part, select), assume_unique=True)
    return out


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

    def same(a: Any, b: Scalar) -> bool:  # noqa: ANN401 (a bool is never a number: true is not 1)
        return _family(_kind(a)) == _family(_kind(b)) and a == b

    if isinstance(node, Eq):
        return same(v, node.value)
    if isinstance(node, In):
        return any(same(v, x) for x in node.values)
    numeric = not isinstance(node.bounds[0][1], str)
    if isinstance(v, str) == numeric or isinstance(v, bool):  # bools have no order
        return False
    cmp = {"gt": lambda a, b: a > b, "gte": lambda a, b: a >= b, "lt": lambda a, b: a < b,
           "lte": lambda a, b: a <= b}
    return all(cmp[op](_param(v), b) for op, b in node.bounds)
