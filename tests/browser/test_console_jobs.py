"""The Jobs view in the browser (SPEC §12.2, §19; issue 16): a box whose jobs were written
before `bxctl up`, their schedules a year long so that only **Run now** starts a run. The view
lists each job with its next run and flags an invalid one with why; **Disable** then **Enable**,
from the keyboard, rewrite the job file's `enabled`; **Run now** starts a run whose session
opens in Chat from the link the view gives; a run waiting for the owner's approval marks its
job, and its card in Approvals says it comes from a job.

This module has a box of its own (the shared one has no jobs).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from tests.browser.console import DESKTOP, Console, console_of, conversation, open_page, view
from tests.browser.test_console_approvals import focus_by_keys
from tests.fakes.model_server import Answer
from tests.support.brokerd import args
from tests.support.e2e import box_up

pytestmark = pytest.mark.browser

TICK = 'every = "366d"\nenabled = true\nprompt = "browser job tick"\n'


def with_jobs(home: Path) -> None:
    jobs = home / "jobs"
    jobs.mkdir(mode=0o700, exist_ok=True)
    (jobs / "tick.toml").write_text(TICK)
    asker = 'every = "366d"\nprompt = "browser job asker"\ngrants = ["workspace-shell"]\n'
    (jobs / "asker.toml").write_text(asker)
    (jobs / "broken.toml").write_text('every = "1h"\nprompt = "x"\ngrants = ["nonesuch"]\n')


@pytest.fixture(scope="module")
def jobs_console() -> Iterator[Console]:
    with box_up(before_up=with_jobs) as box:
        box.model.script("browser job tick", Answer("ticked from the browser"))
        shell = args(command="true", cwd=f"{box.home}/workspace")
        box.model.script("browser job asker", box.model.calls(("shell", shell)), Answer("ran"))
        with console_of(box) as console:
            yield console


@pytest.fixture
def jobs_page(browser: Browser, jobs_console: Console) -> Iterator[Page]:
    with open_page(browser, jobs_console, DESKTOP) as page:
        view(page, "Jobs")
        yield page


def job_row(page: Page, job_id: str) -> Locator:
    table = page.get_by_role("table", name="Every job")
    return table.get_by_role("row").filter(
        has=page.get_by_role("rowheader", name=job_id, exact=True)
    )


def test_each_job_is_listed_with_its_next_run_and_an_invalid_one_says_why(jobs_page: Page) -> None:
    tick = job_row(jobs_page, "tick")
    expect(tick).to_contain_text("every 366d")
    expect(tick.get_by_role("listitem").first).to_have_text(re.compile(r"\d{2}:\d{2}:\d{2}"))
    run_now = tick.get_by_role("button", name="Run now", exact=True)
    expect(run_now).to_have_accessible_description("tick")
    expect(tick.get_by_role("button", name="Disable", exact=True)).to_have_accessible_description(
        "tick"
    )
    broken = job_row(jobs_page, "broken")
    expect(broken).to_contain_text(re.compile(r"INVALID: .*nonesuch"))
    expect(broken.get_by_role("button")).to_have_count(0)


def test_disable_then_enable_with_the_keyboard_rewrite_the_job_file(
    jobs_page: Page, jobs_console: Console
) -> None:
    path = jobs_console.box.home / "jobs" / "tick.toml"
    tick = job_row(jobs_page, "tick")
    disable = tick.get_by_role("button", name="Disable", exact=True)
    focus_by_keys(jobs_page, disable)
    jobs_page.keyboard.press("Enter")
    enable = tick.get_by_role("button", name="Enable", exact=True)
    expect(enable).to_be_focused()  # the same control of the same job keeps the keyboard
    expect(tick).to_contain_text("disabled")
    assert path.read_text() == TICK.replace("enabled = true", "enabled = false")
    jobs_page.keyboard.press("Space")
    expect(tick.get_by_role("button", name="Disable", exact=True)).to_be_focused()
    expect(tick).not_to_contain_text("disabled")
    assert path.read_text() == TICK


def test_run_now_starts_a_run_whose_session_opens_in_chat(jobs_page: Page) -> None:
    run_now = job_row(jobs_page, "tick").get_by_role("button", name="Run now", exact=True)
    focus_by_keys(jobs_page, run_now)
    jobs_page.keyboard.press("Enter")
    status = jobs_page.get_by_role("status").filter(has_text="Started a run of tick")
    link = status.get_by_role("link", name=re.compile(r"^job-tick-\d+$"))
    expect(link).to_be_visible()
    session = link.inner_text()
    results = job_row(jobs_page, "tick").get_by_role("link", name=session, exact=True)
    expect(results).to_be_visible()  # the run's result, from the ledger's job_ended
    expect(job_row(jobs_page, "tick")).to_contain_text("(owner): done, 1 step")
    focus_by_keys(jobs_page, link, "Shift+Tab")
    jobs_page.keyboard.press("Enter")
    expect(jobs_page.locator("#session-title")).to_have_text(session)
    log = conversation(jobs_page)
    expect(log.get_by_text("ticked from the browser", exact=True)).to_be_visible()


def test_a_run_waiting_for_an_approval_marks_its_job_and_its_card_says_job(
    jobs_page: Page, jobs_console: Console
) -> None:
    asker = job_row(jobs_page, "asker")
    asker.get_by_role("button", name="Run now", exact=True).click()
    waits = asker.get_by_role("link", name="waits for your approval", exact=True)
    expect(waits).to_be_visible()
    expect(jobs_page).to_have_title("(1) boxmaker")
    asker.get_by_role("button", name="Run now", exact=True).click()
    expect(jobs_page.get_by_role("alert")).to_contain_text("Not started: job asker's run")
    waits.click()
    card = jobs_page.get_by_role("listitem").filter(
        has_text="From a scheduled job: job asker's run"
    )
    expect(card).to_be_visible()
    card.get_by_role("button", name="Deny", exact=True).click()
    expect(card).to_have_count(0)
    view(jobs_page, "Jobs")
    expect(asker).to_contain_text("denied")
    expect(waits).to_have_count(0)
