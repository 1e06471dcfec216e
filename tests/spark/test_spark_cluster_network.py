"""The network mode against a real 3-node cluster: one URI, streams led by different nodes.

A real etcd and three real nodes (the cluster tests' fixtures); each stream is declared on,
so led by, another node. Spark is given node a's URI only: the driver and every task ask
Metadata there and read each stream from its leader, batch and streaming; filter values
go to the leader, which skips chunks by Bloom (its own admin API counts them). The streams
have no replicas (``x-initial-cluster-size`` 1): with one, a node holding a replica reads
its own copy (tests/integration/test_cluster/test_replication.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.etcd import running_etcd
from tests.integration.test_cluster.cluster_helpers import get, started_nodes, until

from .spark_data import parquet_available_now
from .test_spark_network import _filter_stats, _publish_amqp, _uri

# the JVM start (in the first test's setup) takes minutes on a loaded 2-core machine
pytestmark = pytest.mark.timeout(1200)

LEADERS = {"east": "a", "west": "b", "north": "c"}
ALONE = {"x-initial-cluster-size": 1}  # no replica: every read goes to the leader


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    with running_etcd(tmp_path_factory.mktemp("etcd")) as etcd:
        base = tmp_path_factory.mktemp("nodes")
        with started_nodes(etcd, base, ("a", "b", "c")) as procs:
            for stream, leader in LEADERS.items():
                _publish_amqp(procs[leader], stream, 0, 300, **ALONE)  # declared there: led there
            for stream, leader in LEADERS.items():
                until(
                    lambda s=stream, n=leader: (
                        {q["name"]: q["node"] for q in get(procs["a"], "/api/queues")}.get(s) == n
                    ),
                    f"node a knows {stream} is led by {leader}",
                )
            yield procs


def test_one_uri_reads_every_leader_batch_and_filtered(
    spark: Any, metrics: Any, nodes: dict[str, ServerProcess]
) -> None:
    uri = _uri(nodes["a"])  # one node's address: Metadata sends each read to the leader

    def read(stream: str, **options: str) -> Any:
        return spark.read.format("sievemq").options(uri=uri, stream=stream, **options).load()

    for stream in LEADERS:
        rows = sorted(read(stream, minPartitions="2").collect(), key=lambda r: r.offset)
        assert [bytes(r.body) for r in rows] == [f"m{i}".encode() for i in range(300)], stream
        assert rows[0].routing_key == stream

    # west is led by b: the filter goes there and b skips the other regions' chunks
    leader = nodes["b"]
    before = _filter_stats(leader, "west")["chunks_skipped"]
    us = read("west", filterValues="us").select("offset", "filter_value").collect()
    assert sorted(r.offset for r in us) == list(range(100, 200))
    assert _filter_stats(leader, "west")["chunks_skipped"] - before >= 150
    # a pushed-down WHERE on filter_value through c's stream does the same on c
    before = _filter_stats(nodes["c"], "north")["chunks_skipped"]
    assert read("north").where("filter_value = 'ap'").count() == 100
    assert _filter_stats(nodes["c"], "north")["chunks_skipped"] - before >= 150


def test_streaming_reads_a_stream_led_by_another_node(
    spark: Any, metrics: Any, nodes: dict[str, ServerProcess], tmp_path: Path
) -> None:
    uri = _uri(nodes["a"])
    out, checkpoint = tmp_path / "out", tmp_path / "ck"

    def once() -> list[int]:
        frame = (
            spark.readStream.format("sievemq")
            .options(
                uri=uri,
                stream="north",
                startingOffsets="earliest",
                maxOffsetsPerTrigger="200",
                filterValues="eu",
            )
            .load()
            .select("offset", "filter_value", "body")
        )
        return parquet_available_now(frame, out, checkpoint)

    assert sum(once()) == 100  # the eu rows of 300 (0-99), read from c
    _publish_amqp(nodes["c"], "north", 300, 100, **ALONE)  # offsets 300-399: region eu again
    assert sum(once()) == 100  # only what is new
    offsets = sorted(pq.read_table(out).column("offset").to_pylist())
    assert offsets == [*range(100), *range(300, 400)]
