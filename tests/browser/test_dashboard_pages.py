"""The dashboard's RabbitMQ pages in chromium (Playwright) against a real server: the lists
show what clients declared, the forms change what the API answers (and show its validation
messages), the charts get points after publishing, links survive a reload, and a phone-width
window is usable. The pages refresh every 300 ms here (the ``sievemq-refresh-ms`` setting)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pika
import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, expect, sync_playwright

from sievemq.testing import ServerProcess
from sievemq.testing.dashboard import VIEWPORT, chromium_launch, log_in

expect.set_options(timeout=15_000)  # a loaded machine renders slowly; waits end when they hold
FAST = "sessionStorage.setItem('sievemq-refresh-ms', '300')"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("pages") / "data").start()
    yield proc
    assert proc.stop() == 0


@pytest.fixture(scope="module")
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.admin_url, auth=("guest", "guest")) as client:
        yield client


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        b = p.chromium.launch(**chromium_launch())
        yield b
        b.close()


def _page(browser: Browser, server: ServerProcess, width: int = VIEWPORT["width"]) -> Page:
    context = browser.new_context(viewport={"width": width, "height": VIEWPORT["height"]})
    context.add_init_script(FAST)
    pg = context.new_page()
    errors: list[str] = []
    refused = "the server responded with a status of 400"  # a form's validation message

    def console(m: ConsoleMessage) -> None:
        if m.type == "error" and refused not in m.text:
            errors.append(m.text)

    pg.on("console", console)
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.errors = errors  # type: ignore[attr-defined]
    log_in(pg, server.admin_url)
    return pg


@pytest.fixture
def page(browser: Browser, server: ServerProcess) -> Iterator[Page]:
    pg = _page(browser, server)
    yield pg
    assert pg.errors == []  # type: ignore[attr-defined]  # e.g. no favicon 404
    pg.context.close()


def _connection(server: ServerProcess, name: str) -> pika.BlockingConnection:
    params = pika.ConnectionParameters(
        host=server.host, port=server.amqp_port, client_properties={"connection_name": name}
    )
    return pika.BlockingConnection(params)


def _submit(page: Page, form: str, **values: str) -> None:
    """Fill a dashboard form (inputs and selects by name) and submit it."""
    for name, value in values.items():
        field = page.locator(f"#{form} [name='{name}']")
        if field.evaluate("e => e.tagName") == "SELECT":
            field.select_option(value)
        else:
            field.fill(value)
    page.click(f"#{form} button")


def _wait_last(page: Page, chart: str, condition: str) -> None:
    """Wait until the chart's last point (``l``, by series label) meets ``condition``."""
    page.wait_for_function(
        f"() => {{ const e = document.querySelector(\"[data-chart='{chart}']\");"
        f" const l = e && JSON.parse(e.dataset.last); return l && ({condition}) }}"
    )


def _last(page: Page, chart: str) -> dict[str, float]:
    value = page.locator(f"[data-chart='{chart}']").get_attribute("data-last")
    return json.loads(value or "{}")


