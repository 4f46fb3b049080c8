"""The console in a real browser: Debian's headless Chromium driven by Playwright's Python
package (never Playwright's own browser download), against a reference server in a
background thread.

One browser for the module; each test opens a fresh context (no shared cookies).  What is
waited for is what the page shows (Playwright's auto-waiting assertions, bounded), never a
sleep.  A screenshot of each page goes to the test's temporary directory; with
``SEPP_CONSOLE_SCREENSHOTS=DIR`` the queues page is also saved there (how
``docs/_static/console-queues.png`` was made).
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest

from sepp_anyio import EnqueueRequest, JobCtx, Payload, RetryDirective, Worker, connect
from sepp_anyio.server import ServerConfig, ServerThread

CHROMIUM = "/usr/bin/chromium"
if not Path(CHROMIUM).exists():  # pragma: no cover (CI installs it: .ci/run)
    pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")

QUEUE = "emails"
#: Bound on anything the page must come to show (a loaded 2-core machine).
WAIT_MS = 20_000
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
T = TypeVar("T")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    # launch() gives the browser a fresh temporary profile (user-data-dir) of its own.
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    context.set_default_timeout(WAIT_MS)
    try:
        yield context.new_page()
    finally:
        context.close()


def _server(backend: str = "asyncio", **toml: Any) -> ServerThread:
    config = ServerConfig.from_toml(
        {"storage": {"dead_letter_retention_ms": 600_000}, "ui": {"port": 0}, **toml}
    )
    return ServerThread(config, backend="trio" if backend == "trio" else "asyncio")


def off_loop(fn: Callable[[], Any]) -> Any:
    """Run an async function to completion in a thread of its own (Playwright's sync API
    owns this thread's event loop)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(anyio.run, fn).result(timeout=60)


def shot(page: Any, tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 0
    wanted = os.environ.get("SEPP_CONSOLE_SCREENSHOTS")
    if wanted:
        shutil.copy(path, Path(wanted) / f"console-{name}.png")


def _cell(page: Any, field: str) -> Any:
    return page.locator(f'tr[data-queue="{QUEUE}"] td[data-field="{field}"]')


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_queues_page_follows_a_running_worker(page: Any, tmp_path: Path, backend: str) -> None:
    expect = sync_api.expect
    with _server(backend) as server:
        url = server.console_url
        assert url is not None

        async def enqueue() -> None:
            async with connect(server.address) as client:
                for n in range(6):
                    request = EnqueueRequest(QUEUE, "send", payload=Payload.from_json(n))
                    await client.enqueue(request)

        off_loop(enqueue)
        page.goto(url + "queues")
        expect(_cell(page, "ready")).to_have_text("6")
        gate = threading.Event()
        stop = threading.Event()

        async def work() -> None:
            async def send(payload: Payload | None, ctx: JobCtx) -> None:
                await anyio.to_thread.run_sync(gate.wait, 30)

            async with connect(server.address) as client, anyio.create_task_group() as tg:
                worker = Worker(client, [QUEUE], max_in_flight=2, wait=1.0)
                worker.handle("send", send)
                await tg.start(worker.run)
                await anyio.to_thread.run_sync(stop.wait, 60)
                worker.shutdown()

        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(anyio.run, work)
            try:
                # Without reloading: two leased while the handlers wait, then all acked.
                expect(_cell(page, "leased")).to_have_text("2")
                expect(_cell(page, "ready")).to_have_text("4")
                shot(page, tmp_path, "queues")
                gate.set()
                expect(_cell(page, "ack")).to_have_text("6")
                expect(_cell(page, "ready")).to_have_text("0")
                expect(_cell(page, "leased")).to_have_text("0")
                expect(_cell(page, "enqueue")).to_have_text("6")
            finally:
                gate.set()
                stop.set()
                running.result(timeout=60)


def test_open_a_job_and_requeue_its_dead_letter_by_clicking(page: Any, tmp_path: Path) -> None:
    expect = sync_api.expect
    with _server() as server:
        url = server.console_url
        assert url is not None

        async def fail_one() -> tuple[str, str]:
            async with connect(server.address) as client:
                doomed = await client.enqueue(
                    EnqueueRequest(QUEUE, "charge", payload=Payload.from_json({"cents": 250}))
                )
                (job,) = await client.reserve([QUEUE], lease=60, wait=0)
                await client.nack(job.ctx, RetryDirective.dead_letter(), reason="card declined")
                held = await client.enqueue(EnqueueRequest(QUEUE, "send", custom={"n": 1}))
                await client.reserve([QUEUE], lease=300, wait=0, worker_id="worker-7")
                return doomed.job_id, held.job_id

        doomed, held = off_loop(fail_one)
        # A leased job: its holder and the lease counting down.
        page.goto(url + f"queues/{QUEUE}")
        shot(page, tmp_path, "queue")
        page.click(f'a[href="/jobs/{held}"]')
        expect(page.locator("#worker-id")).to_have_text("worker-7")
        first = float(page.locator("#lease-remaining").inner_text())
        expect(page.locator("#lease-remaining")).not_to_have_text(f"{first:.1f}")
        assert float(page.locator("#lease-remaining").inner_text()) < first
        shot(page, tmp_path, "job")
        # The dead letter: requeue, confirm, and the job is ready again.
        page.click('a[href="/dead-letters"]')
        row = page.locator(f'tr[data-job="{doomed}"]')
        expect(row).to_contain_text("card declined")
        shot(page, tmp_path, "dead-letters")
        row.locator("a.requeue").click()
        expect(page.locator("#question")).to_contain_text(doomed)
        shot(page, tmp_path, "confirm")
        page.click("#confirm")
        expect(page).to_have_url(url + f"jobs/{doomed}")
        expect(page.locator("#job-state")).to_have_text("ready")
        expect(page.locator("#job-attempt")).to_have_text("1 of 3")

        async def reserve_again() -> list[str]:
            async with connect(server.address) as client:
                jobs = await client.reserve([QUEUE], lease=60, wait=0)
                return [job.ctx.id for job in jobs]

        assert off_loop(reserve_again) == [doomed]
        page.goto(url + "server")
        expect(page.locator("#store")).to_contain_text("memory")
        shot(page, tmp_path, "server")


def test_log_in_with_a_key_and_no_action_without_the_csrf_token(page: Any, tmp_path: Path) -> None:
    expect = sync_api.expect
    with _server(auth={"api_keys": ["s3cret"]}) as server:
        url = server.console_url
        assert url is not None
        page.goto(url + "dead-letters")
        expect(page).to_have_url(url + "login?next=%2Fdead-letters")
        shot(page, tmp_path, "login")
        page.fill("#key", "wrong")
        page.click("#login")
        expect(page.locator("#login-failed")).to_be_visible()
        page.fill("#key", "s3cret")
        page.click("#login")
        expect(page).to_have_url(url + "dead-letters")
        # The session cookie is HttpOnly: no script reads it.
        assert page.evaluate("document.cookie") == ""
        cookie = page.context.cookies()[0]
        assert (cookie["httpOnly"], cookie["sameSite"]) == (True, "Strict")
        # A forged form (no CSRF token) from the page itself is refused.
        status = page.evaluate(
            """async () => (await fetch("/dead-letters/purge", {method: "POST",
                 headers: {"content-type": "application/x-www-form-urlencoded"},
                 body: "queue=emails"})).status"""
        )
        assert status == 403
