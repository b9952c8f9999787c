"""A worker cluster served from the manager's side: its API server is the one the kubeconfig of
its MultiKueueCluster names, as Kueue's MultiKueue reaches its workers.

A service started with `--multikueue-cluster east` reaches the manager's API server with its
own client configuration (in-cluster, kubeconfig or host) and reads there MultiKueueCluster
`east`'s kubeConfig: key `kubeconfig` of a Secret in muster's namespace (`locationType:
Secret`, Kueue's default) or a file (`Path`). `WorkerLink.run` keeps the worker's client in the
backend's transport up to date: read again every `refresh_s`, replaced when it changed (so a
rotated Secret or an edited MultiKueueCluster takes effect without a restart), and when it
cannot be made every request fails with why, in Kueue's words for the MultiKueueCluster's
Active condition (`BadKubeConfig`, `InsecureKubeConfig`), which the gang-permit heartbeat
carries to the manager (`muster.watcher.worker_status`).

A kubeconfig is hostile input: as Kueue, muster refuses what would make it run a program or
read its own files (exec and auth-provider plugins, token and certificate files), basic
auth, and turning TLS verification off (`kubeconfig_problems`).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import copy
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import yaml

from muster.api import decode_documents
from muster.api.files import read_regular
from muster.api.model import KubeConfigRef, MultiKueueCluster
from muster.cluster.errors import ClusterError, NotFoundError
from muster.cluster.kube.resources import kueue_resources
from muster.cluster.kube.retry import cancelling_check
from muster.cluster.kube.settings import WorkerSource
from muster.cluster.kube.transport import Transport

if TYPE_CHECKING:
    from kubernetes.aio.client import ApiClient

log = logging.getLogger(__name__)

SECRET_KEY = "kubeconfig"  # Kueue's MultiKueueConfigSecretKey
BAD = "BadKubeConfig"
INSECURE = "InsecureKubeConfig"
# A kubeconfig read from a path is at most a Secret's size (the API server's limit, 1 MiB):
# a MultiKueueCluster naming /dev/zero or a FIFO must not fill memory or hold a thread.
MAX_KUBECONFIG_BYTES = 1 << 20
# Files a kubeconfig may name instead of carrying the data: muster's own files, never read.
_USER_FILES = ("tokenFile", "client-certificate", "client-key")
_USER_PLUGINS = ("exec", "auth-provider")


class WorkerConfigError(ClusterError):
    """The worker's client cannot be made; `reason` is Kueue's for the Active condition."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__("", reason, message, temporary=True)


def kubeconfig_problems(config: Mapping[str, Any]) -> list[str]:
    """Why a kubeconfig may not be used for a worker (empty: it may), each naming the entry
    and field, as Kueue's validateKubeconfig refuses them."""
    problems = []
    for i, named in enumerate(config.get("clusters") or []):
        cluster = (named or {}).get("cluster") or {}
        where = f"clusters[{i}] ({(named or {}).get('name', '')})"
        if not cluster.get("server"):
            problems.append(f"{where}: server is required")
        if cluster.get("insecure-skip-tls-verify"):
            problems.append(f"{where}: insecure-skip-tls-verify is not allowed")
        if cluster.get("certificate-authority"):
            problems.append(
                f"{where}: certificate-authority (a file) is not allowed, "
                "use certificate-authority-data"
            )
    for i, named in enumerate(config.get("users") or []):
        user = (named or {}).get("user") or {}
        where = f"users[{i}] ({(named or {}).get('name', '')})"
        problems += [f"{where}: {f} (a file) is not allowed" for f in _USER_FILES if user.get(f)]
        problems += [f"{where}: {p} is not allowed" for p in _USER_PLUGINS if user.get(p)]
        if user.get("username") or user.get("password"):
            problems.append(f"{where}: basic auth is not allowed")
    return problems


def kubeconfig_of_secret(secret: Mapping[str, Any], *, name: str) -> dict[str, Any]:
    """The kubeconfig in a Secret's `data.kubeconfig`; WorkerConfigError naming the Secret."""
    data = secret.get("data") or {}
    encoded = data.get(SECRET_KEY) if isinstance(data, Mapping) else None
    if not isinstance(encoded, str):
        raise WorkerConfigError(BAD, f"Secret {name}: key {SECRET_KEY!r} not found")
    try:
        text = base64.b64decode(encoded, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError) as err:
        raise WorkerConfigError(BAD, f"Secret {name}: key {SECRET_KEY!r}: {err}") from None
    return parsed_kubeconfig(text, where=f"Secret {name}: key {SECRET_KEY!r}")