def test_favicon_and_titles_name_the_page_and_the_node(
    page: Page, server: ServerProcess, http: httpx.Client
) -> None:
    icon = httpx.get(server.admin_url + "/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
    node = http.get("/api/overview").json()["node"]
    expect(page).to_have_title(f"Overview | SieveMQ {node}")
    page.click("#nav >> text=Channels")
    expect(page).to_have_title(f"Channels | SieveMQ {node}")
    assert page.url.endswith("#/channels")


def test_queue_list_pages_sorts_and_filters_through_the_api(page: Page, http: httpx.Client) -> None:
    for i in range(60):
        kind = ("classic", "quorum", "stream")[i % 3]
        args = {"x-queue-type": kind}
        r = http.put(f"/api/queues/%2F/list-{i:02d}", json={"durable": True, "arguments": args})
        assert r.status_code == 201
    page.goto(page.url.split("#")[0] + "#/queues?name=list-&page_size=20")
    rows = page.locator("#queues tbody tr")
    expect(rows).to_have_count(20)
    expect(page.locator("#queues .pager")).to_contain_text("Page 1 of 3: 60 shown of")
    expect(rows.first).to_contain_text("list-00")
    page.click("#queues .pager >> text=Next")
    expect(rows.first).to_contain_text("list-20")
    assert "page=2" in page.url
    page.reload()  # the URL says the page, the filter and the sort
    expect(rows.first).to_contain_text("list-20")
    page.click("#queues th a[data-sort=name]")  # name again: descending, back on page 1
    expect(rows.first).to_contain_text("list-59")
    page.fill("#queues input[name=name]", "^list-1[0-4]$")
    page.check("#queues input[name=use_regex]")
    page.click("#queues form button")
    expect(rows).to_have_count(5)
    expect(rows.filter(has_text="quorum")).to_have_count(2)  # list-10, list-13
    expect(rows.filter(has_text="stream")).to_have_count(2)  # list-11, list-14
    expect(page.locator("#queues .pager")).to_contain_text("5 shown of")
    page.fill("#queues input[name=name]", "(")  # the API refuses it; the page says why
    page.click("#queues form button")
    expect(page.locator("#queues .error")).to_contain_text("invalid regex '('")
    page.click("#queues >> text=Show the whole list")  # the sort stays: name, descending
    expect(rows.first).to_contain_text("list-59")


def test_declaring_a_queue_in_the_form_shows_up_in_the_api(page: Page, http: httpx.Client) -> None:
    page.click("#nav >> text=Queues and Streams")
    _submit(page, "add-queue", type="quorum", name="from-the-form", arguments='{"x-max-length": 5')
    expect(page.locator(".form .error")).to_contain_text("Arguments is not JSON")
    _submit(page, "add-queue", arguments='{"x-max-length": 5}')
    expect(page.locator(".form .ok")).to_contain_text("queue from-the-form declared")
    q = http.get("/api/queues/%2F/from-the-form").json()
    assert q["type"] == "quorum" and q["arguments"]["x-max-length"] == 5


def test_classic_queue_page_publish_get_purge_delete_and_charts(
    page: Page, http: httpx.Client
) -> None:
    http.put("/api/queues/%2F/work", json={"durable": True})
    page.goto(page.url.split("#")[0] + "#/queues/%2F/work")
    expect(page.locator("h1")).to_contain_text("Queue work")
    for i in range(3):
        page.fill("#publish-to-queue input[name=payload]", f"job {i} <i>plain</i>")
        page.click("#publish-to-queue button")
        expect(page.locator("#publish-to-queue + .status")).to_have_text("Message published.")
        page.locator("#publish-to-queue + .status").evaluate("e => e.replaceChildren()")
    # the depth chart gets the 3 messages on its next refresh, the rate chart the publishes
    expect(page.locator(".tile[data-key=ready] .v")).to_have_text("3")
    _wait_last(page, "queue:/:work:depth", "l.ready === 3")
    _wait_last(page, "queue:/:work:rates", "l.published > 0")
    depth = page.locator("[data-chart='queue:/:work:depth']")
    assert int(depth.get_attribute("data-points") or 0) >= 2
    page.fill("#get-messages input[name=count]", "2")
    page.click("#get-messages button")
    got = page.locator("#got tbody tr")
    expect(got).to_have_count(2)
    expect(got.first).to_contain_text("job 0 <i>plain</i>")  # text, never HTML
    assert page.locator("#got i").count() == 0
    expect(page.locator("#queue-bindings")).to_contain_text("(default exchange)")
    page.once("dialog", lambda d: d.accept())
    page.click("#purge")
    expect(page.locator(".tile[data-key=ready] .v")).to_have_text("0")
    assert http.get("/api/queues/%2F/work").json()["messages"] == 0
    page.once("dialog", lambda d: d.accept())
    page.click("#delete-queue")
    expect(page.locator("h1")).to_have_text("Queues and Streams")
    assert http.get("/api/queues/%2F/work").status_code == 404


def test_exchanges_declare_bind_and_publish(page: Page, http: httpx.Client) -> None:
    http.put("/api/queues/%2F/audit", json={"durable": True})
    page.click("#nav >> text=Exchanges")
    expect(page.locator("#exchanges")).to_contain_text("amq.topic")
    page.fill("#add-exchange input[name=name]", "events")
    page.select_option("#add-exchange select[name=type]", "topic")
    page.click("#add-exchange button")
    expect(page.locator("#exchanges")).to_contain_text("events")
    assert http.get("/api/exchanges/%2F/events").json()["type"] == "topic"
    page.click("#exchanges a:text-is('events')")
    expect(page.locator("h1")).to_contain_text("Exchange events")
    _submit(page, "add-binding", destination="audit", routing_key="order.*")
    expect(page.locator("#bindings-source")).to_contain_text("order.*")
    bindings = http.get("/api/exchanges/%2F/events/bindings/source").json()
    assert [(b["destination"], b["routing_key"]) for b in bindings] == [("audit", "order.*")]
    _submit(page, "publish", routing_key="order.created", payload="hello")
    expect(page.locator("#publish + .status")).to_have_text("Message published.")
    _submit(page, "publish", routing_key="nothing.here")
    expect(page.locator("#publish + .status")).to_have_text("Message published, but not routed.")
    assert http.get("/api/queues/%2F/audit").json()["messages"] == 1
    page.click("#bindings-source button:text('Unbind')")
    expect(page.locator("#bindings-source")).to_contain_text("no bindings")
    assert http.get("/api/exchanges/%2F/events/bindings/source").json() == []


def test_connections_and_channels_list_what_clients_opened(
    page: Page, server: ServerProcess, http: httpx.Client
) -> None:
    conn = _connection(server, "pages-client")
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=7)
        ch.confirm_delivery()
        page.click("#nav >> text=Connections")
        expect(page.locator("#connections tr", has_text="pages-client")).to_have_count(1)
        names = [c["name"] for c in http.get("/api/connections").json()]
        [name] = [n for n in names if "pages-client" in http.get(f"/api/connections/{n}").text]
        page.click("#nav >> text=Channels")
        row = page.locator("#channels tbody tr", has_text=f"{name} (1)")
        expect(row).to_have_count(1)
        expect(row.locator("td").nth(3)).to_have_text("C")  # confirm mode
        expect(row.locator("td").nth(5)).to_have_text("7")
    finally:
        conn.close()


