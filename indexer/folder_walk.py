"""The files of a folder of documents (`indexer build --data FOLDER`), and every entry left out, named with its
reason.

Walked recursively in path order, every folder reached without a symlink before any reached through one (a file
keeps its own path, its id, whatever links to its folder). Read: regular files of a known kind (`KINDS`), and
symlinks to them whose target lies inside the folder. Left out, each named once with its reason (`Skip`): an
unknown extension, a dangling symlink, a symlink out of the folder (followed with `follow_symlinks`), a symlink
loop, a symlink to a folder already read, a FIFO, socket or device, a subfolder that cannot be listed, a PDF over
the size limit (`indexer.doc_limits`). Hidden entries (a
name starting with ".") are left out too and named at their top (".git: hidden" once, not each file in it).
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from indexer.doc_limits import MAX_PDF_BYTES

KINDS = {".md": "md", ".markdown": "md", ".html": "html", ".htm": "html", ".pdf": "pdf", ".txt": "txt"}


@dataclass(frozen=True)
class Skip:
    path: str  # relative to the folder, POSIX separators
    reason: str


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


def _special(mode: int) -> str | None:
    if stat.S_ISFIFO(mode):
        return "a FIFO, not a regular file"
    if stat.S_ISSOCK(mode):
        return "a socket, not a regular file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device, not a regular file"
    return None


class _Walk:
    def __init__(self, folder: Path, follow_symlinks: bool) -> None:
        self.folder = folder
        self.real = Path(os.path.realpath(folder))
        self.follow = follow_symlinks
        self.files: list[Path] = []
        self.skipped: list[Skip] = []
        self.seen_dirs: dict[tuple[int, int], Path] = {}  # (device, inode) → the path it was read under
        self.linked_dirs: list[Path] = []  # symlinks to folders: read after every folder reached without one

    def rel(self, path: Path) -> str:
        return path.relative_to(self.folder).as_posix()

    def skip(self, path: Path, reason: str) -> None:
        self.skipped.append(Skip(self.rel(path), reason))

    def walk(self, folder: Path) -> None:
        try:
            st = os.stat(folder)
            key = (st.st_dev, st.st_ino)
            if key in self.seen_dirs:
                self.skip(folder, self.already_read(folder, self.seen_dirs[key]))
                return
            self.seen_dirs[key] = folder
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            self.skip(folder, f"cannot list: {exc.strerror or exc}")
            return
        for entry in entries:
            self.entry(Path(entry.path), entry)

    def already_read(self, link: Path, read_as: Path) -> str:
        if read_as == link.parent or read_as in link.parents:
            return "a symlink loop (its folder is already read)"
        return f"a symlink to a folder already read (as {self.rel(read_as)})"

    def entry(self, path: Path, entry: os.DirEntry[str]) -> None:
        if entry.name.startswith("."):
            self.skip(path, "hidden (a name starting with '.')")
            return
        try:
            link = entry.is_symlink()
            st = os.stat(path)  # the target's, for a symlink
        except OSError as exc:
            if link and exc.errno == errno.ELOOP:
                self.skip(path, f"a symlink loop (to {os.readlink(path)}, which never reaches a file or folder)")
            else:
                self.skip(path, f"a dangling symlink (to {os.readlink(path)})" if link else
                          f"cannot read: {exc.strerror or exc}")
            return
        if link:
            target = Path(os.path.realpath(path))
            if not (target == self.real or self.real in target.parents) and not self.follow:
                self.skip(path, f"a symlink out of the folder (to {target}); --follow-symlinks follows it")
                return
        if stat.S_ISDIR(st.st_mode):
            if link:  # a folder's own path wins over a link's: its files keep their ids whatever links to it
                self.linked_dirs.append(path)
            else:
                self.walk(path)
            return
        special = _special(st.st_mode)
        kind = KINDS.get(path.suffix.lower())
        if special is not None:
            self.skip(path, special)
        elif kind is None:
            self.skip(path, f"not a document kind ({path.suffix or 'no extension'}; read: "
                            f"{', '.join(sorted(set(KINDS)))})")
        elif kind == "pdf" and st.st_size > MAX_PDF_BYTES:
            self.skip(path, f"too large: {_mib(st.st_size)}, past the {_mib(MAX_PDF_BYTES)} limit for a PDF")
        else:
            self.files.append(path)


def walk_folder(folder: Path, *, follow_symlinks: bool = False) -> tuple[list[Path], list[Skip]]:
    """(the files to read in path order, the entries left out with their reasons)."""
    w = _Walk(folder, follow_symlinks)
    w.walk(folder)
    while w.linked_dirs:
        w.walk(w.linked_dirs.pop(0))
    return (sorted(w.files, key=lambda f: f.relative_to(folder).parts),
            sorted(w.skipped, key=lambda s: s.path.split("/")))
