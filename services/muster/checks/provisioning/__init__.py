"""The ProvisioningRequest admission check (`controllerName: kueue.x-k8s.io/provisioning-request`),
by Kueue's rules (pkg/controller/admissionchecks/provisioning): ask the cluster-autoscaler for
the capacity a workload's reservation needs, and admit it once that capacity is there.

Per check on a Workload with reserved quota, configured by the ProvisioningRequestConfig its
AdmissionCheck's `spec.parameters` names:
- no config: Pending "the check is not active"; no podset uses a `managedResources` resource:
  Ready "the provisioning request is not needed";
- otherwise one PodTemplate per podset that needs capacity (its template, with the flavors'
  node labels and tolerations and limits as missing requests) and a ProvisioningRequest
  `<workload>-<check>-<attempt>` for them, owned by the Workload (the templates then by it);
- the request's conditions answer: Provisioned → Ready (podSetUpdates: the annotations that
  let the pods consume it); Accepted with a Provisioned message → Pending with it; Failed (or
  BookingExpired before admission) → Retry, with `requeueAfterSeconds` of an exponential
  back-off, while `attempt <= retryStrategy.backoffLimitCount`, then Rejected;
  CapacityRevoked → Rejected (the nodes are gone);
- after the eviction a Retry causes (muster resets the check to Pending, counting the retry),
  the next attempt is created once the back-off has passed;
- a finished or evicted workload's requests are deleted (the templates go with them).

As in Kueue, a workload evicted by the Retry is requeued only once its requeueAfterSeconds
has passed (admission waits for it, holding no quota meanwhile, on Kubernetes and on the
virtual clock alike), so the next attempt is made as it reserves again. Differs from Kueue:
podset merging (`podSetMergePolicy`) is not done: one request podset per workload podset.

`objects`: names and the manifests made; `rules`: the answers and `reconcile`.
"""

from muster.checks.provisioning.objects import (
    CONTROLLER_NAME,
    INACTIVE,
    NOT_NEEDED,
    POD_TEMPLATES,
    PROVISIONING_REQUESTS,
    request_name,
    template_name,
)
from muster.checks.provisioning.rules import ProvisioningController, RetryStrategy, retry_strategy

__all__ = [
    "CONTROLLER_NAME",
    "INACTIVE",
    "NOT_NEEDED",
    "POD_TEMPLATES",
    "PROVISIONING_REQUESTS",
    "ProvisioningController",
    "RetryStrategy",
    "request_name",
    "retry_strategy",
    "template_name",
]