def test_admin_forms_change_the_api_and_show_its_validation_messages(
    page: Page, http: httpx.Client
) -> None:
    page.click("#nav >> text=Admin")
    expect(page.locator("nav.tabs a.active")).to_have_text("Users")
    page.click("nav.tabs >> text=Virtual Hosts")
    _submit(
        page,
        "add-vhost",
        name="staging",
        description="pre-release",
        tags="eu, test",
        default_queue_type="quorum",
    )
    row = page.locator("#vhosts tbody tr", has_text="staging")
    expect(row).to_contain_text("pre-release")
    expect(row).to_contain_text("quorum")
    staging = http.get("/api/vhosts/staging").json()
    assert staging["metadata"] == {
        "description": "pre-release",
        "tags": ["eu", "test"],
        "default_queue_type": "quorum",
    }

    page.click("nav.tabs >> text=Policies")
    cap = '{"max-length": 10}'
    _submit(page, "add-policy", vhost="staging", name="cap", pattern="(", definition=cap)
    expect(page.locator(".form .error")).to_contain_text("pattern should be regular expression")
    _submit(page, "add-policy", pattern="^orders")
    expect(page.locator("#policies")).to_contain_text("^orders")
    policy = http.get("/api/policies/staging/cap").json()
    assert policy["definition"] == {"max-length": 10} and policy["pattern"] == "^orders"
    assert page.url.endswith("#/admin/policies")
    page.once("dialog", lambda d: d.accept())
    page.click("#policies button[data-policy=cap]")
    expect(page.locator("#policies")).to_contain_text("no policies")
    assert http.get("/api/policies/staging/cap").status_code == 404

    page.click("nav.tabs >> text=Limits")
    _submit(page, "set-vhost-limit", owner="staging", value="lots")
    expect(page.locator(".form .error")).to_contain_text("max-connections should be a number")
    _submit(page, "set-vhost-limit", limit="max-queues", value="12")
    expect(page.locator("#vhost-limits")).to_contain_text("max-queues")
    assert http.get("/api/vhost-limits/staging").json()[0]["value"] == {"max-queues": 12}

    page.click("nav.tabs >> text=Users")
    _submit(page, "set-permission", vhost="staging", write="^amq\\.gen")
    expect(page.locator("#permissions")).to_contain_text("^amq\\.gen")
    perm = http.get("/api/permissions/staging/guest").json()
    assert perm["write"] == "^amq\\.gen" and perm["read"] == ".*"


