"""Faults of the disk itself, as errors of their own: the disk is full, or it cannot be written (an I/O error, a
failed fsync, a read-only mount).

Whatever writes an index root — the write log's append (`indexer.runtime.writelog`), a build, `indexer compact`
(`IndexRoot.staging`) — turns the errors its writers raise into one of these, naming the file:

    StorageFull         ENOSPC, EDQUOT; SQLite's SQLITE_FULL; FAISS's "write error ... (No space left on device)"
    StorageUnavailable  EIO (a failed write or fsync), EROFS (a read-only mount), EACCES/EPERM; SQLite's
                        SQLITE_IOERR, SQLITE_READONLY, SQLITE_CANTOPEN

so that the caller can say what happened and what to do: the API answers 507 (full) or 503 with Retry-After
(`service.errors`), the `indexer` commands exit 2 with one line naming the file. Nothing here retries: a fault
is reported, what was being written is abandoned whole (a log transaction rolled back, a staging folder
removed), and the next write or build after the fault is gone succeeds without a manual step.

Torch-free, FAISS-free and service-free; `sqlite3` is the standard library's.
"""

from __future__ import annotations

import errno
import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
UNAVAILABLE_ERRNOS = frozenset({errno.EIO, errno.EROFS, errno.EACCES, errno.EPERM})
# SQLite's primary result codes (extended codes carry them in the low byte)
SQLITE_PERM, SQLITE_READONLY, SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN = 3, 8, 10, 13, 14
# what FAISS's C++ writer puts in its message: "write error in PATH: n != m (No space left on device)"
_TEXT_ERRNOS = {"No space left on device": errno.ENOSPC, "Disk quota exceeded": errno.EDQUOT,
                "Input/output error": errno.EIO, "Read-only file system": errno.EROFS}


class StorageError(RuntimeError):
    """The disk refused a write; `path` is the file (or folder) being written, `errno` the cause when known."""

    retry_after_s = 30  # what an API tells its clients: a full disk or a failing one is an operator's to fix

    def __init__(self, message: str, path: Path | str | None = None, code: int | None = None) -> None:
        super().__init__(message)
        self.path = None if path is None else Path(path)
        self.errno = code


class StorageFull(StorageError):
    """No space left on the device (or over a quota): free some, then write again."""


class StorageUnavailable(StorageError):
    """The device cannot be written: an I/O error (a failed fsync included), a read-only mount, no permission."""


def fault_errno(exc: BaseException) -> int | None:
    """The errno of a disk fault behind `exc` (an OSError, a sqlite3 error, FAISS's RuntimeError), else None."""
    if isinstance(exc, OSError) and exc.errno in FULL_ERRNOS | UNAVAILABLE_ERRNOS:
        return exc.errno
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        primary = code & 0xFF if isinstance(code, int) else None
        if primary == SQLITE_FULL or (primary is None and "disk is full" in str(exc)):
            return errno.ENOSPC
        if primary in (SQLITE_IOERR, SQLITE_CANTOPEN) or (primary is None and "disk I/O error" in str(exc)):
            return errno.EIO
        if primary in (SQLITE_READONLY, SQLITE_PERM) or (primary is None and "readonly database" in str(exc)):
            return errno.EROFS
        return None
    if isinstance(exc, RuntimeError) and not isinstance(exc, StorageError):
        for text, code in _TEXT_ERRNOS.items():
            if text in str(exc):
                return code
    return None


def _reason(exc: BaseException, code: int) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    if isinstance(exc, sqlite3.Error):
        return f"{exc} (SQLite {getattr(exc, 'sqlite_errorname', 'error')})"
    match = re.search(r"\(([^()]+)\)\s*$", str(exc))  # FAISS: the strerror in parentheses at the end
    return match.group(1) if match else errno.errorcode.get(code, str(code))


def as_storage_error(exc: BaseException, path: Path | str, doing: str = "writing it", *,
                     within: Path | None = None) -> StorageError | None:
    """`exc` as a StorageFull / StorageUnavailable naming the file (the OSError's own file when it has one, else
    `path`), or None when it is not a fault of the disk — nor one of a file outside `within` (a source file that
    cannot be read is the caller's error, not the disk of the root's)."""
    if isinstance(exc, StorageError):
        return exc
    code = fault_errno(exc)
    if code is None:
        return None
    named = getattr(exc, "filename", None) or path
    if within is not None and not Path(named).is_relative_to(within):
        return None
    reason = _reason(exc, code)
    if code in FULL_ERRNOS:
        return StorageFull(f"no space left on the device for {named} (while {doing}): {reason}; free some space, "
                           f"then try again", named, code)
    what = "the file system is read-only" if code == errno.EROFS else reason
    return StorageUnavailable(f"cannot write {named} (while {doing}): {what}", named, code)


@contextmanager
def storage_errors(path: Path | str, doing: str = "writing it", *, within: Path | None = None) -> Iterator[None]:
    """Re-raise a fault of the disk inside the block as a StorageError naming `path` (other errors pass as they
    are; see `as_storage_error` for `within`)."""
    try:
        yield
    except Exception as exc:
        err = as_storage_error(exc, path, doing, within=within)
        if err is None or err is exc:
            raise
        raise err from exc
