"""Every route of the console without a browser, on real loopback sockets, both backends:
status codes, the JSON the live view polls, the actions and their CSRF token, the login when
the server has keys, and bad or hostile input answered with an error page."""

from __future__ import annotations

import uuid

import pytest

from sepp_anyio import EnqueueRequest, Payload, RetryDirective
from sepp_anyio.server._console._server import MAX_BODY_BYTES, MAX_HEADER_BYTES

from ._helpers import QUEUE, Browser, console, csrf_of

pytestmark = pytest.mark.anyio


async def test_the_queues_page_and_its_json_show_counts_and_rates() -> None:
    async with console() as (client, _engine, server):
        for n in range(3):
            await client.enqueue(EnqueueRequest(QUEUE, "send", payload=Payload.from_json(n)))
        (job,) = await client.reserve([QUEUE], lease=60, wait=0, worker_id="w-1")
        await client.ack(job.ctx)
        browser = Browser(server.port)
        root = await browser.get("/")
        assert (root.status, root.headers["location"]) == (303, "/queues")
        page = await browser.get("/queues")
        assert page.status == 200
        assert page.headers["content-type"].startswith("text/html")
        # The first answer opened a session; the browser sent its cookie back since.
        assert "HttpOnly; SameSite=Strict" in root.headers["set-cookie"]
        assert "set-cookie" not in page.headers
        assert f'data-queue="{QUEUE}"' in page.text
        live = await browser.get("/api/queues")
        assert live.status == 200
        (row,) = live.json()["queues"]
        assert row["name"] == QUEUE
        assert (row["ready"], row["scheduled"], row["leased"], row["dead_letters"]) == (2, 0, 0, 0)
        assert row["rates"] == {"enqueue": 3, "ack": 1, "nack": 0}
        assert row["oldest_ready_age_s"] is not None and row["oldest_ready_age_s"] >= 0


async def test_a_queues_jobs_are_paginated_and_filtered() -> None:
    async with console(ui={"page_size": 2}) as (client, _engine, server):
        for n in range(3):
            await client.enqueue(
                EnqueueRequest(QUEUE, "send" if n else "other", payload=Payload.from_json({"n": n}))
            )
        await client.enqueue(EnqueueRequest(QUEUE, "send", delay=3600, idempotency_key="k-9"))
        browser = Browser(server.port)
        first = await browser.get(f"/queues/{QUEUE}")
        assert first.status == 200
        assert first.text.count('href="/jobs/') == 2
        assert "cursor=2" in first.text
        second = await browser.get(f"/queues/{QUEUE}?cursor=2")
        assert second.text.count('href="/jobs/') == 2
        assert "k-9" in second.text and "Next page" not in second.text
        scheduled = await browser.get(f"/queues/{QUEUE}?state=scheduled")
        assert scheduled.text.count('href="/jobs/') == 1 and "k-9" in scheduled.text
        other = await browser.get(f"/queues/{QUEUE}?type=other")
        assert other.text.count('href="/jobs/') == 1
        assert "{&#34;n&#34;: 0}" in other.text  # the payload preview, escaped


async def test_a_job_page_shows_every_field_and_the_lease_holder() -> None:
    async with console() as (client, _engine, server):
        request = EnqueueRequest(
            QUEUE,
            "send",
            payload=Payload.from_json({"to": "a@example.com"}),
            custom={"tenant": "t-1", "n": 5},
            idempotency_key="key-1",
            priority=7,
        )
        ack = await client.enqueue(request)
        browser = Browser(server.port)
        ready = await browser.get(f"/jobs/{ack.job_id}")
        assert ready.status == 200
        for text in ("send", "ready", "key-1", "tenant", "t-1", "&#34;to&#34;: &#34;a@example.com"):
            assert text in ready.text
        await client.reserve([QUEUE], lease=30, wait=0, worker_id="worker-42")
        leased = await browser.get(f"/jobs/{ack.job_id}")
        assert "worker-42" in leased.text
        assert 'id="lease-remaining" data-remaining-ms="' in leased.text


