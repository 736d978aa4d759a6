"""The one publish step of every build (build, the Ray build, `--add`, compact, shard): a version already sealed in
`versions/` made current, with a warning when it holds much fewer documents than the one it replaces
(`indexer.runtime.shrink_guard`), and the oldest versions pruned.
"""

from __future__ import annotations

import logging

from indexer.runtime.layout import IndexRoot
from indexer.runtime.manifest import Manifest, ManifestError
from indexer.runtime.shrink_guard import max_shrink, shrink_message, shrinks_too_much

log = logging.getLogger(__name__)


def warn_if_shrinking(root: IndexRoot, new_docs: int) -> str | None:
    """Log (and return) a warning when `new_docs` is much fewer than the current version's documents."""
    current = root.current_version()
    if current is None:
        return None
    try:
        served = Manifest.load(root.version_dir(current)).index.ntotal
    except ManifestError:
        return None
    limit = max_shrink()
    if not shrinks_too_much(served, new_docs, limit):
        return None
    message = shrink_message(current, served, new_docs, limit)
    log.warning("%s", message)
    return message


def publish(root: IndexRoot, manifest: Manifest, keep: int) -> str | None:
    """The one publish step of every build (build, the Ray build, add, compact), for a version already sealed in
    `versions/`: warn when it holds much fewer documents than the served one, point `current` at it (atomically),
    and prune the oldest versions beyond `keep`. Returns the shrink warning, if any."""
    warning = warn_if_shrinking(root, manifest.index.ntotal)
    root.set_current(manifest.version)
    root.prune(keep)
    return warning
