"""The rest of the owner's powers in the browser (SPEC §12.1, §12.2): logging in with the link
`bxctl up` printed (and the token leaving the address bar), grants added, refused with why and
removed, **Verify** on the ledger, **Explain**, and a service restarted, in the shared box
(`conftest.py`).
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, Dialog, Locator, Page, expect

from tests.browser.console import DESKTOP, VIEWS, Console, open_page, view

pytestmark = pytest.mark.browser


def field(form: Locator, label: str) -> Locator:
    """A form's field by its label. A field inside its `<label>` has the label's words, then
    its value (a select's choice, a textarea's text) as its accessible name."""
    return form.get_by_label(re.compile(rf"^{re.escape(label)}(\s|$)"))


def test_the_printed_link_logs_in_and_the_token_leaves_the_address_bar(
    browser: Browser, console: Console
) -> None:
    with open_page(browser, console, DESKTOP) as page:
        assert "token" not in page.url
        assert page.url == f"{console.origin}/#chat"
        nav = page.get_by_role("navigation", name="Views")
        for name in VIEWS:
            expect(nav.get_by_role("link", name=name, exact=True)).to_be_visible()
        expect(page.get_by_role("button", name="New session", exact=True)).to_be_visible()
        (cookie,) = page.context.cookies()
        assert (cookie["name"], cookie["httpOnly"], cookie["sameSite"]) == (
            "bx_console",
            True,
            "Strict",
        )
        assert cookie["value"] != console.token
        # (open_page also checks that no URL or header the browser sent held the token)

    # Without the cookie the page says how to get in, and shows nothing else.
    context = browser.new_context(viewport=DESKTOP)
    try:
        stranger = context.new_page()
        stranger.goto(console.origin + "/")
        expect(stranger.get_by_role("heading", name="Log in to the console")).to_be_visible()
        expect(stranger.get_by_text("bxctl console", exact=True)).to_be_visible()
        expect(stranger.get_by_role("textbox", name="Message")).to_be_hidden()
    finally:
        context.close()


def test_a_grant_added_from_the_page_appears_an_invalid_one_is_refused_and_one_is_removed(
    page: Page, console: Console
) -> None:
    home = console.box.home
    notes = home.parent / "notes"
    notes.mkdir(exist_ok=True)
    view(page, "Grants")
    form = page.get_by_role("form", name="A new grant")
    grants = page.get_by_role("table", name="Every grant")

    def fill(grant_id: str, path: str) -> None:
        field(form, "Id").fill(grant_id)
        field(form, "Tool").fill("read_file")
        field(form, "Mode").select_option("allow")
        field(form, "Path").fill(path)
        field(form, "Note").fill("the owner's notes")
        form.get_by_role("button", name="Add grant", exact=True).click()

    fill("notes-read", str(notes))
    row = grants.get_by_role("row").filter(has_text="notes-read")
    expect(row).to_contain_text("read_file")
    expect(row).to_contain_text(str(notes))
    expect(row).to_contain_text("the owner's notes")
    assert (home / "grants" / "notes-read.toml").is_file()
    expect(field(form, "Id")).to_have_value("")  # the form is ready again

    fill("notes-relative", "notes")
    refusal = form.get_by_role("alert")
    expect(refusal).to_contain_text("Not added:")
    expect(refusal).to_contain_text(re.compile("absolute", re.IGNORECASE))
    expect(grants.get_by_role("row").filter(has_text="notes-relative")).to_have_count(0)
    assert not (home / "grants" / "notes-relative.toml").exists()

    asked: list[str] = []

    def accept(dialog: Dialog) -> None:
        asked.append(dialog.message)
        dialog.accept()

    page.once("dialog", accept)
    grants.get_by_role("button", name="Remove notes-read", exact=True).click()
    expect(row).to_have_count(0)
    assert asked == ["Remove the grant notes-read? brokerd stops using it at once."]
    assert not (home / "grants" / "notes-read.toml").exists()
    expect(grants.get_by_role("row").filter(has_text="workspace-shell")).to_have_count(1)


def test_a_read_only_shell_grant_and_an_mcp_grants_kind_and_match_are_added_and_shown(
    page: Page, console: Console
) -> None:
    home = console.box.home
    view(page, "Grants")
    form = page.get_by_role("form", name="A new grant")
    grants = page.get_by_role("table", name="Every grant")
    field(form, "Id").fill("notes-grep")
    field(form, "Tool").fill("shell")
    field(form, "Path").fill(str(home.parent / "notes"))
    field(form, "Shell folder").select_option("read-only")
    form.get_by_role("button", name="Add grant", exact=True).click()
    shell = grants.get_by_role("row").filter(has_text="notes-grep")
    expect(shell).to_contain_text(f"{home.parent / 'notes'} (read-only)")
    assert "write = false" in (home / "grants" / "notes-grep.toml").read_text()

    field(form, "Id").fill("git-log")
    field(form, "Tool").fill("mcp__git__git_log")
    field(form, "Kind").select_option("source")
    field(form, "Match").fill("branch=main\nmax_count=5")
    form.get_by_role("button", name="Add grant", exact=True).click()
    mcp = grants.get_by_role("row").filter(has_text="git-log")
    expect(mcp).to_contain_text("source match branch=main, max_count=5")
    written = (home / "grants" / "git-log.toml").read_text()
    assert 'kind = "source"' in written and '"max_count" = 5' in written


def test_verify_on_the_ledger_says_ok(page: Page) -> None:
    view(page, "Ledger")
    expect(page.get_by_role("table", name="The newest ledger records")).to_contain_text("started")
    page.get_by_role("button", name="Verify", exact=True).click()
    report = page.locator("#verify-report")
    expect(report).to_contain_text(re.compile(r"^ok — \d+ records, head seq \d+"))
    witnessed = r"The head the owner's side witnessed: seq \d+|No head witnessed yet"
    expect(report).to_contain_text(re.compile(witnessed))


def test_explain_shows_brokerds_verdict_and_its_steps(page: Page, console: Console) -> None:
    view(page, "Grants")
    form = page.get_by_role("form", name="Why was this denied?")
    explanation = form.get_by_role("status")

    def explain(tool: str, arguments: str) -> None:
        field(form, "Session").fill("web-explained")
        field(form, "Tool").fill(tool)
        field(form, "Arguments (JSON)").fill(arguments)
        form.get_by_role("button", name="Explain", exact=True).click()

    explain("read_file", '{"path": "/etc/hostname"}')
    expect(explanation).to_contain_text("brokerd would answer: denied (no_grant)")
    expect(explanation.get_by_role("listitem").first).to_be_visible()

    todo = console.box.home / "workspace" / "todo.md"
    explain("read_file", f'{{"path": "{todo}"}}')
    expect(explanation).to_contain_text("brokerd would answer: allowed — grant workspace-read")
    assert explanation.get_by_role("listitem").count() >= 2


def test_restart_from_the_services_view_gives_the_service_a_new_pid(
    page: Page, console: Console
) -> None:
    old = console.box.services()["memoryd"]["pid"]
    view(page, "Services")
    table = page.get_by_role("table", name="The box's services")
    row = table.get_by_role("row").filter(has_text="memoryd")
    pid = row.get_by_role("cell").nth(2)
    expect(pid).to_have_text(str(old))
    row.get_by_role("button", name="Restart memoryd", exact=True).click()

    expect(pid).to_have_text(re.compile(rf"^(?!{old}$)\d+$"), timeout=20_000)
    expect(row.get_by_role("cell").nth(1)).to_have_text(re.compile("^running"))
    assert console.box.services()["memoryd"]["pid"] == int(pid.inner_text())
