"""Real faults of the machine for the reliability tests: a small filesystem that fills up, an fsync that fails, a
mount that turns read-only.

- `SmallFs`: a size-limited tmpfs mounted for the test (root only: CAP_SYS_ADMIN; the tests that need one skip with
  the reason elsewhere). `fill()` takes every free byte (or all but `leave`) with a filler file, so the next write
  that needs a new block gets ENOSPC from the kernel; `free()` deletes it. `read_only()` / `writable()` remount it
  (Linux refuses a read-only remount while a file on it is open for writing: EBUSY).
- `fsync_shim()`: an LD_PRELOAD library compiled with gcc at test time. In a process started with it, `fsync` and
  `fdatasync` return -1/EIO — without syncing — for a file under `$STRATA_FAULT_FSYNC_PREFIX` while the file
  `$STRATA_FAULT_FSYNC_FLAG` exists, and behave normally otherwise: the test flips the fault on and off by creating
  and deleting the flag, with the process running. SQLite's WAL commits and Python's `os.fsync` both go through
  libc's symbols, which the preload interposes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

SHIM_SOURCE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failing(int fd) {
    const char *flag = getenv("STRATA_FAULT_FSYNC_FLAG");
    const char *prefix = getenv("STRATA_FAULT_FSYNC_PREFIX");
    char link[64], target[4096];
    ssize_t n;
    if (flag == NULL || access(flag, F_OK) != 0) return 0;
    if (prefix == NULL) return 1;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    n = readlink(link, target, sizeof target - 1);
    if (n < 0) return 0;
    target[n] = 0;
    return strncmp(target, prefix, strlen(prefix)) == 0;
}

int fsync(int fd) {
    static int (*real)(int);
    if (failing(fd)) { errno = EIO; return -1; }
    if (real == NULL) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    return real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (failing(fd)) { errno = EIO; return -1; }
    if (real == NULL) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    return real(fd);
}
"""


def fsync_shim(folder: Path) -> Path:
    """Compile the fsync-failing preload library into `folder`; skips the test without gcc."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("no C compiler (gcc) to build the fsync-failing LD_PRELOAD shim")
    src, lib = folder / "fsync_eio.c", folder / "fsync_eio.so"
    src.write_text(SHIM_SOURCE)
    r = subprocess.run([gcc, "-shared", "-fPIC", "-O1", "-o", str(lib), str(src), "-ldl"], capture_output=True,
                       text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot compile the fsync shim: {r.stderr.strip()[:300]}")
    return lib


def shim_env(lib: Path, flag: Path, prefix: Path) -> dict[str, str]:
    """The environment of a process whose fsyncs under `prefix` fail while `flag` exists."""
    return {"LD_PRELOAD": str(lib), "STRATA_FAULT_FSYNC_FLAG": str(flag), "STRATA_FAULT_FSYNC_PREFIX": str(prefix)}


class SmallFs:
    """A size-limited tmpfs at `path`, mounted for one test."""

    def __init__(self, path: Path, size: str) -> None:
        self.path, self.size = path, size
        self.filler = path / ".filler"

    def fill(self, leave: int = 0) -> None:
        """Take all free space but `leave` bytes; with `leave` 0, until a write gets ENOSPC."""
        self.free()
        st = os.statvfs(self.path)
        free = st.f_bavail * st.f_frsize
        with open(self.filler, "wb") as fh:
            if free > leave:
                os.posix_fallocate(fh.fileno(), 0, free - leave)
            if leave == 0:
                with contextlib.suppress(OSError):
                    while True:  # the last partial blocks: write until the kernel says ENOSPC
                        os.write(fh.fileno(), b"\0" * 4096)

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def available(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def read_only(self) -> None:
        subprocess.run(["mount", "-o", "remount,ro", str(self.path)], check=True, capture_output=True)

    def writable(self) -> None:
        subprocess.run(["mount", "-o", "remount,rw", str(self.path)], check=True, capture_output=True)


@contextlib.contextmanager
def small_fs(path: Path, size: str = "16m") -> Iterator[SmallFs]:
    """Mount a tmpfs of `size` at `path` for the block; skips the test where mounting is not permitted."""
    if os.geteuid() != 0:
        pytest.skip("mounting a size-limited tmpfs needs root (CAP_SYS_ADMIN); CI runs these tests as root")
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or r.returncode}): the disk-full tests need one")
    try:
        yield SmallFs(path, size)
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(path)], capture_output=True)
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)  # a process still holds a file
