"""`console` (issue 12, SPEC §12): the owner console under a real `bxctl up`, in Debian's
chromium driven by Playwright. Targets, on this machine:

- an event to an open page: <= 100 ms at the median. Measured in the browser, from the page's
  own POST of an owner message to that message's `turn` event arriving on its stream: the
  whole way (gatewayd -> loopd -> loop-events -> gatewayd -> the page), so an upper bound of
  loopd-to-page.
- 50 pages on the event stream: gatewayd's RSS grows <= 20 MB.
- the first load: <= 150 KB transferred, <= 300 ms from navigation to interactive (the
  sessions listed and the Send button usable).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import psutil

from bench import floors
from bench.box import fresh_home, remove
from bench.stats import save, show, summary, verdict
from bxcore.home.layout import Home

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
ROUNDS = 60
PAGES = 50


@contextlib.contextmanager
def _box() -> Iterator[tuple[Home, str]]:
    folder = floors.scratch()
    home = fresh_home(folder)
    bxctl = [sys.executable, "-m", "bxctl", "--home", str(home.root)]
    try:
        up = subprocess.run([*bxctl, "up"], capture_output=True, text=True, timeout=60)
        found = re.search(r"console: (\S+#token=\S+)", up.stdout)
        if up.returncode != 0 or found is None:
            raise RuntimeError(f"bxctl up failed: {up.stdout} {up.stderr}")
        yield home, found.group(1)
    finally:
        subprocess.run([*bxctl, "down"], capture_output=True, timeout=60)
        remove(folder)


def _gatewayd(home: Home) -> psutil.Process:
    for process in psutil.process_iter(["cmdline"]):
        line = process.info["cmdline"] or []
        if str(home.root) in line and "services.gatewayd" in line:
            return process
    raise RuntimeError("gatewayd is not running")


# The page's own stream reader and key (the page is logged in): what the console itself uses.
_ROUND_TRIPS = """async (rounds) => {
  const { keyed } = await import("/static/js/api.js");
  const { listen } = await import("/static/js/events.js");
  let ready;
  let waiting = null;
  const hello = new Promise((done) => { ready = done; });
  const stream = listen("/api/events", {
    headers: keyed,
    on: (name, data) => {
      if (name === "hello") ready();
      if (name === "turn" && waiting && data.includes(waiting.text)) waiting.done();
    },
    down: () => {},
    refused: () => {},
  });
  await hello;
  const samples = [];
  for (let i = 0; i < rounds; i++) {
    const text = `bench ${i} ${Math.random()}`;
    const seen = new Promise((done) => { waiting = { text, done }; });
    const started = performance.now();
    await fetch(`/api/sessions/bench-${i}/messages`, {method: "POST",
      headers: keyed({"Content-Type": "application/json"}),
      body: JSON.stringify({text})});
    await seen;
    samples.push(performance.now() - started);
  }
  stream.close();
  return samples;
}"""


def console() -> None:
    from playwright.sync_api import sync_playwright

    print("console: the owner console in chromium, under a real bxctl up")
    with _box() as (home, link), sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            transferred: list[int] = []
            page.on(
                "response", lambda r: transferred.append(int(r.headers.get("content-length", "0")))
            )
            loads: list[float] = []
            for _ in range(5):
                transferred.clear()
                started = time.perf_counter()
                page.goto(link)
                page.locator("#session-list li").first.wait_for()
                page.get_by_role("button", name="Send").wait_for()
                loads.append(time.perf_counter() - started)
                page.goto("about:blank")
            first_load_kb = sum(transferred) / 1024
            page.goto(link.split("#")[0])
            page.locator("#session-list li").first.wait_for()
            samples = page.evaluate(_ROUND_TRIPS, ROUNDS)
            event = summary([s / 1000 for s in samples[5:]])
            load = summary(loads[1:])
            grown = _fifty_pages(home, link)
        finally:
            browser.close()
    show("owner message posted -> its event on the page", event)
    show("first load -> interactive (warm)", load)
    print(f"  first load transferred: {first_load_kb:.1f} KB")
    print(f"  gatewayd RSS with {PAGES} pages on the stream: +{grown:.1f} MB")
    save(
        "console",
        {
            "event_to_page": event,
            "first_load": load,
            "first_load_kb": first_load_kb,
            "fifty_pages_mb": grown,
            "event": verdict("event to page (ms)", event["median_ms"], "<= 100",
                             event["median_ms"] <= 100),
            "load": verdict("first load (ms)", load["median_ms"], "<= 300",
                            load["median_ms"] <= 300),
            "size": verdict("first load (KB)", first_load_kb, "<= 150", first_load_kb <= 150),
            "pages": verdict(f"{PAGES} pages (MB)", grown, "<= 20", grown <= 20),
            "cpus": os.cpu_count(),
        },
    )  # fmt: skip


def _fifty_pages(home: Home, link: str) -> float:
    """gatewayd's RSS growth with `PAGES` event streams open at once (plain HTTP clients:
    what a page costs gatewayd is its stream), after one event has gone to all of them."""
    base, token = link.split("#token=")
    gatewayd = _gatewayd(home)
    with httpx.Client(base_url=base, timeout=10) as client:
        login = client.post("/api/login", json={"token": token})
        cookies = dict(client.cookies)
        keyed = {"X-BX-Console": login.json()["key"]}
    time.sleep(1.0)
    before = gatewayd.memory_info().rss
    streams = []
    with contextlib.ExitStack() as stack:
        for _ in range(PAGES):
            client = stack.enter_context(
                httpx.Client(base_url=base, cookies=cookies, headers=keyed, timeout=10)
            )
            response = stack.enter_context(client.stream("GET", "/api/events"))
            lines = response.iter_lines()
            while not next(lines).startswith("event: hello"):
                pass
            streams.append(lines)
        with httpx.Client(base_url=base, cookies=cookies, headers=keyed, timeout=10) as poster:
            poster.post("/api/sessions/fifty/messages", json={"text": "to every page"})
        for lines in streams:
            while not next(lines).startswith("event: turn"):
                pass
        time.sleep(0.5)
        after = gatewayd.memory_info().rss
    return (after - before) / 1e6
