"""What the appenders of both queue families talk to, so that neither imports the other."""

from __future__ import annotations

from typing import Protocol


class ConfirmSink(Protocol):
    """A publishing channel: told per append batch which of its messages were stored."""

    def settle_confirms(self, seqs: list[int], ok: bool) -> None: ...
