"""The one way ppconf writes a file: never through a link, whole or not at all, and never over a
file it did not write unless asked (``--force``).

- **No link followed.** The folders from the output root down to the file are opened one at a
  time with ``O_NOFOLLOW`` (made when missing), and every file is then created, replaced or
  appended to relative to its folder's descriptor: a symbolic link planted at the file, or at
  any folder between the root and it, is refused; its target is never touched. ``--force`` does
  not change that: a link is never replaced either.
- **Atomic.** A replaced file is written to a fresh temporary file beside it (``O_EXCL``), synced,
  and renamed over the old one: a reader, or a resume after a kill, sees the old file or the new.
- **Only its own files replaced.** Each folder ppconf writes into keeps ``.ppconf-owned``, a JSON
  object ``{"format": 1, "files": {NAME: [[SIZE, SHA256], ...]}}``: for each file ppconf wrote
  there, the size and digest of the content it wrote. An existing file counts as ppconf's own
  (a report rendered again, a resumed run's results appended, a golden recorded again, a
  reference copied again) only while its content is that recorded content; for an append, while
  the recorded content is its beginning (a run killed mid-line may have added a torn line
  after it). Any other file (hand-written, edited since, shipped, or the manifest lost) is left
  as it is with a ``WriteRefused`` naming it, unless the caller passes ``force``. A read-only
  file is left as it is too, owned or not. While a file is being replaced the manifest accepts
  both its old and its new content, so a kill at any step leaves the file owned. Writers of
  one folder take turns (``flock`` on the folder).
- **Streams** (a launch's log, a score tool's output, the CI's job summary) are bytes that
  another process writes: ``open_stream`` opens one without following a link and records
  nothing; what is in them is not ppconf's to vouch for.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

MANIFEST = ".ppconf-owned"
_FORMAT = 1
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # a FIFO planted there does not block
_MANIFEST_MAX = 16 << 20

FORCE_HINT = "--force replaces it"


class WriteRefused(ValueError):
    """A write ppconf will not do, or could not do: the message names the path and why."""


def write_text(path: Path, text: str, *, force: bool = False, root: Path | None = None) -> Path:
    """Replace (or create) the file ``path`` with ``text`` as UTF-8 (a character UTF-8 cannot hold,
    a lone surrogate, written as its escape). ``root``: the output folder, from which no folder
    down to ``path`` may be a link (default: ``path``'s own folder)."""
    return write_bytes(path, text.encode("utf-8", errors="backslashreplace"), force=force, root=root)


def write_json(path: Path, data: Any, *, force: bool = False, root: Path | None = None) -> Path:
    """``data`` as indented JSON, as ``write_text`` writes it."""
    return write_text(path, json.dumps(data, indent=2, default=str), force=force, root=root)


def write_bytes(
    path: Path, data: bytes, *, force: bool = False, root: Path | None = None, mode: int | None = None
) -> Path:
    """Replace (or create) the file ``path`` with ``data``, atomically; ``mode``: its permission
    bits (default: as an ordinary write would create it)."""
    path = Path(path)
    with _folder(path, root) as folder, _turn(folder):
        owned = _check(folder, path, force, append=False)
        entry = [len(data), _sha256(data)]
        manifest = _read_manifest(folder)
        manifest[path.name] = [*(manifest.get(path.name, []) if owned else []), entry]
        _write_manifest(folder, path, manifest)
        tmp = f".{path.name}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=folder)
            try:
                if mode is not None:
                    os.fchmod(fd, mode)
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path.name, src_dir_fd=folder, dst_dir_fd=folder)
            os.fsync(folder)
        except OSError as err:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=folder)
            raise WriteRefused(f"{path}: {err.strerror}") from None
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=folder)
            raise
        manifest[path.name] = [entry]
        _write_manifest(folder, path, manifest)
    return path


def append_text(path: Path, text: str, *, force: bool = False, root: Path | None = None) -> Path:
    """Add ``text`` at the end of the file ``path`` (made if missing), synced; the file must be
    one ppconf wrote (by this function or ``write_text``), unless ``force``."""
    path = Path(path)
    data = text.encode("utf-8", errors="backslashreplace")
    with _folder(path, root) as folder, _turn(folder):
        _check(folder, path, force, append=True)
        _in_place(folder, path, os.O_APPEND | os.O_CREAT, lambda fd: _write_all(fd, data))
    return path


def truncate(path: Path, size: int, *, force: bool = False, root: Path | None = None) -> Path:
    """Cut the file ``path`` (one ppconf appended to, unless ``force``) to its first ``size`` bytes:
    a torn last line dropped so later appends start on a fresh line."""
    path = Path(path)
    with _folder(path, root) as folder, _turn(folder):
        _check(folder, path, force, append=True)
        _in_place(folder, path, 0, lambda fd: os.ftruncate(fd, size))
    return path


