"""The web dashboard: queues, quota, pending workloads, a timeline, nodes, live in a browser.

`server` serves static pages (`static/`: HTML, JS and CSS, no build step) and relays the
gateway's answers and event stream to them; `muster service dashboard` runs it.
"""
