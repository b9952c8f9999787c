"""Just enough HTTP/1.1 for Kubernetes clients: keep-alive requests with Content-Length or
chunked bodies, JSON answers, and chunked streams for watches."""

from __future__ import annotations

import asyncio
from http import HTTPStatus
from urllib.parse import parse_qsl, urlsplit

import msgspec

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 16 * 1024 * 1024
LAST_CHUNK = b"0\r\n\r\n"


class BadHttpError(Exception):
    """The bytes on the connection are not an HTTP/1.1 request we can answer."""


class HttpRequest(msgspec.Struct, frozen=True, kw_only=True):
    method: str
    path: str
    raw_query: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-case names; the last value of a repeated one
    body: bytes
    header_pairs: tuple[tuple[str, str], ...] = ()  # every header line, names lower-case

    def header_values(self, name: str) -> list[str]:
        """Every value of header `name` (lower-case), in order (Impersonate-Group repeats)."""
        return [v for k, v in self.header_pairs if k == name]

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";", 1)[0].strip().lower()

    @property
    def keep_alive(self) -> bool:
        return self.headers.get("connection", "").lower() != "close"


async def read_request(reader: asyncio.StreamReader) -> HttpRequest | None:
    """The next request on the connection; None when the client closed it between requests."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as err:
        if not err.partial.strip():
            return None
        raise BadHttpError("connection closed inside a request head") from err
    except asyncio.LimitOverrunError as err:
        raise BadHttpError("request head too large") from err
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, _version = lines[0].split(" ", 2)
    except ValueError as err:
        raise BadHttpError(f"bad request line {lines[0]!r}") from err
    pairs: list[tuple[str, str]] = []
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            pairs.append((name.strip().lower(), value.strip()))
    headers = dict(pairs)
    body = await _read_body(reader, headers)
    url = urlsplit(target)
    return HttpRequest(
        method=method.upper(),
        path=url.path,
        raw_query=url.query,
        query=dict(parse_qsl(url.query, keep_blank_values=True)),
        headers=headers,
        body=body,
        header_pairs=tuple(pairs),
    )


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        parts: list[bytes] = []
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                    pass
                return b"".join(parts)
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
    length = int(headers.get("content-length", "0") or "0")
    if length > MAX_BODY_BYTES:
        raise BadHttpError("request body too large")
    return await reader.readexactly(length) if length else b""


def response_head(code: int, headers: list[tuple[str, str]]) -> bytes:
    phrase = HTTPStatus(code).phrase
    lines = [f"HTTP/1.1 {code} {phrase}", *(f"{k}: {v}" for k, v in headers), "", ""]
    return "\r\n".join(lines).encode("latin-1")


def full_response(
    code: int,
    body: bytes,
    *,
    content_type: str = "application/json",
    extra: list[tuple[str, str]] | None = None,
    keep_alive: bool = True,
) -> bytes:
    headers = [
        ("Content-Type", content_type),
        ("Cache-Control", "no-cache, private"),
        ("Content-Length", str(len(body))),
    ]
    headers += extra or []
    if not keep_alive:
        headers.append(("Connection", "close"))
    return response_head(code, headers) + body


def stream_head() -> bytes:
    return response_head(
        200,
        [
            ("Content-Type", "application/json"),
            ("Cache-Control", "no-cache, private"),
            ("Transfer-Encoding", "chunked"),
        ],
    )


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)