async def test_bad_job_ids_and_unknown_pages_get_error_pages() -> None:
    async with console() as (_client, engine, server):
        browser = Browser(server.port)
        missing = await browser.get(f"/jobs/{uuid.uuid4()}")
        assert missing.status == 404 and "no job" in missing.text
        bad = await browser.get("/jobs/not-a-uuid")
        assert bad.status == 400 and "not a job id" in bad.text
        assert (await browser.get("/nope")).status == 404
        assert (await browser.get("/static/nope.js")).status == 404
        assert (await browser.get(f"/queues/{QUEUE}?state=gone")).status == 400
        assert (await browser.get(f"/queues/{QUEUE}?cursor=-1")).status == 400
        too_long = "q" * (engine.config.limits.max_queue_name_bytes + 1)
        assert (await browser.get(f"/queues/{too_long}")).status == 400
        assert (await browser.get("/dead-letters/confirm?action=explode")).status == 400
        not_utf8 = await browser.get("/queues/%ff%fe")
        assert not_utf8.status == 400 and "UTF-8" in not_utf8.text
        for page in (missing, bad, not_utf8):
            assert "Traceback" not in page.text


async def test_payloads_that_are_not_what_their_encoding_says_are_still_shown() -> None:
    async with console() as (client, _engine, server):
        broken = await client.enqueue(
            EnqueueRequest(QUEUE, "t", payload=Payload(b"\xff\xfe{", "application/json"))
        )
        text = await client.enqueue(
            EnqueueRequest(QUEUE, "t", payload=Payload(b"{nope", "application/json"))
        )
        browser = Browser(server.port)
        as_hex = await browser.get(f"/jobs/{broken.job_id}")
        assert as_hex.status == 200 and "not valid utf-8; as hex" in as_hex.text
        assert "ff fe 7b" in as_hex.text
        as_text = await browser.get(f"/jobs/{text.job_id}")
        assert as_text.status == 200 and "not valid JSON; shown as text" in as_text.text
        listing = await browser.get(f"/queues/{QUEUE}")
        assert listing.status == 200
        head = await browser.request("HEAD", "/queues")
        assert head.status == 200 and head.body == b""


async def test_static_files_are_served_by_the_console_itself() -> None:
    async with console() as (_client, _engine, server):
        browser = Browser(server.port)
        css = await browser.get("/static/console.css")
        js = await browser.get("/static/console.js")
        assert css.status == js.status == 200
        assert css.headers["content-type"].startswith("text/css")
        assert js.headers["content-type"].startswith("text/javascript")
        page = await browser.get("/queues")
        # Offline: nothing from another origin, and the policy says so.
        assert "http://" not in page.text and "https://" not in page.text
        assert page.headers["content-security-policy"].startswith("default-src 'self'")


async def test_dead_letters_requeue_and_purge_need_the_csrf_token() -> None:
    async with console() as (client, engine, server):
        ids = []
        for n in range(3):
            ack = await client.enqueue(EnqueueRequest(QUEUE, "send", payload=Payload.from_json(n)))
            ids.append(ack.job_id)
        for job in await client.reserve([QUEUE], lease=60, wait=0, max_jobs=3):
            await client.nack(job.ctx, RetryDirective.dead_letter(), reason="boom")
        browser = Browser(server.port)
        listing = await browser.get("/dead-letters")
        assert listing.status == 200 and listing.text.count('data-job="') == 3
        assert "boom" in listing.text and "rejected" in listing.text
        confirm = await browser.get(f"/dead-letters/confirm?action=requeue&job_id={ids[0]}")
        assert confirm.status == 200
        token = csrf_of(confirm.text)
        # Without the token, or with another one: refused, nothing changes.
        refused = await browser.post("/dead-letters/requeue", {"job_id": ids[0]})
        assert refused.status == 403 and "CSRF" in refused.text
        wrong = await browser.post("/dead-letters/requeue", {"job_id": ids[0], "csrf": "x"})
        assert wrong.status == 403
        assert len(engine.dead_letters()) == 3
        done = await browser.post("/dead-letters/requeue", {"job_id": ids[0], "csrf": token})
        assert (done.status, done.headers["location"]) == (303, f"/jobs/{ids[0]}")
        (job,) = await client.reserve([QUEUE], lease=60, wait=0)
        assert (job.ctx.id, job.ctx.attempt) == (ids[0], 1)
        again = await browser.post("/dead-letters/requeue", {"job_id": ids[0], "csrf": token})
        assert again.status == 404
        purged = await browser.post("/dead-letters/purge", {"job_id": ids[1], "csrf": token})
        assert purged.status == 303 and "purged+1" in purged.headers["location"]
        everything = await browser.post("/dead-letters/requeue", {"queue": QUEUE, "csrf": token})
        assert "requeued+1" in everything.headers["location"]
        assert engine.dead_letters() == []
        assert engine.stats()[QUEUE].ready == 1


