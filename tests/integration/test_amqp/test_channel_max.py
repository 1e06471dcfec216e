"""channel_max limits how many channels are open at once, and which numbers may be used.

RabbitMQ refuses a new channel once channel_max channels are open with 530 NOT_ALLOWED
"number of channels opened (N) has reached the negotiated channel_max (M)" (whatever the
number). A number above channel_max while there is room is refused with 504 (AMQP: usable
channel numbers are 1..channel-max; RabbitMQ itself only counts).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pamqp import commands

from sievemq.testing import ServerProcess
from sievemq.testing.raw import RawClient

pytestmark = pytest.mark.timeout(120)  # a hang guard, with room for a starved machine


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("cm") / "data", ("--channel-max", "3")).start()
    yield proc
    assert proc.stop() == 0, proc.stderr()


def client_with(srv: ServerProcess, channels: tuple[int, ...]) -> RawClient:
    raw = RawClient(srv.host, srv.amqp_port)
    tune = raw.handshake()
    assert tune.channel_max == 3
    for number in channels:
        raw.open_channel(number)
    return raw


def test_opening_one_channel_too_many_is_530(three: ServerProcess) -> None:
    raw = client_with(three, (1, 2, 3))
    raw.send_frame(commands.Channel.Open(), 4)
    close = raw.expect(commands.Connection.Close)
    assert close.reply_code == 530
    assert close.reply_text == (
        "NOT_ALLOWED - number of channels opened (3) has reached the negotiated channel_max (3)"
    )
    raw.close()


def test_a_number_above_channel_max_is_504_while_there_is_room(three: ServerProcess) -> None:
    raw = client_with(three, (1, 2, 3))
    raw.send_frame(
        commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0), 2
    )
    raw.expect(commands.Channel.CloseOk)
    raw.send_frame(commands.Channel.Open(), 4)  # two open: room, but 4 is not a usable number
    close = raw.expect(commands.Connection.Close)
    assert close.reply_code == 504
    assert "above the negotiated channel_max 3" in close.reply_text
    raw.close()


def test_a_closed_channel_frees_its_place(three: ServerProcess) -> None:
    raw = client_with(three, (1, 2, 3))
    raw.send_frame(
        commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0), 2
    )
    raw.expect(commands.Channel.CloseOk)
    raw.open_channel(2)
    assert isinstance(raw.rpc(commands.Basic.Qos(prefetch_count=1), 2), commands.Basic.QosOk)
    raw.close()
