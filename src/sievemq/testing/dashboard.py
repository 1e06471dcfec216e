"""The admin dashboard in a real browser: Debian's chromium, driven by Playwright.

Shared by the browser tests (``tests/browser``) and ``bench/dashboard_cost.py``. Playwright
is not imported here (``sievemq.testing`` pulls in no client library): its objects are
passed in, and anything with a page's ``goto``/``fill``/``click``/``wait_for_selector``
will do::

    with sync_playwright() as p:
        browser = p.chromium.launch(**chromium_launch())
        page = browser.new_context(viewport=VIEWPORT).new_page()
        log_in(page, admin_url)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

CHROMIUM = (
    "/usr/bin/chromium"  # Debian's (`apt-get install -y chromium`); never `playwright install`
)
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
VIEWPORT = {"width": 1280, "height": 900}


class Page(Protocol):
    """What the login needs of a Playwright (sync API) page."""

    def goto(self, url: str) -> object: ...
    def fill(self, selector: str, value: str) -> None: ...
    def click(self, selector: str) -> None: ...
    def wait_for_selector(self, selector: str) -> object: ...


def chromium_launch() -> dict[str, Any]:
    """Keyword arguments of ``playwright.chromium.launch`` for Debian's headless chromium;
    AssertionError naming the fix when it is not installed."""
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} missing: run `apt-get install -y chromium`"
    return {"executable_path": CHROMIUM, "headless": True, "args": list(CHROMIUM_ARGS)}


def submit_login(page: Page, admin_url: str, user: str, password: str) -> None:
    """Open the dashboard and submit its login form (without waiting for the outcome)."""
    page.goto(admin_url + "/")
    page.fill("input[name=user]", user)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")


def log_in(page: Page, admin_url: str, user: str = "guest", password: str = "guest") -> None:
    """Log in to the dashboard and wait until it shows the user (its log-out button)."""
    submit_login(page, admin_url, user, password)
    page.wait_for_selector("#who button")
