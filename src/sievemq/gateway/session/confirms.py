"""Publisher confirms of one channel, coalesced into as few basic.ack/nack frames as possible.

HOT PATH: one ``settle`` per confirmed message. Settled sequence numbers are released in
order: the contiguous run from the oldest unconfirmed message is sent as one frame with
``multiple=true`` per run of equal outcome, so a batch of N appends costs one ack frame.
A message routed to several streams is settled once every stream has reported.
"""

from __future__ import annotations

from sievemq.amqp import hotcodec


class ConfirmTracker:
    """Sequence numbers of one channel in confirm mode (they start at 1)."""

    __slots__ = ("_channel", "_next_out", "_ok_through", "_outcomes", "_waiting", "next_seq")

    def __init__(self, channel_id: int) -> None:
        self._channel = channel_id
        self.next_seq = 1  # the seq the next publish gets
        self._next_out = 1  # the oldest seq not confirmed to the client yet
        self._outcomes: dict[int, bool] = {}  # settled, not sent yet: seq -> ok
        # every seq from _next_out through _ok_through is settled ok (no _outcomes entry)
        self._ok_through = 0
        # seq -> [streams still to report, all ok so far]; only for messages sent to > 1 stream
        self._waiting: dict[int, list[int]] = {}

    def take(self, streams: int = 1) -> int:
        """Number the next publish; ``streams`` is how many appends must report for it."""
        seq = self.next_seq
        self.next_seq = seq + 1
        if streams > 1:
            self._waiting[seq] = [streams, 1]
        elif streams == 0:
            self._outcomes[seq] = True  # unroutable: confirmed at once (after any return)
        return seq

    def settle(self, seq: int, ok: bool) -> None:
        """One stream reports on ``seq``; a single failure nacks the message."""
        if self._waiting:
            entry = self._waiting.get(seq)
            if entry is not None:
                entry[0] -= 1
                if not ok:
                    entry[1] = 0
                if entry[0]:
                    return
                del self._waiting[seq]
                ok = bool(entry[1])
        self._outcomes[seq] = ok

    def settle_many(self, seqs: list[int], ok: bool) -> None:
        """``settle`` for each of ``seqs`` (increasing, as one append batch reports them).

        The common case, a contiguous all-ok run right after what is already settled, only
        moves ``_ok_through``: no per-message work.
        """
        first = seqs[0]
        last = seqs[-1]
        if (
            ok
            and not self._waiting
            and first == max(self._ok_through + 1, self._next_out)
            and last - first + 1 == len(seqs)
        ):
            self._ok_through = last
            return
        settle = self.settle
        for seq in seqs:
            settle(seq, ok)

    @property
    def released(self) -> int:
        """Messages confirmed (acked or nacked) to the client so far."""
        return self._next_out - 1

    @property
    def unconfirmed(self) -> int:
        return self.next_seq - self._next_out

    def drain(self) -> list[bytes]:
        """Frames for every settled message contiguous from the oldest unconfirmed one."""
        outcomes = self._outcomes
        seq = self._next_out
        out: list[bytes] = []
        channel = self._channel
        run_start = seq
        if self._ok_through >= seq:
            run_ok = True
            seq = self._ok_through + 1
        elif seq in outcomes:
            run_ok = outcomes.pop(seq)
            seq += 1
        else:
            return out
        while True:
            ok = outcomes.pop(seq, None)
            if ok is None or ok is not run_ok:
                out.append(_frame(channel, seq - 1, run_start, run_ok))
                if ok is None:
                    break
                run_ok = ok
                run_start = seq
            seq += 1
        self._next_out = seq
        return out

    def fail_all(self) -> None:
        """Settle everything still outstanding as failed, so ``drain`` nacks it.

        Channel teardown does NOT call this: a closed channel cannot carry confirms, so it
        simply stops settling (``Channel.settle_confirms`` ignores a closing channel) and the
        client treats every unconfirmed publish of that channel as not confirmed.
        """
        for seq in range(max(self._next_out, self._ok_through + 1), self.next_seq):
            if seq not in self._outcomes:
                self._outcomes[seq] = False
        self._waiting.clear()


def _frame(channel: int, last: int, first: int, ok: bool) -> bytes:
    multiple = last != first
    if ok:
        return hotcodec.encode_basic_ack(channel, last, multiple)
    return hotcodec.encode_basic_nack(channel, last, multiple)
