"""Benchmarks: workloads generated in code, run through `muster.sim`, measured from events.

`kueue_perf` builds Kueue's scalability configurations, `metrics` turns a run's events into
numbers, `admission` runs the admission section and `table` renders rows; `muster bench` prints.
"""
