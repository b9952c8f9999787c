"""Developer tools shipped with muster: stand-ins that tests and benchmarks start in-process.

Nothing in the services imports this package; `make lint` checks that.
"""
