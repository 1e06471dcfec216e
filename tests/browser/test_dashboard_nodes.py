"""The dashboard's Nodes page in chromium (Playwright) against a real two-node cluster (a real
etcd, two `sievemq serve` processes): both nodes listed running with their descriptors,
memory, disk, uptime and the queues each leads; the overview totals both and names them; the
queue list names each queue's node; the Connections and Channels pages show both nodes' (and
close one on the other node); a stopped node is shown stopped."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
from playwright.sync_api import Browser, ConsoleMessage, Locator, Page, expect, sync_playwright

from sievemq.testing import ServerProcess
from sievemq.testing.dashboard import VIEWPORT, chromium_launch, log_in
from sievemq.testing.etcd import EtcdProcess, running_etcd

expect.set_options(timeout=30_000)  # a loaded machine; every wait ends as soon as it holds
FAST = "sessionStorage.setItem('sievemq-refresh-ms', '300')"


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdProcess]:
    with running_etcd(tmp_path_factory.mktemp("etcd")) as server:
        yield server


@pytest.fixture(scope="module")
def nodes(
    etcd: EtcdProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[ServerProcess]]:
    base: Path = tmp_path_factory.mktemp("nodes")
    procs = []
    try:
        for name in ("web1", "web2"):
            args = ("--node-name", name, "--cluster-etcd", etcd.url, "--cluster-port", "0")
            procs.append(ServerProcess(base / name, (*args, "--cluster-lease-ttl", "2")).start())
        yield procs
    finally:
        for proc in procs:
            if proc.running:
                proc.stop()


@pytest.fixture
def page(nodes: list[ServerProcess]) -> Iterator[Page]:
    with sync_playwright() as p:
        browser: Browser = p.chromium.launch(**chromium_launch())
        context = browser.new_context(
            viewport={"width": VIEWPORT["width"], "height": VIEWPORT["height"]}
        )
        context.add_init_script(FAST)
        pg = context.new_page()
        errors: list[str] = []

        def console(m: ConsoleMessage) -> None:
            if m.type == "error":
                errors.append(m.text)

        pg.on("console", console)
        pg.on("pageerror", lambda e: errors.append(str(e)))
        log_in(pg, nodes[0].admin_url)
        yield pg
        assert errors == []
        browser.close()


def _cells(page: Page, name: str) -> Locator:
    """The cells of ``name``'s row of the node table."""
    row = page.locator("#nodes tbody tr").filter(has=page.locator(f'[data-node="{name}"]'))
    return row.locator("td")


def test_the_connections_and_channels_pages_show_every_nodes(
    nodes: list[ServerProcess], page: Page
) -> None:
    params = pika.URLParameters(nodes[1].url)
    params.client_properties = {"connection_name": "on-web2"}
    conn = pika.BlockingConnection(params)
    conn.channel()
    try:
        page.click("#nav a[data-page=connections]")
        expect(page.locator("#connections thead th").nth(3)).to_have_text("Node")
        row = page.locator("#connections tbody tr").filter(has_text="on-web2")
        expect(row.locator("td").nth(3)).to_have_text("web2")
        page.click("#nav a[data-page=channels]")
        expect(page.locator("#channels thead th").nth(2)).to_have_text("Node")
        expect(page.locator("#channels tbody td", has_text="web2").first).to_be_visible()
        # closed from web1's dashboard, on web2
        page.click("#nav a[data-page=connections]")
        row.locator("[data-close]").click()
        expect(row).to_have_count(0)
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker, match="dashboard"):
            conn.process_data_events(time_limit=30)
    finally:
        if conn.is_open:
            conn.close()


def test_the_nodes_page_lists_every_node_of_the_cluster(
    nodes: list[ServerProcess], page: Page
) -> None:
    web2 = nodes[1]
    conn = pika.BlockingConnection(pika.URLParameters(web2.url))
    ch = conn.channel()
    for name in ("n-orders", "n-jobs"):
        ch.queue_declare(name, durable=True)
    conn.close()
    page.click("#nav a[data-page=nodes]")
    expect(page).to_have_title("Nodes | SieveMQ web1")
    headers = page.locator("#nodes thead th")
    expect(headers).to_have_text(
        [
            "Name",
            "Running",
            "File descriptors",
            "Socket descriptors",
            "Memory",
            "Disk space free",
            "Uptime",
            "Queues led",
        ]
    )
    first, second = _cells(page, "web1"), _cells(page, "web2")
    expect(first.nth(1)).to_have_text("running")
    expect(second.nth(1)).to_have_text("running")
    # web2 publishes its record every 10 s: its queues show at its next publication
    expect(second.nth(7)).to_have_text("2", timeout=60_000)
    expect(second.nth(2)).to_have_text(re.compile(r"^\d[\d,]* / \d[\d,]*$"))
    expect(second.nth(4)).to_contain_text("iB / ")
    expect(second.nth(6)).to_have_text(re.compile(r"^\d+[smhd]"))
    expect(first.nth(7)).to_have_text("0")
    # the overview's totals are the cluster's, and say whose (web2's part as published)
    page.click("#nav a[data-page=overview]")
    expect(page.locator("#totals-from")).to_contain_text("Totals of 2 nodes: web1 live, web2 ")
    expect(page.locator('#totals .tile[data-key="queues"] .v')).to_have_text("2")
    # the queue list names each queue's node in a cluster (a single node has no such column)
    page.click("#nav a[data-page=queues]")
    row = page.locator("#queues tbody tr").filter(has_text="n-orders")
    expect(page.locator("#queues thead th").nth(2)).to_have_text("Node")
    expect(row.locator("td").nth(2)).to_have_text("web2")
    web2.stop()
    page.click("#nav a[data-page=nodes]")
    expect(second.nth(1)).to_have_text("stopped")
    expect(second.nth(2)).to_have_text("–")