async def test_with_api_keys_the_console_asks_for_one() -> None:
    async with console(auth={"api_keys": ["s3cret"]}) as (_client, _engine, server):
        browser = Browser(server.port)
        page = await browser.get("/queues")
        assert (page.status, page.headers["location"]) == (303, "/login?next=%2Fqueues")
        assert (await browser.get("/api/queues")).status == 401
        assert (await browser.post("/dead-letters/purge", {"queue": QUEUE})).status == 403
        form = await browser.get("/login?next=/server")
        assert form.status == 200 and 'type="password"' in form.text
        wrong = await browser.post("/login", {"key": "guess", "next": "/server"})
        assert wrong.status == 403 and "not accepted" in wrong.text
        right = await browser.post("/login", {"key": "s3cret", "next": "/server"})
        assert (right.status, right.headers["location"]) == (303, "/server")
        assert "HttpOnly; SameSite=Strict" in right.headers["set-cookie"]
        served = await browser.get("/server")
        assert served.status == 200 and "1 API key(s)" in served.text
        out = await browser.post("/logout", {"csrf": csrf_of(served.text)})
        assert out.status == 303
        assert (await browser.get("/queues")).status == 303
        # No open redirect to another site after a login.
        elsewhere = await browser.post("/login", {"key": "s3cret", "next": "//evil.example"})
        assert elsewhere.headers["location"] == "/queues"


async def test_the_server_page() -> None:
    async with console() as (_client, _engine, server):
        page = await Browser(server.port).get("/server")
        assert page.status == 200
        for text in ("sepp-anyio", "memory (lost on exit)", "Uptime", "max_reserve_batch", "[ui]"):
            assert text in page.text


async def test_hostile_requests_get_bounded_errors_and_the_console_keeps_serving() -> None:
    async with console() as (_client, _engine, server):
        browser = Browser(server.port)
        huge_header = await browser.request(
            "GET", "/queues", headers={"x-big": "a" * (MAX_HEADER_BYTES + 10)}
        )
        assert huge_header.status == 431
        huge_body = await browser.raw(
            b"POST /dead-letters/purge HTTP/1.1\r\nhost: x\r\n"
            b"content-length: %d\r\n\r\n" % (MAX_BODY_BYTES + 1)
        )
        assert huge_body is not None and huge_body.status == 413
        garbage = await browser.raw(b"\x00\x01 not http at all\r\n\r\n")
        assert garbage is not None and garbage.status == 400
        assert (await browser.request("DELETE", "/queues")).status == 405
        # DNS rebinding: a loopback console answers loopback host names only.
        rebound = await browser.request("GET", "/queues", headers={"host": "evil.example:80"})
        assert rebound.status == 421
        for host in ("localhost:1", "127.0.0.1", "[::1]:8233"):
            assert (await browser.request("GET", "/queues", headers={"host": host})).status == 200
        assert (await browser.get("/queues")).status == 200
