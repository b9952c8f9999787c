"""Which cluster's configuration counts (`muster.core.config_owners`): the first to apply an
object owns it; a MultiKueue worker owns nothing it applied after it was declared one."""

from __future__ import annotations

from muster.core.config_owners import ConfigOwners

OWNED = "ClusterQueue cq: {verb} it from cluster east is refused: cluster local applied it first and owns it"  # noqa: E501


def test_the_first_cluster_to_apply_an_object_owns_it() -> None:
    owners = ConfigOwners()
    assert owners.admit("ClusterQueue", "cq", "local") == ""
    assert owners.admit("ClusterQueue", "cq", "local") == ""  # the owner, again
    assert owners.admit("ClusterQueue", "cq", "east") == OWNED.format(verb="applying")
    assert owners.admit("ClusterQueue", "cq", "east", deleted=True) == OWNED.format(verb="deleting")
    assert owners.owners == {("ClusterQueue", "cq"): "local"}


def test_a_deletion_by_the_owner_frees_the_name() -> None:
    owners = ConfigOwners()
    owners.admit("ClusterQueue", "cq", "local")
    assert owners.admit("ClusterQueue", "cq", "local", deleted=True) == ""
    assert owners.admit("ClusterQueue", "cq", "east") == ""
    assert owners.owners == {("ClusterQueue", "cq"): "east"}


def test_independent_clusters_each_own_their_queues() -> None:
    owners = ConfigOwners()
    assert owners.admit("ClusterQueue", "local-cq", "local") == ""
    assert owners.admit("ClusterQueue", "east-cq", "east") == ""
    assert owners.admit("ClusterQueue", "east-cq", "east", deleted=True) == ""


def test_namespaces_are_every_clusters_own() -> None:
    owners = ConfigOwners()
    owners.admit("MultiKueueCluster", "east", "local")
    assert owners.admit("Namespace", "team-a", "local") == ""
    assert owners.admit("Namespace", "team-a", "east") == ""
    assert owners.admit("Namespace", "team-a", "east", deleted=True) == ""
    assert owners.owners == {("MultiKueueCluster", "east"): "local"}


def test_a_declared_worker_applies_nothing_new() -> None:
    owners = ConfigOwners()
    owners.admit("MultiKueueCluster", "east", "local")
    refused = owners.admit("ResourceFlavor", "east-only", "east")
    assert refused.startswith("ResourceFlavor east-only: applying it from cluster east")
    assert "east is a MultiKueue worker" in refused
    assert owners.admit("ResourceFlavor", "east-only", "east", deleted=True) == ""  # no-op


def test_what_a_worker_applied_before_it_was_declared_passes_to_another_cluster() -> None:
    owners = ConfigOwners()
    owners.admit("ClusterQueue", "cq", "east")
    owners.admit("MultiKueueCluster", "east", "local")
    assert "east is a MultiKueue worker" in owners.admit("ClusterQueue", "cq", "east")
    assert "east is a MultiKueue worker" in owners.admit("ClusterQueue", "cq", "east", deleted=True)
    assert owners.admit("ClusterQueue", "cq", "west", deleted=True) != ""  # east's still
    assert owners.admit("ClusterQueue", "cq", "local") == ""  # taken over
    assert owners.admit("ClusterQueue", "cq", "east") != ""
    # Undeclared, east is a cluster like any other again, owning nothing it did not apply.
    owners.admit("MultiKueueCluster", "east", "local", deleted=True)
    assert owners.workers == set()
    assert owners.admit("ClusterQueue", "cq", "east") != ""


def test_an_event_of_no_cluster_is_taken_as_before() -> None:
    owners = ConfigOwners()
    owners.admit("ClusterQueue", "cq", "local")
    assert owners.admit("ClusterQueue", "cq", "") == ""
    assert owners.owners == {("ClusterQueue", "cq"): "local"}


def test_a_multikueue_cluster_naming_the_cluster_it_came_from_is_refused() -> None:
    owners = ConfigOwners()
    owners.admit("ClusterQueue", "cq", "local")

    refused = owners.admit("MultiKueueCluster", "local", "local")

    assert refused == (
        "MultiKueueCluster local: applying it from cluster local is refused: it names cluster "
        "local itself as a MultiKueue worker, which would leave that cluster's own "
        "configuration (this one included) unchangeable"
    )
    assert owners.workers == set()
    assert owners.admit("ClusterQueue", "cq", "local", deleted=True) == ""  # still its own


NOT_MANAGER = (
    "MultiKueueCluster local: applying it from cluster west is refused: only the MultiKueue "
    "manager's MultiKueueClusters count, and west is not the manager (local: admission's "
    "--cluster)"
)


def test_a_worker_cannot_make_the_manager_a_worker_before_the_manager_declares_any() -> None:
    # The install race: west's watcher came up first and its MultiKueueCluster naming the
    # manager was stored before any of the manager's.
    owners = ConfigOwners(manager="local")

    refused = owners.admit("MultiKueueCluster", "local", "west")
    owners.admit("MultiKueueCluster", "west", "local")

    assert refused == NOT_MANAGER
    assert owners.workers == {"west"}
    assert owners.admit("ClusterQueue", "cq", "local") == ""  # the manager configures on


def test_a_worker_cannot_make_the_manager_a_worker_after_the_manager_declared_it() -> None:
    owners = ConfigOwners(manager="local")
    owners.admit("ClusterQueue", "cq", "local")
    owners.admit("MultiKueueCluster", "west", "local")

    refused = owners.admit("MultiKueueCluster", "local", "west")

    assert refused.startswith("MultiKueueCluster local: applying it from cluster west")
    assert owners.workers == {"west"}
    assert owners.admit("ClusterQueue", "cq", "local", deleted=True) == ""  # still the manager's


def test_only_the_configured_manager_declares_workers() -> None:
    owners = ConfigOwners(manager="hub")

    assert "east is not the manager (hub:" in owners.admit("MultiKueueCluster", "west", "east")
    assert owners.admit("MultiKueueCluster", "west", "east", deleted=True) == ""  # no-op
    assert owners.admit("MultiKueueCluster", "west", "hub") == ""
    undeclaring = owners.admit("MultiKueueCluster", "west", "east", deleted=True)
    assert "east is not the manager" in undeclaring
    assert owners.workers == {"west"}