def parsed_kubeconfig(text: str, *, where: str) -> dict[str, Any]:
    """A kubeconfig's text as a mapping, checked (`kubeconfig_problems`)."""
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as err:
        # Where and what only: the parser's own message quotes the text, tokens included.
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or "unreadable"
        raise WorkerConfigError(BAD, f"{where}: not YAML{at}: {problem}") from None
    if not isinstance(config, dict) or not config.get("clusters"):
        raise WorkerConfigError(BAD, f"{where}: not a kubeconfig (no clusters)")
    problems = kubeconfig_problems(config)
    if problems:
        raise WorkerConfigError(INSECURE, f"{where}: {'; '.join(problems)}")
    return config


async def read_kubeconfig(
    manager: Transport, source: WorkerSource, *, version: str
) -> dict[str, Any]:
    """The worker's kubeconfig as its MultiKueueCluster in the manager names it now."""
    resource = kueue_resources(version)["MultiKueueCluster"]
    who = resource.describe(source.cluster)
    try:
        raw = await manager.checked("GET", resource.object_path(source.cluster), obj=who)
    except NotFoundError:
        raise WorkerConfigError(BAD, f"{who} does not exist") from None
    ref = _kube_config_of(raw, who=who)
    if ref.location_type == "Path":
        try:
            data = await asyncio.to_thread(
                read_regular, ref.location, max_bytes=MAX_KUBECONFIG_BYTES
            )
            text = data.decode()
        except (OSError, ValueError) as err:  # UnicodeDecodeError is a ValueError
            raise WorkerConfigError(BAD, f"{who}: kubeConfig {ref.location}: {err}") from None
        return parsed_kubeconfig(text, where=f"{who}: kubeConfig {ref.location}")
    name = f"{source.namespace}/{ref.location}"
    path = f"/api/v1/namespaces/{source.namespace}/secrets/{ref.location}"
    try:
        secret = await manager.checked("GET", path, obj=f"Secret/{name}")
    except NotFoundError:
        raise WorkerConfigError(BAD, f"Secret {name} not found") from None
    return kubeconfig_of_secret(secret, name=name)


def _kube_config_of(raw: Mapping[str, Any], *, who: str) -> KubeConfigRef:
    """The decoded MultiKueueCluster's kubeConfig; WorkerConfigError when it has none."""
    objects, errors = decode_documents([dict(raw)])
    if errors:
        raise WorkerConfigError(BAD, "; ".join(str(e) for e in errors))
    found = [o for o in objects if isinstance(o, MultiKueueCluster)]
    if not found or found[0].kube_config is None:
        raise WorkerConfigError(
            BAD, f"{who} has no kubeConfig (its services run inside the worker)"
        )
    return found[0].kube_config


async def client_of(config: Mapping[str, Any]) -> ApiClient:
    """The official asyncio client for a (checked) kubeconfig."""
    from kubernetes.aio.client import ApiClient, Configuration
    from kubernetes.aio.config import ConfigException, load_kube_config_from_dict

    configuration = Configuration()
    try:
        await load_kube_config_from_dict(  # type: ignore[no-untyped-call]  # unhinted
            copy.deepcopy(dict(config)), client_configuration=configuration
        )
    except (ConfigException, ValueError, KeyError, TypeError) as err:
        raise WorkerConfigError(BAD, f"kubeconfig: {err}") from None
    return ApiClient(configuration)


class WorkerLink:
    """Keeps a worker's transport on the client its MultiKueueCluster's kubeconfig makes."""

    def __init__(
        self, manager: Transport, worker: Transport, source: WorkerSource, *, version: str
    ) -> None:
        self.manager = manager
        self.worker = worker
        self.source = source
        self.version = version
        self._current: dict[str, Any] | None = None  # the kubeconfig in use
        self._told = ""  # the failure last logged

    async def refresh(self) -> None:
        """Read the kubeconfig again; use a new client when it changed (or failed before)."""
        try:
            config = await read_kubeconfig(self.manager, self.source, version=self.version)
            if config == self._current and self.worker.api is not None:
                return
            api = await client_of(config)
        except ClusterError as err:
            if str(err) != self._told:
                log.warning(
                    "worker cluster %s: %s", self.source.cluster, err,
                    extra={"cluster": self.source.cluster},
                )  # fmt: skip
                self._told = str(err)
            self._current = None
            why = (
                err
                if isinstance(err, WorkerConfigError)
                else WorkerConfigError(err.reason, f"reading its kubeconfig: {err}")
            )
            await self.worker.use(None, why=why)
            return
        log.info("worker cluster %s: client from its kubeconfig", self.source.cluster)
        self._current, self._told = config, ""
        await self.worker.use(api)

    async def run(self) -> None:
        """Refresh every `refresh_s` until cancelled."""
        while True:
            await asyncio.sleep(self.source.refresh_s)
            await self.refresh()
            cancelling_check()
