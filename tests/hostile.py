"""Hostile documents shared by the api, gateway and fuzz tests: small inputs that cost a lot."""

from __future__ import annotations

from typing import Any


def alias_bomb(levels: int = 9) -> str:
    """A ResourceFlavor whose unknown field holds a "billion laughs": 9**levels strings."""
    lines = ['  a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        refs = ",".join([f"*a{i - 1}"] * 9)
        lines.append(f"  a{i}: &a{i} [{refs}]")
    body = "\n".join(lines)
    return (
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\n"
        f"metadata: {{name: lol}}\nspec:\n  nodeLabels: {{}}\nlaughs:\n{body}\n"
    )


def deeply_nested(depth: int) -> str:
    """A Workload whose pod template holds `depth` nested lists (flow style)."""
    return (
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\n"
        "metadata: {name: deep, namespace: ml}\n"
        f"spec: {{queueName: q, podSets: {'[' * depth}{']' * depth}}}\n"
    )


def paths_of(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside `value` (keys and list indexes), the root's `()` first:
    where the fuzz tests replace, delete or add beside a value."""
    found = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            found += paths_of(child, (*prefix, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            found += paths_of(child, (*prefix, i))
    return found
