"""examples/spark/: every stream job run against a real gateway on the session's local[2]
Spark, then run again on the same checkpoint after more input: the output stream holds each
result exactly once across the restart."""

from __future__ import annotations

import collections
import importlib.util
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from sievemq.storage.layout import stream_directory
from sievemq.storage.reader import disk_end
from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect

pytestmark = pytest.mark.timeout(1200)
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "spark"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"sievemq_example_{name}", EXAMPLES / name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    proc = ServerProcess(tmp_path_factory.mktemp("examples") / "data").start()
    yield proc
    assert proc.running, proc.stderr()
    proc.stop()


def _ts(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _publish(server: ServerProcess, stream: str, bodies: list[Any]) -> None:
    conn = connect(server)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    for body in bodies:
        ch.basic_publish("", stream, body if isinstance(body, str) else json.dumps(body))
    conn.close()


def _output(spark: Any, server: ServerProcess, stream: str) -> list[Any]:
    df = spark.read.format("sievemq").option("stream", stream).load(str(server.data_dir))
    return [json.loads(bytes(r.body)) for r in sorted(df.collect(), key=lambda r: r.offset)]


def _run(module: ModuleType, spark: Any, server: ServerProcess, ck: Path, *extra: str) -> None:
    base = ["--data-dir", str(server.data_dir), "--uri", server.url, "--checkpoint", str(ck)]
    query = module.query(spark, module.arguments([*base, *extra]))
    query.awaitTermination(600)
    assert query.exception() is None


def _end(server: ServerProcess, stream: str) -> int:
    directory = stream_directory(server.data_dir, "/", stream)
    return disk_end(directory) if directory.exists() else 0


def _windows(rows: list[dict[str, Any]]) -> collections.Counter[tuple[Any, ...]]:
    """(key, start mm:ss, end mm:ss, count) of each published window."""
    return collections.Counter(
        (r["key"], r["start"][-6:-1], r["end"][-6:-1], r["count"]) for r in rows
    )


def test_word_count_publishes_changed_counts_once(
    spark: Any, metrics: Any, server: Any, tmp_path: Path
) -> None:
    wc = _example("word_count.py")
    names = ("--source", "wc-in", "--sink", "wc-out")
    _publish(server, "wc-in", ["the cat  the dog", "The end"])
    _run(wc, spark, server, tmp_path / "ck", *names)
    first = _output(spark, server, "wc-out")
    assert sorted((r["word"], r["count"]) for r in first) == [
        ("cat", 1),
        ("dog", 1),
        ("end", 1),
        ("the", 3),
    ]
    _publish(server, "wc-in", ["cat nap"])
    _run(wc, spark, server, tmp_path / "ck", *names)
    rows = _output(spark, server, "wc-out")
    assert sorted((r["word"], r["count"]) for r in rows[len(first) :]) == [("cat", 2), ("nap", 1)]


def test_tumbling_window_counts_with_lateness_across_a_restart(
    spark: Any, metrics: Any, server: Any, tmp_path: Path
) -> None:
    win = _example("windowed_counts.py")
    names = ("--source", "tw-in", "--sink", "tw-out", "--kind", "tumbling")
    events = [("a", 1), ("a", 4), ("b", 8), ("a", 12), ("a", 25)]
    _publish(server, "tw-in", [{"key": k, "ts": _ts(s)} for k, s in events])
    _run(win, spark, server, tmp_path / "ck", *names)
    # watermark 25 - 2 = 23 s: [0,10) and [10,20) are closed, [20,30) is still open
    assert _windows(_output(spark, server, "tw-out")) == collections.Counter(
        [("a", "00:00", "00:10", 2), ("b", "00:00", "00:10", 1), ("a", "00:10", "00:20", 1)]
    )
    late = [("a", 5), ("a", 27), ("b", 41)]  # a@5 is behind the watermark: dropped
    _publish(server, "tw-in", [{"key": k, "ts": _ts(s)} for k, s in late])
    _run(win, spark, server, tmp_path / "ck", *names)
    assert _windows(_output(spark, server, "tw-out")) == collections.Counter(
        [
            ("a", "00:00", "00:10", 2),
            ("b", "00:00", "00:10", 1),
            ("a", "00:10", "00:20", 1),
            ("a", "00:20", "00:30", 2),
        ]
    )


def test_sliding_and_session_window_counts(
    spark: Any, metrics: Any, server: Any, tmp_path: Path
) -> None:
    win = _example("windowed_counts.py")
    _publish(server, "sw-in", [{"key": "a", "ts": _ts(s)} for s in (1, 6, 30)])
    sliding = ("--source", "sw-in", "--sink", "sw-out", "--kind", "sliding")
    _run(win, spark, server, tmp_path / "ck-sliding", *sliding)
    assert _windows(_output(spark, server, "sw-out")) == collections.Counter(
        [("a", "59:55", "00:05", 1), ("a", "00:00", "00:10", 2), ("a", "00:05", "00:15", 1)]
    )
    events = [("a", 1), ("a", 3), ("b", 2), ("a", 20), ("a", 40)]
    _publish(server, "ss-in", [{"key": k, "ts": _ts(s)} for k, s in events])
    session = ("--source", "ss-in", "--sink", "ss-out", "--kind", "session")
    _run(win, spark, server, tmp_path / "ck-session", *session)
    assert _windows(_output(spark, server, "ss-out")) == collections.Counter(
        [("a", "00:01", "00:08", 2), ("b", "00:02", "00:07", 1), ("a", "00:20", "00:25", 1)]
    )


def test_stream_stream_join_keeps_its_state_across_a_restart(
    spark: Any, metrics: Any, server: Any, tmp_path: Path
) -> None:
    join = _example("stream_join.py")
    names = ("--source", "j-orders", "--payments", "j-pay", "--sink", "j-out")
    _publish(server, "j-orders", [{"id": "o1", "ts": _ts(0)}, {"id": "o2", "ts": _ts(60)}])
    _publish(server, "j-pay", [{"id": "o1", "ts": _ts(30), "amount": 10.0}])
    _run(join, spark, server, tmp_path / "ck", *names)
    assert _output(spark, server, "j-out") == [
        {"id": "o1", "ordered": _ts(0), "paid": _ts(30), "amount": 10.0}
    ]
    _publish(server, "j-orders", [{"id": "o3", "ts": _ts(90)}])  # never paid
    _publish(server, "j-pay", [{"id": "o2", "ts": _ts(120), "amount": 5.0}])  # order seen before
    _run(join, spark, server, tmp_path / "ck", *names)
    assert _output(spark, server, "j-out") == [
        {"id": "o1", "ordered": _ts(0), "paid": _ts(30), "amount": 10.0},
        {"id": "o2", "ordered": _ts(60), "paid": _ts(120), "amount": 5.0},
    ]


def test_dedup_publishes_each_id_once_across_a_restart(
    spark: Any, metrics: Any, server: Any, tmp_path: Path
) -> None:
    dedup = _example("dedup.py")
    names = ("--source", "d-in", "--sink", "d-out")
    _publish(
        server,
        "d-in",
        [{"id": "e1", "ts": _ts(0)}, {"id": "e2", "ts": _ts(1)}, {"id": "e1", "ts": _ts(2)}],
    )
    _run(dedup, spark, server, tmp_path / "ck", *names)
    assert sorted(r["id"] for r in _output(spark, server, "d-out")) == ["e1", "e2"]
    _publish(server, "d-in", [{"id": "e1", "ts": _ts(3)}, {"id": "e3", "ts": _ts(4)}])
    _run(dedup, spark, server, tmp_path / "ck", *names)
    assert sorted(r["id"] for r in _output(spark, server, "d-out")) == ["e1", "e2", "e3"]


def test_left_outer_join_publishes_an_unpaid_order_with_nulls_once_the_watermark_passes(
    spark: Any, metrics: Any, server: Any, tmp_path: Path
) -> None:
    join = _example("stream_join.py")
    names = ("--source", "lo-orders", "--payments", "lo-pay", "--sink", "lo-out", "--left-outer")
    _publish(server, "lo-orders", [{"id": "o1", "ts": _ts(0)}, {"id": "o2", "ts": _ts(60)}])
    _publish(server, "lo-pay", [{"id": "o1", "ts": _ts(30), "amount": 10.0}])
    _run(join, spark, server, tmp_path / "ck", *names)
    # o2 may still be paid (until 60 s + 10 min of event time): not published yet
    paid_o1 = {"id": "o1", "ordered": _ts(0), "paid": _ts(30), "amount": 10.0}
    assert _output(spark, server, "lo-out") == [paid_o1]
    # an hour later on both streams: the watermark (3600 s - 10 min) passes o2's last chance
    _publish(server, "lo-orders", [{"id": "o9", "ts": _ts(3600)}])
    _publish(server, "lo-pay", [{"id": "o9", "ts": _ts(3605), "amount": 1.0}])
    _run(join, spark, server, tmp_path / "ck", *names)
    rows = _output(spark, server, "lo-out")
    assert sorted(rows, key=lambda r: r["id"]) == [
        paid_o1,
        {"id": "o2", "ordered": _ts(60), "paid": None, "amount": None},
        {"id": "o9", "ordered": _ts(3600), "paid": _ts(3605), "amount": 1.0},
    ]
    # o1 found its payment, so it never comes out unmatched; a further run adds nothing
    _run(join, spark, server, tmp_path / "ck", *names)
    assert len(_output(spark, server, "lo-out")) == 3


def _pairs(n: int, base: int) -> list[dict[str, Any]]:
    return [{"id": f"o{base + i}", "ts": _ts(60 * (base + i))} for i in range(n)]


# job, its options, then two rounds of input: {stream: bodies} and the output count after it
CONTINUOUS: dict[str, tuple[str, tuple[str, ...], list[tuple[dict[str, list[Any]], int]]]] = {
    "filter_map": (
        "filter_map.py",
        (),
        [({"in": ["a", "", "b"]}, 2), ({"in": ["c"]}, 3)],
    ),
    "word_count": (
        "word_count.py",
        (),
        [({"in": ["x y"]}, 2), ({"in": ["x"]}, 3)],  # then {"x": 2}
    ),
    "windowed_counts": (
        "windowed_counts.py",
        ("--kind", "tumbling"),
        # a@25 moves the watermark to 23 s: [0,10) closes; a@40 closes [20,30)
        [
            ({"in": [{"key": "a", "ts": _ts(1)}, {"key": "a", "ts": _ts(25)}]}, 1),
            ({"in": [{"key": "a", "ts": _ts(40)}]}, 2),
        ],
    ),
    "stream_join": (
        "stream_join.py",
        ("--payments", "pay"),
        [
            ({"in": _pairs(1, 1), "pay": [{"id": "o1", "ts": _ts(70), "amount": 1.0}]}, 1),
            ({"in": _pairs(1, 2), "pay": [{"id": "o2", "ts": _ts(130), "amount": 2.0}]}, 2),
        ],
    ),
    "dedup": (
        "dedup.py",
        (),
        [
            ({"in": [{"id": "e1", "ts": _ts(0)}, {"id": "e1", "ts": _ts(1)}]}, 1),
            ({"in": [{"id": "e1", "ts": _ts(2)}, {"id": "e2", "ts": _ts(3)}]}, 2),
        ],
    ),
}


def _wait_for(server: ServerProcess, stream: str, count: int, query: Any) -> None:
    deadline = time.monotonic() + 300
    while _end(server, stream) < count:
        assert query.isActive, f"the query stopped: {query.exception()}"
        assert time.monotonic() < deadline, f"{stream}: {_end(server, stream)} of {count}"
        time.sleep(0.5)


@pytest.mark.parametrize("job", list(CONTINUOUS))
def test_continuous_job_keeps_running_picks_up_new_messages_and_stops_cleanly(
    spark: Any, metrics: Any, server: Any, tmp_path: Path, job: str
) -> None:
    """``--continuous``: the query stays up with a 1 s trigger, processes messages published
    while it runs, round after round, and stops cleanly; a later run on its checkpoint
    publishes nothing again."""
    module = _example(CONTINUOUS[job][0])
    extra, rounds = CONTINUOUS[job][1], CONTINUOUS[job][2]
    prefix = f"c-{job}"
    streams = {"in": f"{prefix}-in", "pay": f"{prefix}-pay", "out": f"{prefix}-out"}
    names = ["--source", streams["in"], "--sink", streams["out"], *extra]
    if "--payments" in names:
        names[names.index("--payments") + 1] = streams["pay"]
    for stream in ("in", "pay") if job == "stream_join" else ("in",):
        _publish(server, streams[stream], [])  # declared empty: the query starts on nothing
    base = ["--data-dir", str(server.data_dir), "--uri", server.url]
    args = module.arguments([*base, "--checkpoint", str(tmp_path / "ck"), *names, "--continuous"])
    query = module.query(spark, args)
    try:
        while not query.recentProgress:  # the first trigger ran (on no data)
            assert query.isActive, f"the query stopped: {query.exception()}"
            time.sleep(0.2)
        for inputs, expected in rounds:
            for key, bodies in inputs.items():
                _publish(server, streams[key], bodies)
            _wait_for(server, streams["out"], expected, query)
            assert query.isActive
        time.sleep(3)  # a few more triggers on no new data publish nothing more
        assert _end(server, streams["out"]) == rounds[-1][1]
    finally:
        query.stop()
    assert not query.isActive and query.exception() is None
    outputs = [
        bytes(r.body)
        for r in spark.read.format("sievemq")
        .option("stream", streams["out"])
        .load(str(server.data_dir))
        .orderBy("offset")
        .collect()
    ]
    if job == "filter_map":
        assert outputs == [b"A", b"B", b"C"]
    elif job == "word_count":
        counts = [(r["word"], r["count"]) for r in map(json.loads, outputs)]
        assert sorted(counts[:2]) == [("x", 1), ("y", 1)] and counts[2:] == [("x", 2)]
    elif job == "dedup":
        assert [json.loads(o)["id"] for o in outputs] == ["e1", "e2"]
    elif job == "stream_join":
        assert [json.loads(o)["amount"] for o in outputs] == [1.0, 2.0]
    else:
        assert [(w["start"][-6:-1], w["count"]) for w in map(json.loads, outputs)] == [
            ("00:00", 1),
            ("00:20", 1),
        ]
    # the same job run to completion on the same checkpoint: nothing is published again
    _run(module, spark, server, tmp_path / "ck", *names)
    assert _end(server, streams["out"]) == rounds[-1][1]