def _in_place(folder: int, path: Path, flags: int, change: Callable[[int], object]) -> None:
    """Open ``path`` in ``folder`` for writing (never through a link; ``flags`` added), apply
    ``change`` to its descriptor, sync it, and record what it now holds in the manifest."""
    try:
        fd = os.open(path.name, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC | flags, 0o666, dir_fd=folder)
        try:
            _regular(fd, path)
            change(fd)
            os.fsync(fd)
        finally:
            os.close(fd)
        entry = _entry_of(folder, path.name)
    except OSError as err:
        raise WriteRefused(f"{path}: {err.strerror}") from None
    manifest = _read_manifest(folder)
    manifest[path.name] = [entry]
    _write_manifest(folder, path, manifest)


def open_stream(path: Path, *, append: bool = True, root: Path | None = None) -> BinaryIO:
    """``path`` opened for a process to write into (its log): made if missing, appended to or
    (``append=False``) emptied, never through a link, and only if it is a regular file."""
    path = Path(path)
    with _folder(path, root) as folder:
        # O_NONBLOCK: a FIFO planted there is refused, not waited on
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        try:
            fd = os.open(path.name, flags | (os.O_APPEND if append else 0), 0o666, dir_fd=folder)
        except OSError as err:
            raise WriteRefused(_why(path, err)) from None
        try:
            _regular(fd, path)
            os.set_blocking(fd, True)
            if not append:
                os.ftruncate(fd, 0)
        except BaseException:
            os.close(fd)
            raise
    return os.fdopen(fd, "ab" if append else "wb")


def make_dir(path: Path, root: Path | None = None) -> Path:
    """The folder ``path``, made if missing, with no link between ``root`` (default: ``path``
    itself) and it."""
    path = Path(path)
    fd = _open_folder(path, path if root is None else root)
    os.close(fd)
    return path


def check(path: Path, *, force: bool = False, root: Path | None = None) -> Path:
    """``path`` if ``write_text`` would write it (before work that ends in writing it), else
    WriteRefused; its folders are made."""
    path = Path(path)
    with _folder(path, root) as folder, _turn(folder):
        _check(folder, path, force, append=False)
    return path


def adopt(path: Path) -> bool:
    """Record the regular file ``path``, as it is now, as ppconf's own (a run directory another
    writer made, resumed with ``--force``); False when there is no such file (or a link)."""
    path = Path(path)
    with _folder(path, None) as folder, _turn(folder):
        try:
            st = os.stat(path.name, dir_fd=folder, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):
                return False
            entry = _entry_of(folder, path.name)
        except OSError:
            return False
        manifest = _read_manifest(folder)
        manifest[path.name] = [entry]
        _write_manifest(folder, path, manifest)
    return True


def owns(path: Path) -> bool:
    """Whether ``path`` is a file ppconf wrote, as its folder's manifest records it."""
    path = Path(path)
    try:
        folder = os.open(path.parent, _DIR)
    except OSError:
        return False
    try:
        return _owned(folder, path.name, _read_manifest(folder).get(path.name, []), append=False)
    finally:
        os.close(folder)


@contextlib.contextmanager
def _folder(path: Path, root: Path | None) -> Iterator[int]:
    if not path.name or path.name in (".", "..", MANIFEST):
        raise WriteRefused(f"{path}: not a file name ppconf writes")
    fd = _open_folder(path.parent, path.parent if root is None else root)
    try:
        yield fd
    finally:
        os.close(fd)


def _open_folder(directory: Path, root: Path) -> int:
    """A descriptor of ``directory``, made if missing, reached from ``root`` one folder at a time
    without following a link (``root`` itself must not be a link either)."""
    directory, root = Path(os.path.abspath(directory)), Path(os.path.abspath(root))
    if directory != root and root not in directory.parents:
        raise WriteRefused(f"{directory} is outside the output folder {root}")
    if root.is_symlink():
        raise WriteRefused(f"{root} is a symbolic link; ppconf writes nothing through it")
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd = os.open(root, _DIR)
    except OSError as err:
        raise WriteRefused(_why(root, err)) from None
    at = root
    for part in directory.relative_to(root).parts:
        at = at / part
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o777, dir_fd=fd)
            inner = os.open(part, _DIR, dir_fd=fd)
        except OSError as err:
            os.close(fd)
            raise WriteRefused(_why(at, err)) from None
        os.close(fd)
        fd = inner
    return fd


