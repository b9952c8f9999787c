"""What every gateway client command shares: the connection options, the channel, errors.

Used by `muster submit`, `queues`, `workloads`, `clusters`, `describe`, `events`, `stop`,
`resume` and `delete`. The commands are synchronous gRPC clients; the server side is
`muster.gateway`. Connection options: `--gateway`, TLS (`--tls`, `--tls-ca` to verify the gateway,
`--tls-cert`/`--tls-key` for mutual TLS), a bearer token (`--token-file`, or `--token`), each
with an environment variable. No credential is ever
printed: error messages show the gateway's address without any user:password@ part.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import sys
from collections.abc import Iterator, Sequence
from typing import Final, NoReturn

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message

from muster.launcher.upstate import recorded_gateway, state_dir

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
DEFAULT_GATEWAY: Final = "127.0.0.1:50051"
MAX_FILE_BYTES: Final = 1 << 20  # a token, CA, certificate or key: far smaller
# What a bearer token may hold as an HTTP header value (RFC 6750's b64token and more).
_HEADER_SAFE: Final = re.compile(r"[!-~]+")
_BAD_INPUT_CODES: Final = frozenset({grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND})
# RESOURCE_EXHAUSTED for a limit on how many calls or watches run at once (the gateway's
# --max-calls and watch limits, gRPC's own backstop) says "try again" (exit 1); for a request
# or an answer too large, the request's fault (exit 2).
_BUSY: Final = ("at once", "Concurrent RPC limit")


# (flag, metavar, environment variable, help) of the options that take a value.
CONNECTION_OPTIONS: Final = (
    ("--gateway", "HOST:PORT", "MUSTER_GATEWAY", "the gateway's address"),
    ("--token-file", "FILE", "MUSTER_CLIENT_TOKEN_FILE", "read the bearer token from FILE"),
    ("--token", "SECRET", "MUSTER_GATEWAY_TOKEN", "bearer token (--token-file keeps it out of ps)"),
    ("--tls-ca", "FILE", "MUSTER_CLIENT_TLS_CA", "verify the gateway's certificate with this CA"),
    ("--tls-cert", "FILE", "MUSTER_CLIENT_TLS_CERT", "client certificate, for mutual TLS"),
    ("--tls-key", "FILE", "MUSTER_CLIENT_TLS_KEY", "the client certificate's private key"),
    ("--tls-server-name", "NAME", "MUSTER_CLIENT_TLS_SERVER_NAME",
     "the name to verify the gateway's certificate for, when not the --gateway host"),
)  # fmt: skip


def add_client_options(parser: argparse.ArgumentParser) -> None:
    """Add the connection options (see the module doc) and --timeout."""
    group = parser.add_argument_group("gateway connection")
    for flag, metavar, env, about in CONNECTION_OPTIONS:
        shown = f", else the one `muster up` started, else {DEFAULT_GATEWAY}" * (
            flag == "--gateway"
        )
        group.add_argument(
            flag,
            metavar=metavar,
            default=os.environ.get(env) or None,
            help=f"{about} ({env}{shown})",
        )
    group.add_argument(
        "--tls",
        action="store_true",
        default=(os.environ.get("MUSTER_CLIENT_TLS") or "").lower() in ("1", "on", "true", "yes"),
        help="connect with TLS, verifying the gateway with the system's CAs "
        "(MUSTER_CLIENT_TLS=on; implied by the other --tls options)",
    )
    group.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=timeout_argument,
        default=30.0,
        help="give up on a call after this long (default %(default)gs; not for --follow)",
    )


def timeout_argument(text: str) -> float:
    """--timeout's seconds: nan, 0, negative or infinite ones were sent as a deadline already
    past, and the call failed "DEADLINE_EXCEEDED" as if the gateway were slow."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0: {text!r}")
    return value


def add_output_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o",
        "--output",
        choices=("table", "json"),
        default="table",
        help="output format (default %(default)s)",
    )


