"""The metadata schema (`indexer.runtime.metadata`): its edges, its messages, and the repair of stored values that
break it (what `service.responses` sends when orjson refuses an answer)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import orjson
import pytest

from indexer.runtime.metadata import (
    INT64_MAX,
    INT64_MIN,
    MAX_BYTES,
    MAX_DEPTH,
    MetadataError,
    check_metadata,
    json_safe,
    metadata_json,
)


def nested(levels: int, leaf: object = 1) -> object:
    value = leaf
    for _ in range(levels):
        value = [value]
    return value


def test_the_edges_of_the_schema_are_accepted() -> None:
    meta = {"lo": INT64_MIN, "hi": INT64_MAX, "f": -1.5e308, "s": "é \U0001f600", "b": False, "n": None,
            "deep": nested(MAX_DEPTH - 1), "obj": {"": 1, "k": [{"x": "y"}]}, "fill": "x" * (MAX_BYTES - 400)}
    check_metadata(meta)
    assert json.loads(metadata_json(meta)) == meta
    orjson.dumps({"results": [{"hits": [{"metadata": meta}]}]})  # what /search sends: orjson takes it


@pytest.mark.parametrize(("meta", "message"), [
    ({"x": INT64_MAX + 1}, "metadata field 'x': integer 9223372036854775808 does not fit in 64 bits"),
    ({"x": INT64_MIN - 1}, "metadata field 'x': integer -9223372036854775809 does not fit in 64 bits"),
    ({"a": {"b": [0, 10**30]}}, "metadata field 'a.b[1]': integer 1000000000000000000000000000000 does not fit"),
    ({"x": float("nan")}, "metadata field 'x': nan is not a finite number"),
    ({"x": [float("-inf")]}, "metadata field 'x[0]': -inf is not a finite number"),
    ({"x": "a\ud800"}, "metadata field 'x': string 'a\\ud800' is not valid Unicode (it holds a lone surrogate)"),
    ({"x": {"\udc00": 1}}, "metadata field name '\\udc00' in 'x' is not valid Unicode"),
    ({"\ud800": 1}, "metadata field name '\\ud800' in 'metadata' is not valid Unicode"),
    ({"d": nested(MAX_DEPTH)}, f"metadata field 'd' nests deeper than {MAX_DEPTH} levels"),
    ({"d": {"e": nested(5000)}}, f"metadata field 'd' nests deeper than {MAX_DEPTH} levels"),  # no RecursionError
    ({"s": "x" * MAX_BYTES}, f"metadata is {MAX_BYTES + 8:,} bytes as JSON; the limit is {MAX_BYTES:,}"),
    ({"": 1}, "metadata field names must not be empty or blank"),
    ({"x": {1, 2}}, "metadata field 'x' holds a set, which JSON cannot hold"),
    ([1], "metadata must be a JSON object, got list"),
])
def test_values_outside_the_schema_are_refused_naming_the_field(meta: Any, message: str) -> None:  # noqa: ANN401
    with pytest.raises(MetadataError) as info:
        check_metadata(meta)
    assert message in str(info.value)
    str(info.value).encode("utf-8")  # the message itself is valid Unicode: it goes into a JSON 422


def test_json_safe_repairs_what_encoders_refuse_and_keeps_the_rest() -> None:
    vec = np.arange(3, dtype=np.float32)
    content = {"hits": [{"id": "p", "score": np.float32(0.5), "metadata": {
        "big": 2**64, "neg": -(10**30), "ok": 7, "nan": float("nan"), "s": "a\ud800b", "\udfff": 1,
        "deep": nested(300)}}], "vectors": vec}
    safe, notes = json_safe(content)
    meta = safe["hits"][0]["metadata"]
    assert meta["big"] == "18446744073709551616" and meta["neg"] == "-" + "1" + "0" * 30 and meta["ok"] == 7
    assert meta["nan"] is None and meta["s"] == "a\ufffdb" and meta["\ufffd"] == 1
    out = orjson.loads(orjson.dumps(safe, option=orjson.OPT_SERIALIZE_NUMPY))
    assert out["vectors"] == [0.0, 1.0, 2.0] and out["hits"][0]["score"] == 0.5
    depth, d = 0, out["hits"][0]["metadata"]["deep"]
    while isinstance(d, list):
        depth, d = depth + 1, d[0]
    assert d is None and 200 < depth < 250  # cut where orjson would stop, and only there
    assert len(notes) == 6 and any("hits[0].metadata.big" in n for n in notes)
    assert json_safe({"a": [1, "x", None]}) == ({"a": [1, "x", None]}, [])
