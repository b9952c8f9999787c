"""The names of the JetStream key-value buckets and the object stores the services share.

One place, so that a service, `bus.setup` (which creates them) and the permission table name the
same bucket; docs/events.md says what each holds and who writes it.
"""

from __future__ import annotations

from typing import Final

VISIBILITY_BUCKET: Final = "MUSTER_VISIBILITY"  # admission's status views, the gateway's reads
SHARDS_BUCKET: Final = "MUSTER_SHARDS"  # admission's shard leases (they expire)
WATCHER_BUCKET: Final = "MUSTER_WATCHER"  # the watcher's marks per cluster
CLUSTERS_BUCKET: Final = "MUSTER_CLUSTERS"  # key <cluster> (and its parts): its room, for dispatch
PARTITIONS_BUCKET: Final = "MUSTER_PARTITIONS"  # each LocalQueue's admission partition
NAMES_BUCKET: Final = "MUSTER_NAMES"  # the gateways' claims of workload names
SNAPSHOTS_BUCKET: Final = "MUSTER_SNAPSHOTS"  # admission's object store (admission/rebuild.py)
# The object store of cluster <c>'s binders (`.format(cluster=c)`): each live workload's
# manifest too large for its `admitted` (binder/manifests.py); one per cluster, so that no
# cluster's credential can plant what another cluster's binder starts.
MANIFESTS_BUCKET: Final = "MUSTER_MANIFESTS_{cluster}"
