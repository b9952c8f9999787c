"""Pure admission decisions: quota tree, queue order, flavors, preemption, fair sharing.

No I/O, no clock, no randomness: time comes in as `now_s`, everything else as api objects.
The one stateful entry point is `Engine` (`engine`); what it knows is `EngineState` (`state`),
changed by `lifecycle` and `queueing` and read by `visibility` and `routing`. Gang placement
(`placement`) stands beside it. docs/architecture.md, "Core", maps the modules.
"""
