"""The web dashboard in a real browser: Playwright (PyPI) driving Debian's chromium against a
real server: login, the overview, a stream's page and message browser, closing a connection,
adding a user. (The RabbitMQ pages: test_dashboard_pages.py; the screenshots in docs/ are
made by ``python -m sievemq.testing.screenshots``.)"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pika
import pika.exceptions
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright
from rstream import Consumer, OffsetSpecification, OffsetType

from sievemq.testing import ServerProcess
from sievemq.testing.dashboard import VIEWPORT, chromium_launch, log_in, submit_login

# a loaded machine renders slowly: assertions wait up to 15 s (they end as soon as they hold)
expect.set_options(timeout=15_000)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("dash") / "data").start()
    http = httpx.Client(base_url=proc.admin_url, auth=("guest", "guest"))
    http.put("/api/streams/%2F/orders", json={"arguments": {"x-stream-filter-size-bytes": 32}})
    for i in range(30):
        region = ("emea", "amer", "apac")[i % 3]
        http.post(
            "/api/streams/%2F/orders/messages",
            json={
                "payload": f"order {i} <b>not bold</b>",
                "filter_value": region,
                "properties": {"headers": {"region": region, "n": i}},
            },
        )
    http.close()
    yield proc
    assert proc.stop() == 0


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:  # `make test` installs Debian's chromium when it is missing
        b = p.chromium.launch(**chromium_launch())
        yield b
        b.close()


@pytest.fixture
def page(browser: Browser, server: ServerProcess) -> Iterator[Page]:
    context = browser.new_context(viewport=VIEWPORT)
    pg = context.new_page()
    log_in(pg, server.admin_url)
    expect(pg.locator("#who")).to_contain_text("guest (administrator)")
    yield pg
    context.close()


def test_login_refuses_a_bad_password(browser: Browser, server: ServerProcess) -> None:
    pg = browser.new_page()
    submit_login(pg, server.admin_url, "guest", "nope")
    expect(pg.locator("#login-error")).to_have_text("Login failed")
    assert pg.locator("#nav").is_hidden()
    pg.close()


def test_overview(page: Page) -> None:
    expect(page.locator("h1")).to_have_text("Overview")
    expect(page.locator(".tile[data-key=queues] .v")).to_have_text("1")
    expect(page.locator(".tile[data-key=messages] .v")).to_have_text("30")
    expect(page.locator("#listeners")).to_contain_text("amqp")


def test_stream_page_and_message_browser(page: Page, server: ServerProcess) -> None:
    page.click("#nav >> text=Queues and Streams")
    page.click("a:text('orders')")
    expect(page.locator("h1")).to_contain_text("Stream orders")
    expect(page.locator(".tile[data-key=messages] .v")).to_have_text("30")
    rows = page.locator("#messages tbody tr")
    expect(rows).to_have_count(20)
    # newest first by default; payload shown as text, never as HTML
    expect(rows.first.locator("td").first).to_have_text("29")
    expect(rows.first).to_contain_text("order 29 <b>not bold</b>")
    assert page.locator("#messages b").count() == 0
    page.fill("#browse input[name=filter]", "apac")
    page.click("#browse button")
    expect(rows).to_have_count(10)
    page.fill("#browse input[name=filter]", "")
    page.fill("#browse input[name=sql]", "region = 'emea' AND n >= 27")
    page.click("#browse button")
    expect(rows).to_have_count(1)
    expect(rows.first.locator("td").first).to_have_text("27")
    page.fill("#browse input[name=sql]", "region = ")
    page.click("#browse button")
    expect(page.locator("#messages .error")).to_contain_text("invalid sql")
    page.fill("#browse input[name=sql]", "")
    page.fill("#browse input[name=offset]", "5")
    page.fill("#browse input[name=limit]", "3")
    page.click("#browse button")
    expect(rows).to_have_count(3)
    expect(rows.last.locator("td").first).to_have_text("5")
    expect(page.locator("#advice")).to_contain_text("recommended size")
    page.fill("#browse input[name=offset]", "")
    page.fill("#browse input[name=limit]", "20")
    page.click("#browse button")
    page.click("#nav >> text=Queues and Streams")
    expect(page.locator("#queues")).to_contain_text("orders")


def test_connections_page_closes_a_connection(page: Page, server: ServerProcess) -> None:
    conn = pika.BlockingConnection(
        pika.ConnectionParameters(
            host=server.host,
            port=server.amqp_port,
            client_properties={"connection_name": "dashboard-victim"},
        )
    )
    page.click("#nav >> text=Connections")
    row = page.locator("tr", has_text="dashboard-victim")
    expect(row).to_have_count(1)
    row.locator("button").click()
    closed = None
    deadline = time.monotonic() + 5
    while closed is None and time.monotonic() < deadline:
        try:
            conn.process_data_events(0.1)
        except pika.exceptions.ConnectionClosedByBroker as error:
            closed = (error.reply_code, error.reply_text)
    assert closed == (320, "CONNECTION_FORCED - Closed from the SieveMQ dashboard")
    page.click("#nav >> text=Overview")
    page.click("#nav >> text=Connections")
    expect(page.locator("tr", has_text="dashboard-victim")).to_have_count(0)


def test_users_page_adds_a_user_who_can_log_in(page: Page, server: ServerProcess) -> None:
    page.click("#nav >> text=Admin")
    expect(page.locator("table").first).to_contain_text("rabbit_password_hashing_sha256")
    page.fill("#add-user input[name=name]", "carol")
    page.fill("#add-user input[name=password]", "pw1")
    page.fill("#add-user input[name=tags]", "monitoring")
    page.click("#add-user button")
    expect(page.locator("table").first).to_contain_text("carol")
    expect(page.locator("table").nth(1)).to_contain_text("carol")
    r = httpx.get(server.admin_url + "/api/whoami", auth=("carol", "pw1"))
    assert r.json() == {"name": "carol", "tags": ["monitoring"]}


def test_stream_page_shows_which_single_active_consumer_is_active(
    page: Page, server: ServerProcess
) -> None:
    """Two rstream consumers of one single-active-consumer group on "orders" (run on their
    own event loop in a thread): the stream page lists both, one active and one waiting."""
    ready, stop, failed = threading.Event(), threading.Event(), []
    delivered = [0]

    async def consumers() -> None:
        sac = {"single-active-consumer": "true", "name": "dash-group"}

        def count(message: Any, ctx: Any) -> None:
            delivered[0] += 1

        async def from_first(active: bool, ctx: Any) -> OffsetSpecification:
            return OffsetSpecification(OffsetType.FIRST, 0)

        opts: dict[str, Any] = {"username": "guest", "password": "guest"}
        async with (
            Consumer(server.host, server.stream_port, connection_name="dash-one", **opts) as c1,
            Consumer(server.host, server.stream_port, connection_name="dash-two", **opts) as c2,
        ):
            for c in (c1, c2):
                await c.subscribe(
                    "orders",
                    count,
                    properties=sac,
                    consumer_update_listener=from_first,
                )
            # the stream page does not refresh: it is opened once all 30 were delivered
            deadline = time.monotonic() + 20
            while delivered[0] < 30 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            ready.set()
            while not stop.is_set():
                await asyncio.sleep(0.05)

    def run() -> None:
        try:
            asyncio.run(consumers())
        except Exception as error:  # reported by the assertion below
            failed.append(error)
            ready.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        assert ready.wait(20) and not failed, failed
        page.click("#nav >> text=Queues and Streams")
        page.click("a:text('orders')")
        rows = page.locator("#stream-consumers tbody tr")
        expect(rows).to_have_count(2)
        expect(rows.filter(has_text="dash-group")).to_have_count(2)
        active = rows.filter(has=page.locator("td:nth-child(3)", has_text="active"))
        waiting = rows.filter(has=page.locator("td:nth-child(3)", has_text="waiting"))
        expect(active).to_have_count(1)
        expect(waiting).to_have_count(1)
        # the active one got every message (consumed), the waiting one none
        expect(active.locator("td:nth-child(5)")).to_have_text("30")
        expect(waiting.locator("td:nth-child(5)")).to_have_text("0")
    finally:
        stop.set()
        thread.join(10)
