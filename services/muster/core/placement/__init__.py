"""Gang placement: all-or-nothing, batched, topology-aware placement of pods on nodes."""
