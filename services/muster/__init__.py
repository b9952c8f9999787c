"""muster: a batch-workload scheduler for Kubernetes with Kueue-compatible admission."""

__version__ = "0.1.0"
