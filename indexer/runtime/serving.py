"""The serving record: the version of an index root that an API last swapped in (it passed the swap gates), and the
versions the gates refused, with why. It is kept on disk so that a restart — after a crash, or `restart:
unless-stopped` — serves what passed and never what was refused: `current` is what builds publish, this record is
what the API accepted.

    ROOT/serving.json   {"served": "<version>", "refused": {"<version>": {"kind": …, "reason": …, "at": …}}}

Written atomically by the API (`service.engine.swap`) after every swap and every refusal that is a verdict on the
version itself (kinds in `VERDICTS`; a write log that could not be read is not the version's fault and is tried
again). A refusal stays until a version at least as new passes the gates (then every older refusal is dropped) or
an operator forces it (`POST /admin/reload?force=true`). `IndexRoot.prune` never deletes the served version. An API
whose index root is read-only keeps the record in `STRATA_STATE_DIR` instead (`<collection>.serving.json`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path

from indexer.runtime.atomic import write_json_atomic

log = logging.getLogger(__name__)

RECORD = "serving.json"
# refusals that judge the version itself (a mismatch judges the pairing with the configured encoder: not kept)
VERDICTS = frozenset({"corrupt", "probe", "quality", "shrink"})


@dataclass(frozen=True)
class RefusalRecord:
    kind: str
    reason: str
    at: str  # ISO 8601, UTC


@dataclass
class ServingRecord:
    path: Path
    served: str | None = None
    refused: dict[str, RefusalRecord] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> ServingRecord:
        """The record at `path`; an empty one when there is none. One that cannot be read is logged and treated as
        empty (it is rewritten whole at the next swap)."""
        try:
            raw = json.loads(path.read_text())
            refused = {str(v): RefusalRecord(str(r["kind"]), str(r["reason"]), str(r["at"]))
                       for v, r in (raw.get("refused") or {}).items()}
            served = raw.get("served")
            return cls(path, str(served) if served else None, refused)
        except FileNotFoundError:
            return cls(path)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.error("serving record %s cannot be read (%s): starting without it", path, exc)
            return cls(path)

    def save(self) -> bool:
        """Write the record atomically; False (logged) when it cannot be written (a read-only root: see
        `STRATA_STATE_DIR`)."""
        try:
            write_json_atomic(self.path, {"served": self.served,
                                          "refused": {v: asdict(r) for v, r in sorted(self.refused.items())}})
            return True
        except OSError as exc:
            log.error("cannot write the serving record %s (%s): a restart will not remember what was served or "
                      "refused (set STRATA_STATE_DIR to a writable folder)", self.path, exc)
            return False

    def passed(self, version: str) -> None:
        """`version` is served: refusals of it and of every older version no longer apply."""
        self.served = version
        self.refused = {v: r for v, r in self.refused.items() if v > version}

    def refuse(self, version: str, kind: str, reason: str, at: str) -> None:
        self.refused[version] = RefusalRecord(kind, reason, at)


def served_in(root: Path) -> str | None:
    """The version the record in `root` says is served (what pruning keeps), or None."""
    return ServingRecord.load(root / RECORD).served if (root / RECORD).exists() else None
