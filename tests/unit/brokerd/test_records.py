"""The ledger's records (SPEC §7): building canonical lines and checking a chain of them."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bxcore.labels import DataClass, Label
from services.brokerd.core import records as r
from services.brokerd.core.chain import ChainReport
from services.brokerd.core.records import GENESIS, Head, build, line_hash
from tests.support.ledger_file import check_chain

AT = "2026-11-30T02:34:30.123Z"
PRIVATE = Label(DataClass.PRIVATE, False)
TAINTED = Label(DataClass.SECRET, True)


def chain(entries: list[r.Entry], at: str = AT) -> list[bytes]:
    lines: list[bytes] = []
    prev = GENESIS
    for seq, (kind, fields) in enumerate(entries, 1):
        lines.append(build(seq, at, prev, kind, fields))
        prev = line_hash(lines[-1])
    return lines


def a_decision(call: str = "c1", **over: object) -> r.Entry:
    kind, fields = r.decision(
        session="chat-1",
        call=call,
        tool="read_file",
        arguments='{"path":"/a"}',
        label=PRIVATE,
        outcome="allowed",
        grant="notes",
        grant_sha256="ab" * 32,
    )
    return kind, {**fields, **over}


# --- building -------------------------------------------------------------------------------


def test_format_at_is_utc_rfc3339_with_milliseconds() -> None:
    assert r.format_at(1_796_006_070_123) == "2026-11-30T02:34:30.123Z"
    assert r.format_at(0) == "1970-01-01T00:00:00.000Z"
    assert r.format_at(5) == "1970-01-01T00:00:00.005Z"


def test_a_record_starts_with_seq_at_prev_kind_then_its_fields_in_declared_order() -> None:
    kind, fields = a_decision()
    shuffled = dict(reversed(list(fields.items())))
    line = build(1, AT, GENESIS, kind, shuffled)
    keys = list(json.loads(line))
    assert keys == [
        "seq",
        "at",
        "prev",
        "kind",
        "session",
        "call",
        "tool",
        "arguments",
        "label",
        "outcome",
        "grant",
        "grant_sha256",
    ]
    assert line == build(1, AT, GENESIS, kind, fields)


def test_a_record_is_compact_utf8_with_none_left_out_and_labels_as_objects() -> None:
    line = build(1, AT, GENESIS, *r.executed(session="s", call="c", ok=True, label=TAINTED))
    assert line == (
        b'{"seq":1,"at":"2026-11-30T02:34:30.123Z","prev":"' + GENESIS.encode() + b'",'
        b'"kind":"executed","session":"s","call":"c","ok":true,'
        b'"label":{"class":"secret","untrusted":true}}'
    )
    note = build(2, AT, GENESIS, *r.recovered(cut_bytes=3, why="größe ✓"))
    assert "größe ✓".encode() in note
    assert b"\n" not in note


def test_the_first_prev_is_64_zeros_and_each_prev_is_the_hash_of_the_line_before() -> None:
    lines = chain([a_decision("c1"), a_decision("c2"), r.started(pid=7, version="0.1.0")])
    assert GENESIS == "0" * 64
    assert json.loads(lines[0])["prev"] == GENESIS
    for before, after in itertools.pairwise(lines):
        assert json.loads(after)["prev"] == line_hash(before)
    assert line_hash(b"abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


@pytest.mark.parametrize(
    ("kind", "fields", "says"),
    [
        ("nonsense", {}, "unknown kind"),
        ("started", {"pid": 1}, "lacks `version`"),
        ("started", {"pid": 1, "version": "x", "extra": 1}, "no field"),
        ("started", {"pid": True, "version": "x"}, "`pid` of a started record is not an integer"),
        ("decision", {**a_decision()[1], "outcome": "maybe"}, "`outcome`"),
        (
            "verdict",
            {"approval": "a", "approve": True, "by": "o", "scope": "all", "outcome": "allowed"},
            "`scope`",
        ),
        ("raised", {"session": "s", "from": {"class": "x"}, "to": PRIVATE}, "`from`"),
        ("recovered", {"cut_bytes": 1, "why": "\ud800"}, "surrogate"),
        ("recovered", {"cut_bytes": float("nan"), "why": "x"}, "integer"),
    ],
)
def test_build_refuses_what_no_reader_would_accept(
    kind: str, fields: dict[str, object], says: str
) -> None:
    with pytest.raises(ValueError, match=says):
        build(1, AT, GENESIS, kind, fields)


def test_a_field_given_as_none_is_left_out_even_a_name_no_kind_has() -> None:
    line, record = r.build_record(1, AT, GENESIS, "started", {"pid": 1, "version": "x", "x": None})
    assert record == {
        "seq": 1,
        "at": AT,
        "prev": GENESIS,
        "kind": "started",
        "pid": 1,
        "version": "x",
    }
    assert json.loads(line) == record and list(json.loads(line)) == list(record)


@pytest.mark.parametrize(
    ("seq", "at", "prev"),
    [(0, AT, GENESIS), (1, "2026-11-30 02:34:30Z", GENESIS), (1, AT, "0" * 63), (1, AT, "A" * 64)],
)
def test_build_refuses_a_bad_header(seq: int, at: str, prev: str) -> None:
    with pytest.raises(ValueError):
        build(seq, at, prev, *r.started(pid=1, version="v"))


def test_ledger_arguments_keeps_canonical_json_else_the_raw_string_cut_to_4096() -> None:
    assert r.ledger_arguments('{ "path" : "/a" }', '{"path":"/a"}') == '{"path":"/a"}'
    raw = "x" * 5000
    assert r.ledger_arguments(raw, None) == "x" * 4096
    assert r.ledger_arguments("ü" * 5000, None) == "ü" * 4096  # characters, not bytes
    fixed = r.ledger_arguments("a\ud800b", None)
    assert fixed.startswith("a") and fixed.endswith("b") and "\ufffd" in fixed
    build(1, AT, GENESIS, *a_decision(arguments=fixed))


def test_every_builder_makes_a_record_the_checker_accepts() -> None:
    entries = [
        a_decision(),
        r.decision(
            session="s",
            call="c2",
            tool="shell",
            arguments="{",
            label=PRIVATE,
            outcome="pending",
            approval="k3v9qz2m",
            targets=[{"at": "/cwd", "origin": "untrusted: call c1"}],
        ),
        r.verdict(
            approval="k3v9qz2m",
            approve=True,
            by="console",
            scope="once",
            outcome="denied",
            reason="flow_violation",
        ),
        r.executed(
            session="s",
            call="c2",
            ok=False,
            exit_code=-9,
            output_sha256="00" * 32,
            output_bytes=0,
            label=TAINTED,
            ms=12,
        ),
        r.raised(session="s", from_=PRIVATE, to=TAINTED),
        r.absorbed(parent="s", child="sub-s-1", to=TAINTED),
        r.started(pid=42, version="0.1.0"),
        r.owner_words(session="s", turn=2, text="send alice@example.com the notes"),
        r.recovered(cut_bytes=17, why="line 9: the last line has no newline (a torn write)"),
        r.job_started(
            job="mail", run=3, session="job-mail-3", why="catch_up", job_sha256="ab" * 32,
            slot=None, missed=4,
        ),
        r.job_ended(
            job="mail", run=3, session="job-mail-3", how="runtime", steps=2, runtime_ms=900,
            tokens=None, detail="max_runtime_s 1 passed",
        ),
    ]  # fmt: skip
    assert {kind for kind, _ in entries} == set(r.KINDS)
    report = check_chain(chain(entries))
    assert report.ok and report.records == len(entries) and str(report) == "ok: 11 records"


# --- checking -------------------------------------------------------------------------------


def five() -> list[bytes]:
    return chain([a_decision(f"c{i}") for i in range(1, 6)])


def test_an_intact_chain_is_ok_with_its_head() -> None:
    lines = five()
    assert check_chain(lines) == ChainReport(5, Head(5, line_hash(lines[-1])))
    assert check_chain([]) == ChainReport(0, Head(0, GENESIS))


def test_a_changed_value_is_found_at_the_next_line_by_its_prev() -> None:
    lines = five()
    lines[2] = lines[2].replace(b'"c3"', b'"c9"')
    report = check_chain(lines)
    assert not report.ok and report.bad_line == 4 and report.records == 3
    assert str(report) == "line 4: prev does not match the hash of line 3"


def test_a_broken_line_is_found_at_that_line() -> None:
    lines = five()
    lines[2] = lines[2].replace(b'"kind":', b'"kind" :')
    assert str(check_chain(lines)) == "line 3: not in canonical form"


def test_a_deleted_line_and_a_swapped_pair_are_named() -> None:
    lines = five()
    assert str(check_chain(lines[:2] + lines[3:])) == "line 3: seq is 4, expected 3"
    swapped = [lines[0], lines[2], lines[1], *lines[3:]]
    assert str(check_chain(swapped)) == "line 2: seq is 3, expected 2"


def test_the_first_line_must_follow_genesis() -> None:
    line = build(1, AT, "1" * 64, *r.started(pid=1, version="v"))
    assert str(check_chain([line])) == "line 1: prev does not match 64 zeros (genesis)"


def test_a_witness_head_catches_a_rewritten_last_line_and_a_cut_ledger() -> None:
    lines = five()
    seen = Head(5, line_hash(lines[-1]))
    assert check_chain(lines, witness=seen).ok
    lines[-1] = lines[-1].replace(b'"c5"', b'"c6"')
    assert check_chain(lines).ok  # nothing after it to notice
    report = check_chain(lines, witness=seen)
    assert report.bad_line == 5 and "tampered" in str(report)
    short = check_chain(five()[:3], witness=seen)
    assert not short.ok and str(short).startswith("the ledger ends at seq 3")


@pytest.mark.parametrize(
    ("line", "says"),
    [
        (b"\xff\xfe{}", "not UTF-8"),
        (b"\x00\x00\x00", "not JSON"),
        (b'{"seq":1}\x00', "not JSON"),
        (b"[1,2,3]", "not a JSON object (a JSON array)"),
        (b'"seq"', "not a JSON object (a JSON string)"),
        (b"[" * 100_000 + b"]" * 100_000, "not JSON"),
        (b"9" * 5000, "not JSON"),
        (b"NaN", "not JSON"),
        (b"", "not JSON"),
        (b"{}", "does not start with seq, at, prev, kind"),
        (
            b'{"seq":1,"at":"' + AT.encode() + b'","prev":"' + GENESIS.encode() + b'","kind":[1]}',
            "unknown kind [1]",
        ),
        (
            b'{"seq":1,"at":"'
            + AT.encode()
            + b'","prev":"'
            + GENESIS.encode()
            + b'","kind":"recovered","cut_bytes":1,"why":"\\ud800"}',
            "not valid Unicode",
        ),
        (
            b'{"seq":1,"at":"'
            + AT.encode()
            + b'","prev":"'
            + GENESIS.encode()
            + b'","kind":"recovered","cut_bytes":1,"why":"a","why":"a"}',
            "canonical",
        ),
        (
            b'{"seq":1,"at":"'
            + AT.encode()
            + b'","prev":"'
            + GENESIS.encode()
            + b'","kind":"recovered","cut_bytes":1,"why":null}',
            "`why`",
        ),
        (
            b'{"seq":1,"at":"'
            + AT.encode()
            + b'","prev":"'
            + GENESIS.encode()
            + b'","kind":"raised","session":"s","from":{"class":["x"],"untrusted":true},'
            b'"to":{"class":"secret","untrusted":true}}',
            "`from`",
        ),
        (b"x" * (r.MAX_LINE_BYTES + 1), "longer than"),
    ],
)
def test_hostile_lines_are_named_never_raised(line: bytes, says: str) -> None:
    report = check_chain([line])
    assert not report.ok and report.bad_line == 1
    assert report.why is not None and report.why.startswith("line 1: ") and says in report.why
    assert "\n" not in report.why and len(report.why) < 200


# --- properties -----------------------------------------------------------------------------

texts = st.text(max_size=30)
labels = st.builds(Label, st.sampled_from(list(DataClass)), st.booleans())
entries = st.one_of(
    st.builds(
        lambda s, c, a, lb: r.decision(
            session=s,
            call=c,
            tool="shell",
            arguments=a,
            label=lb,
            outcome="denied",
            reason="no_grant",
        ),
        texts,
        texts,
        texts,
        labels,
    ),
    st.builds(
        lambda s, c, ok, n: r.executed(session=s, call=c, ok=ok, exit_code=n, ms=abs(n)),
        texts,
        texts,
        st.booleans(),
        st.integers(-(2**70), 2**70),
    ),
    st.builds(
        lambda a, ok: r.verdict(approval=a, approve=ok, by="o", scope="once", outcome="allowed"),
        texts,
        st.booleans(),
    ),
    st.builds(lambda s, a, b: r.raised(session=s, from_=a, to=b), texts, labels, labels),
    st.builds(lambda n, w: r.recovered(cut_bytes=n, why=w), st.integers(0, 10**9), texts),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(entries, min_size=1, max_size=8), st.integers(0, 2**42))
def test_any_built_chain_checks_ok(items: list[r.Entry], ms: int) -> None:
    lines = chain(items, at=r.format_at(ms))
    assert check_chain(lines) == ChainReport(len(lines), Head(len(lines), line_hash(lines[-1])))


@settings(max_examples=150, deadline=None)
@given(st.lists(entries, min_size=1, max_size=6), st.data())
def test_any_single_flipped_byte_is_found_at_that_line_or_the_next(
    items: list[r.Entry], data: st.DataObject
) -> None:
    lines = chain(items)
    k = data.draw(st.integers(0, len(lines) - 1), label="line")
    i = data.draw(st.integers(0, len(lines[k]) - 1), label="byte")
    bit = data.draw(st.integers(0, 7), label="bit")
    witness = Head(len(lines), line_hash(lines[-1]))
    flipped = bytearray(lines[k])
    flipped[i] ^= 1 << bit
    damaged = [*lines[:k], bytes(flipped), *lines[k + 1 :]]
    report = check_chain(damaged, witness=witness)
    assert not report.ok
    assert report.bad_line in (k + 1, k + 2)  # 1-based: the line itself or the one after
    if k + 1 < len(lines):
        assert not check_chain(damaged).ok  # without a witness, only the last line is blind