def call_metadata(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The metadata every call carries: the bearer token when one is given."""
    token, where = args.token, "--token"
    if args.token_file:
        where = f"--token-file {args.token_file}"
        token = _read(args.token_file, "--token-file").decode("utf-8", "replace").strip()
        if not token:
            _fail(f"{where}: is empty")
    if token and not _HEADER_SAFE.fullmatch(token):
        # gRPC refused it as "INTERNAL: Invalid metadata", naming neither the flag nor why.
        _fail(f"{where}: a token is one line of printable ASCII, without spaces")
    return [("authorization", f"Bearer {token}")] if token else []


def gateway_address(args: argparse.Namespace) -> str:
    """Where the gateway is: --gateway (MUSTER_GATEWAY); else the gateway of the stack `muster
    up` started (its state file, in MUSTER_STATE_DIR or the default state directory, as `muster
    status` reads it: `up --gateway-port 0` picks any free port) while its supervisor runs;
    else DEFAULT_GATEWAY."""
    explicit: str | None = args.gateway
    if explicit:
        return explicit
    recorded, ignored = recorded_gateway(state_dir())
    if ignored:
        print(f"muster: {ignored}", file=sys.stderr)
    return recorded or DEFAULT_GATEWAY


@contextlib.contextmanager
def channel(args: argparse.Namespace) -> Iterator[grpc.Channel]:
    """A channel to the gateway: TLS when any TLS option is given, else plaintext."""
    address = gateway_address(args)
    _check_gateway(address)
    credentials = channel_credentials(args)
    if credentials is None:
        with grpc.insecure_channel(address) as ch:
            yield ch
        return
    options = [("grpc.ssl_target_name_override", args.tls_server_name)]
    with grpc.secure_channel(
        address, credentials, options=options if args.tls_server_name else None
    ) as ch:
        yield ch


def _check_gateway(address: str) -> None:
    """Exit 2 for a HOST:PORT whose port is past 65535: gRPC wraps it (99999 dialled 34463)."""
    port = address.rpartition(":")[2]
    if port.isascii() and port.isdigit() and not 0 < int(port) <= 65535:
        _fail(f"--gateway {shown_address(address)}: the port must be 1 to 65535, got {port}")


def channel_credentials(args: argparse.Namespace) -> grpc.ChannelCredentials | None:
    """The TLS credentials the options ask for (None: plaintext). Exits 2 on a bad file."""
    if not (args.tls or args.tls_ca or args.tls_cert or args.tls_key):
        return None
    if bool(args.tls_cert) != bool(args.tls_key):
        _fail("--tls-cert and --tls-key go together")
    ca = _read(args.tls_ca, "--tls-ca") if args.tls_ca else None
    key = _read(args.tls_key, "--tls-key") if args.tls_key else None
    cert = _read(args.tls_cert, "--tls-cert") if args.tls_cert else None
    return grpc.ssl_channel_credentials(
        root_certificates=ca, private_key=key, certificate_chain=cert
    )


def _read(path: str, flag: str) -> bytes:
    """The bytes of a token, CA, certificate or key file; a larger one than MAX_FILE_BYTES
    is a mistake (`/dev/zero` was read until MemoryError)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        _fail(f"{flag} {path}: cannot read: {exc.strerror or exc}")
    if len(data) > MAX_FILE_BYTES:
        _fail(f"{flag} {path}: larger than {MAX_FILE_BYTES >> 20} MiB: not read")
    return data


def _fail(message: str) -> NoReturn:
    print(f"muster: {message}", file=sys.stderr)
    raise SystemExit(EXIT_BAD_INPUT)


def shown_address(address: str) -> str:
    """`address` without credentials ("user:secret@host:1" → "host:1"), for messages."""
    return re.sub(r"^(?P<scheme>[a-z][a-z0-9+.-]*://+)?[^/@]*@", r"\g<scheme>", address)


def report_error(args: argparse.Namespace, exc: grpc.RpcError, *, prefix: str = "") -> int:
    """Print a failed call's status to stderr, one line per line of detail; the exit status."""
    code: grpc.StatusCode = exc.code()
    details: str = exc.details() or ""
    address = gateway_address(args)
    shown = shown_address(address)
    details = details.replace(address, shown)  # gRPC's messages repeat the target
    if code == grpc.StatusCode.UNAVAILABLE and not details.startswith("the gateway"):
        details = f"cannot reach the gateway at {shown}: {details}"
        if "Connection refused" in details:
            details += (
                " (nothing listens there: start one with `muster up`, or name it with"
                " --gateway or MUSTER_GATEWAY)"
            )
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in details:
        details += (
            ": the gateway's request limit (--max-request-bytes); split the manifest into"
            " several files"
        )
    lines = details.splitlines() or [""]
    if len(lines) == 1:
        print(f"muster: {prefix}{code.name}: {lines[0]}", file=sys.stderr)
    else:
        print(f"muster: {prefix}{code.name}:", file=sys.stderr)
        for line in lines:
            print(f"  {line}", file=sys.stderr)
    return EXIT_BAD_INPUT if _bad_input(code, details) else EXIT_FAILED


def _bad_input(code: grpc.StatusCode, details: str) -> bool:
    """Whether the call failed for what it asked (exit 2), not for now (exit 1)."""
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return not any(words in details for words in _BUSY)
    return code in _BAD_INPUT_CODES


def to_json(message: Message, *, indent: int | None = 2) -> str:
    """`message` as JSON with proto field names (camelCase) and zero values included."""
    return json_format.MessageToJson(
        message, always_print_fields_with_no_presence=True, indent=indent, sort_keys=False
    )


def print_structured(message: Message, output: str) -> None:
    """Print `message` as JSON (`to_json`) or, with output "yaml", the same fields as YAML."""
    if output == "yaml":
        import yaml  # only here: most commands never print YAML

        fields = json_format.MessageToDict(message, always_print_fields_with_no_presence=True)
        sys.stdout.write(yaml.safe_dump(fields, sort_keys=False, allow_unicode=True))
    else:
        print(to_json(message))


def render_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Rows under a header, columns padded to their widest cell, two spaces apart."""
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in (header, *rows)
    ]
    return "\n".join(lines) + "\n"
