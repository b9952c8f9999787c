"""A file the gateway reads again when it changes: the tokens file, the policy file, and the
TLS certificate and key (Kubernetes Secrets mounted as files are swapped by a symlink rename).

The check is one `stat` per use, which costs about a microsecond: cheap enough for every call,
so a change applies to the next call without a timer. A file that becomes invalid is logged
(by path, never by content: it holds credentials) and the last good version stays in use.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from muster.api import load_yaml
from muster.api.files import read_regular

log = logging.getLogger(__name__)

T = TypeVar("T")
MAX_FILE_BYTES = 16 * 1024 * 1024  # a tokens or policy file larger than this is a mistake

Version = tuple[int, int, int, int]  # device, inode, mtime ns, size


class FileError(ValueError):
    """A file cannot be read or parsed; the message names the file and the problem."""


def read_file(path: str) -> bytes:
    """The bytes of `path`; FileError when unreadable, not a regular file, or over
    MAX_FILE_BYTES (`muster.api.files`: a pipe put in the file's place blocked the open, and
    with it the reload and every call waiting for the reload, the whole gateway)."""
    try:
        return read_regular(path, max_bytes=MAX_FILE_BYTES)
    except OSError as exc:
        raise FileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise FileError(f"{path}: {exc}") from None


def yaml_document(data: bytes, *, source: str) -> Any:
    """The one YAML document in `data`; FileError naming only the line (these files hold
    credentials: a parser's message would quote them)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise FileError(f"{source}: (file): not UTF-8") from None
    documents, problem = load_yaml(text, source=source)  # muster's bounded reader
    if problem is not None:
        raise FileError(f"{source}: {problem.path}: invalid YAML")
    if len(documents) > 1:
        raise FileError(f"{source}: (file): holds {len(documents)} YAML documents, expected one")
    return documents[0] if documents else None


def version_of(path: str) -> Version | None:
    """What changes when the file does (None when it cannot be stat-ed)."""
    found = stat_of(path)
    return None if isinstance(found, str) else found


def stat_of(path: str) -> Version | str:
    """What changes when the file does, or why it cannot be stat-ed."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return str(exc.strerror or exc)
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


class ReloadingFile(Generic[T]):
    """`current()` is `parse(bytes of path)`, parsed again whenever the file changes.

    The first read happens in the constructor and raises FileError (or what `parse` raises, a
    ValueError) so a bad file stops the gateway at start; later failures keep the last value.
    """

    def __init__(
        self,
        path: str,
        parse: Callable[[bytes], T],
        *,
        what: str,
        refuse: Callable[[T, T], str] | None = None,
    ) -> None:
        """`refuse(last, new)`: why a version read again must not replace the last good one
        ("" when it may), for a value valid at start but not as a change."""
        self.path = path
        self.what = what
        self._parse = parse
        self._refuse = refuse
        self._version: Version | str = stat_of(path)
        self._value = self._load()
        self.reloads = 0  # successful reloads after the first read, for tests and logs
        # Calls read it on gRPC's threads (loop_server): one of them reloads, the others wait;
        # under aio_server, on the loop, where they take turns anyway.
        self._reloading = threading.Lock()

    def _load(self) -> T:
        data = read_file(self.path)
        try:
            return self._parse(data)
        except ValueError as exc:
            raise FileError(f"{self.what} {self.path}:\n{exc}") from None

    def current(self) -> T:
        version = stat_of(self.path)
        if version == self._version:
            return self._value
        with self._reloading:
            if version == self._version:
                return self._value  # another call has just read it
            if isinstance(version, str):  # gone, a symlink loop: said once, until it is back
                log.error("keeping the last good %s: %s: %s", self.what, self.path, version)
            else:
                self._reload()
            self._version = version
        return self._value

    def _reload(self) -> None:
        try:
            value = self._load()
            refused = self._refuse(self._value, value) if self._refuse else ""
            if refused:
                raise FileError(f"{self.what} {self.path}:\n{refused}")
        except ValueError as exc:
            log.error("keeping the last good %s: %s", self.what, exc)
        else:
            self._value = value
            self.reloads += 1
            log.info("reloaded %s %s", self.what, self.path)