def test_overview_charts_get_points_after_publishing(page: Page, server: ServerProcess) -> None:
    conn = _connection(server, "chart-publisher")
    try:
        ch = conn.channel()
        ch.queue_declare("charted", durable=True)
        ch.confirm_delivery()
        for _ in range(50):
            ch.basic_publish("", "charted", b"x" * 100)
        chart = page.locator("[data-chart='overview:rates']")
        expect(chart).to_be_visible()
        _wait_last(page, "overview:rates", "l.published > 0 && l.confirmed > 0")
        _wait_last(page, "overview:depth", "l.total >= 50")
        assert int(chart.get_attribute("data-points") or 0) >= 2
        assert chart.locator("canvas").count() == 1  # drawn by uPlot
    finally:
        conn.close()


def test_overview_charts_open_with_the_node_sampled_past(
    browser: Browser, server: ServerProcess, http: httpx.Client
) -> None:
    """A new tab that never refreshes still draws the sampler's last rounds (history)."""
    deadline = time.monotonic() + 60  # the sampler's 5 s rounds, on a loaded machine
    while len(http.get("/api/overview/history").json()) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    context = browser.new_context(viewport=VIEWPORT)
    context.add_init_script("sessionStorage.setItem('sievemq-refresh-ms', '600000')")
    pg = context.new_page()
    log_in(pg, server.admin_url)
    chart = pg.locator("[data-chart='overview:rates']")
    expect(chart).to_be_visible()
    # the seeded rounds plus the page's own point; without the history there would be one
    assert int(chart.get_attribute("data-points") or 0) >= 3
    context.close()


def test_stream_page_charts_what_filtering_saves(
    page: Page, server: ServerProcess, http: httpx.Client
) -> None:
    http.put("/api/streams/%2F/regions", json={"arguments": {"x-stream-filter-size-bytes": 32}})
    for i in range(30):  # one chunk each: 10 of each region
        region = ("emea", "amer", "apac")[i % 3]
        body = {"payload": f"{region} {i} " + "x" * 500, "filter_value": region}
        assert http.post("/api/streams/%2F/regions/messages", json=body).status_code < 300
    conn = _connection(server, "filtered-reader")
    got: list[bytes] = []
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=100)
        args = {"x-stream-offset": "first", "x-stream-filter": "apac"}
        ch.basic_consume("regions", lambda c, m, p, b: got.append(b), arguments=args)
        while len(got) < 10:
            conn.process_data_events(time_limit=0.1)
        page.goto(page.url.split("#")[0] + "#/streams/%2F/regions")
        expect(page.locator("#consumers")).to_contain_text("apac")
        bytes_chart = "stream:/:regions:filter:bytes"
        _wait_last(page, bytes_chart, "l.delivered > 0 && l['unfiltered reader'] > 2 * l.read")
        chunks = _last(page, "stream:/:regions:filter:chunks")
        assert chunks["skipped by Bloom"] >= 15 and chunks["scanned"] >= 30
        msgs = _last(page, "stream:/:regions:filter:msgs")
        assert msgs["matched"] == 10 and msgs["skipped by Bloom (never read)"] >= 15
    finally:
        conn.close()


def test_phone_width_window(browser: Browser, server: ServerProcess) -> None:
    pg = _page(browser, server, width=390)
    try:
        for where in ("#/overview", "#/queues", "#/admin/policies"):
            pg.goto(pg.url.split("#")[0] + where)
            expect(pg.locator("h1")).to_be_visible()
            pg.wait_for_timeout(300)  # let the charts take their width
            width = pg.evaluate("document.documentElement.scrollWidth")
            assert width <= 390, (where, width)  # nothing wider than the screen
        expect(pg.locator("#nav >> text=Admin")).to_be_visible()
        assert pg.errors == []  # type: ignore[attr-defined]
    finally:
        pg.context.close()
