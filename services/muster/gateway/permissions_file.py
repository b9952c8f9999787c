"""`--policy-file`: the permissions of `muster.gateway.permissions` from a YAML file, read again
when it changes. Without a file only members of `muster:admins` may do anything."""

from __future__ import annotations

from muster.gateway.permissions import Action, Caller, Policy, policy_from_document
from muster.gateway.reloading import ReloadingFile, yaml_document


def parse_policy(data: bytes) -> Policy:
    """The Policy a policy file's bytes hold; PolicyError (or FileError) naming every problem."""
    return policy_from_document(yaml_document(data, source="policy"))


class PolicyAuthorizer:
    """Answers from the policy file (or, without one, from the built-in admin group alone)."""

    def __init__(self, path: str = "") -> None:
        self._file = ReloadingFile(path, parse_policy, what="policy file") if path else None

    @property
    def reloads(self) -> int:
        return self._file.reloads if self._file is not None else 0

    async def allowed(self, caller: Caller, action: Action) -> bool:
        policy = self._file.current() if self._file is not None else Policy()
        return policy.allows(caller, action)