def _why(path: Path, err: OSError) -> str:
    if err.errno == errno.ENXIO:
        return f"{path} is not a regular file; ppconf leaves it as it is"
    if err.errno in (errno.ELOOP, errno.ENOTDIR) and path.is_symlink():
        return f"{path} is a symbolic link; ppconf writes nothing through it"
    if err.errno in (errno.ENOTDIR, errno.EEXIST):
        return f"{path} exists and is not a directory"
    if err.errno == errno.EISDIR:
        return f"{path} is a directory, not a file ppconf can write"
    return f"{path}: {err.strerror}"


@contextlib.contextmanager
def _turn(folder: int) -> Iterator[None]:
    fcntl.flock(folder, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(folder, fcntl.LOCK_UN)


def _check(folder: int, path: Path, force: bool, append: bool) -> bool:
    """Whether ``path`` may be written (refused with WriteRefused otherwise); True when it
    exists and is ppconf's own."""
    try:
        st = os.stat(path.name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return False
    except OSError as err:
        raise WriteRefused(_why(path, err)) from None
    if stat.S_ISLNK(st.st_mode):
        raise WriteRefused(f"{path} is a symbolic link; ppconf writes nothing through it and leaves it as it is")
    if stat.S_ISDIR(st.st_mode):
        raise WriteRefused(f"{path} is a directory, not a file ppconf can write")
    if not stat.S_ISREG(st.st_mode):
        raise WriteRefused(f"{path} is not a regular file; ppconf leaves it as it is")
    if force:
        return False
    if not st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
        raise WriteRefused(f"{path} is read-only; ppconf leaves it as it is ({FORCE_HINT})")
    if not _owned(folder, path.name, _read_manifest(folder).get(path.name, []), append):
        raise WriteRefused(
            f"{path} exists and is not a file ppconf wrote (or it was changed since); ppconf leaves it as it is "
            f"({FORCE_HINT}, or write elsewhere)"
        )
    return True


def _owned(folder: int, name: str, entries: list[list[Any]], append: bool) -> bool:
    if not entries:
        return False
    try:
        fd = os.open(name, _READ, dir_fd=folder)
    except OSError:
        return False
    try:
        size = os.fstat(fd).st_size
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        for want, digest in entries:
            if (size == want or (append and size > want)) and _digest(fd, want) == digest:
                return True
        return False
    finally:
        os.close(fd)


def _entry_of(folder: int, name: str) -> list[Any]:
    fd = os.open(name, _READ, dir_fd=folder)
    try:
        size = os.fstat(fd).st_size
        return [size, _digest(fd, size)]
    finally:
        os.close(fd)


def _digest(fd: int, size: int) -> str:
    h = hashlib.sha256()
    at = 0
    while at < size:
        chunk = os.pread(fd, min(1 << 20, size - at), at)
        if not chunk:
            break
        h.update(chunk)
        at += len(chunk)
    return h.hexdigest()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_manifest(folder: int) -> dict[str, list[list[Any]]]:
    """The folder's manifest; {} (nothing owned) when it is missing, a link, or not one ppconf
    wrote in this format."""
    try:
        fd = os.open(MANIFEST, _READ, dir_fd=folder)
    except OSError:
        return {}
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return {}
        raw = os.pread(fd, _MANIFEST_MAX, 0)
    finally:
        os.close(fd)
    try:
        data = json.loads(raw)
    except ValueError:
        return {}
    files = data.get("files") if isinstance(data, dict) and data.get("format") == _FORMAT else None
    if not isinstance(files, dict):
        return {}
    return {
        name: [e for e in entries if _is_entry(e)]
        for name, entries in files.items()
        if isinstance(name, str) and isinstance(entries, list)
    }


def _is_entry(e: Any) -> bool:
    return (
        isinstance(e, list)
        and len(e) == 2
        and isinstance(e[0], int)
        and not isinstance(e[0], bool)
        and isinstance(e[1], str)
    )


def _write_manifest(folder: int, path: Path, files: dict[str, list[list[Any]]]) -> None:
    data = json.dumps({"format": _FORMAT, "files": files}, sort_keys=True).encode()
    tmp = f".{MANIFEST}.{secrets.token_hex(4)}.tmp"
    try:
        if stat.S_ISLNK(_lstat_mode(folder, MANIFEST)) or stat.S_ISDIR(_lstat_mode(folder, MANIFEST)):
            raise WriteRefused(f"{path.parent / MANIFEST} is not ppconf's manifest; ppconf leaves it as it is")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=folder)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, MANIFEST, src_dir_fd=folder, dst_dir_fd=folder)
    except OSError as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=folder)
        raise WriteRefused(f"{path.parent / MANIFEST}: {err.strerror}") from None


def _lstat_mode(folder: int, name: str) -> int:
    try:
        return os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return stat.S_IFREG


def _regular(fd: int, path: Path) -> None:
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        raise WriteRefused(f"{path} is not a regular file; ppconf leaves it as it is")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
