"""Direct reply-to names: each identifies its channel, none can be guessed from another."""

from __future__ import annotations

from sievemq.gateway.runtime.direct_replies import NAME_PREFIX, DirectReplies, channel_of


class Target:
    def deliver_reply(self, routing_key: str, properties: bytes, body: bytes) -> bool:
        return True


def test_a_name_encodes_its_connection_and_channel_and_a_random_key() -> None:
    replies = DirectReplies()
    target = Target()
    first = replies.register(target, 42, 7)
    second = replies.register(target, 42, 7)
    assert first.startswith(NAME_PREFIX) and len(first) <= 255
    info_1, info_2 = channel_of(first), channel_of(second)
    assert info_1 is not None and info_1[1:] == (42, 7) and info_1 == info_2
    assert first != second  # same channel, a new key: the old name is not the new one
    assert replies.target(first) is target and replies.target(second) is target
    replies.unregister(first)
    assert replies.target(first) is None and replies.target(second) is target
    assert len(replies) == 1


def test_names_of_two_servers_differ_in_their_instance_part() -> None:
    a = channel_of(DirectReplies().register(Target(), 1, 1))
    b = channel_of(DirectReplies().register(Target(), 1, 1))
    assert a is not None and b is not None and a[0] != b[0]


def test_what_is_not_a_reply_name() -> None:
    for name in ("amq.rabbitmq.reply-to", NAME_PREFIX + "!!!.key", NAME_PREFIX + "AAAA", "q"):
        assert channel_of(name) is None
    assert DirectReplies().target(NAME_PREFIX + "AAAA.key") is None
