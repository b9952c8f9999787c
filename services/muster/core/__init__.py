"""Pure admission decisions: quota tree, queue order, flavors, preemption, fair sharing.

No I/O, no clock, no randomness: time comes in as `now_s`, everything else as api objects.
The one stateful entry point is `Engine`; services and the simulator drive it the same way.
"""
