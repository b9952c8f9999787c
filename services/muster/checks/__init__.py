"""Admission check controllers, as Kueue ships them (its pkg/controller/admissionchecks): each
answers for the AdmissionChecks naming its `controllerName`, by writing its entry of a
Kueue Workload's `status.admissionChecks`; muster's watcher tells admission what it wrote.

- `framework`: what a controller is (pure `reconcile`: a workload and what the controller
  owns in, a `Plan` out) and the shapes they share.
- `provisioning`: `kueue.x-k8s.io/provisioning-request`, asking the cluster-autoscaler for
  capacity with a ProvisioningRequest.
- `registry`: the controllers by name; a new one is one module plus one line there.
- `runner`: the shell the watcher runs on Kubernetes: one list-then-watch of what the
  controllers read, a work queue of workloads, and the writes each `Plan` asks for.
"""
