"""The chaos suite's private network: a namespace of its own (``unshare -n``), loopback up,
and partitions made by policy routing, no firewall tool.

Every process of a run (etcd, the nodes, the clients) lives in one namespace made for the
run, so a partition there touches nothing else on the machine. Each cluster member has its
own loopback alias (etcd 127.0.0.10, nodes 127.0.0.11-13) and its connections leave from it
(``source_address/sitecustomize.py``). A cut between A and B is two rules,
``from A to B prohibit`` and ``from B to A prohibit``, placed before the local table (moved
from preference 0 to 200 once, when the namespace is set up): a connect fails at once with
EACCES, and an open connection's packets are dropped until the cut heals (TCP then delivers
what it held). etcd members dial each other from 127.0.0.1, so a cut between members is made
by user instead (``cut_user``: ``uidrange U-U to B prohibit``; each member runs as its own
user): what a member sends to the other's address, on connections it opened or accepted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

MARK = "SIEVEMQ_CHAOS_NETNS"  # set in the re-executed process: it is inside the namespace
CUT_PREF = 100  # every cut's rules share this preference; the local table sits at 200


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def reexec_in_namespace(argv: list[str]) -> int:
    """Run ``python -m <argv>`` again inside a new network namespace; its exit status.

    The caller (``make chaos``, the short test) needs no privilege of its own beyond being
    allowed ``unshare -n`` (root here)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        raise RuntimeError("the chaos suite needs unshare (util-linux) and ip (iproute2)")
    env = dict(os.environ, **{MARK: "1"})
    return subprocess.run([unshare, "-n", sys.executable, *argv], env=env, check=False).returncode


def inside() -> bool:
    return os.environ.get(MARK) == "1"


def set_up() -> None:
    """Loopback up and the local table moved below the cut rules (preference 200)."""
    ip("link", "set", "lo", "up")
    ip("rule", "add", "pref", "200", "lookup", "local")
    ip("rule", "del", "pref", "0")


@dataclass
class Network:
    """The cuts in force, as each rule's selector; ``heal`` removes them all."""

    cuts: set[tuple[str, ...]] = field(default_factory=set)

    def _rule(self, *selector: str) -> None:
        if selector not in self.cuts:
            ip("rule", "add", "pref", str(CUT_PREF), *selector, "prohibit")
            self.cuts.add(selector)

    def cut(self, a: str, b: str) -> None:
        """No packet from ``a`` to ``b`` nor back."""
        self._rule("from", a, "to", b)
        self._rule("from", b, "to", a)

    def cut_user(self, uid_a: int, a: str, uid_b: int, b: str) -> None:
        """No packet from the processes of user ``uid_a`` to ``b`` nor from ``uid_b``'s to
        ``a`` (``a`` and ``b``: the addresses each listens on)."""
        self._rule("uidrange", f"{uid_a}-{uid_a}", "to", b)
        self._rule("uidrange", f"{uid_b}-{uid_b}", "to", a)

    def isolate(self, a: str, others: list[str]) -> None:
        for other in others:
            self.cut(a, other)

    def heal(self) -> None:
        for selector in sorted(self.cuts):
            ip("rule", "del", "pref", str(CUT_PREF), *selector, "prohibit")
        self.cuts.clear()
        left = [r for r in rules() if r.startswith(f"{CUT_PREF}:")]
        assert not left, f"cut rules left after healing: {left}"


def rules() -> list[str]:
    """``ip rule show``, a line per rule."""
    done = subprocess.run(["ip", "rule", "show"], check=True, capture_output=True, text=True)
    return done.stdout.splitlines()
