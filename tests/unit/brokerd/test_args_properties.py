"""services.brokerd.core.args by property (SPEC §16): hostile input raises nothing but `ArgsError`,
`inside` never lets a path out, and a parsed value round-trips through its canonical JSON."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from bxcore.tools import BROKERED, Field, Kind
from services.brokerd.core.args import (
    ArgsError,
    ToolArgs,
    host_matches,
    inside,
    parse,
    url_host,
    valid_host,
    valid_host_pattern,
    valid_path,
)

TOOLS = st.sampled_from(sorted(BROKERED))
SURROGATES = st.integers(0xD800, 0xDFFF).map(chr)  # st.characters() never gives these
ANY_TEXT = st.text(alphabet=st.one_of(st.characters(), SURROGATES, st.sampled_from('{}[]":,\\')))
NAMES = sorted(
    {field.name for spec in BROKERED.values() for field in spec.fields}
    | {field.name for spec in BROKERED.values() for v in spec.variants for field in v.fields}
    | {spec.tag for spec in BROKERED.values() if spec.tag}
    | {v.name for spec in BROKERED.values() for v in spec.variants}
)
KEYS = st.one_of(st.sampled_from(NAMES), st.text(max_size=8))
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),  # NaN and the infinities are written as bare tokens, which must be refused
    st.sampled_from(NAMES),
    st.text(),
    st.sampled_from(["/", "/etc", "/a/", "//", "/a/..", "https://example.com/", "http://x.io"]),
)
JSONISH = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(KEYS, inner, max_size=4)),
    max_leaves=12,
)


def _object_text(pairs: list[tuple[str, object]]) -> str:
    """An object written pair by pair, so a key may repeat."""
    return "{" + ",".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in pairs) + "}"


def _only_args_error(tool: str, arguments: str) -> None:
    try:
        parse(tool, arguments)
    except ArgsError as error:
        assert len(error.detail()) <= 300
        assert "\n" not in error.detail()


# --- parse never raises anything but ArgsError ---------------------------------------------------


@given(TOOLS, ANY_TEXT)
def test_parse_of_arbitrary_text_raises_only_args_error(tool: str, text: str) -> None:
    _only_args_error(tool, text)


@given(TOOLS, JSONISH)
def test_parse_of_arbitrary_json_raises_only_args_error(tool: str, value: object) -> None:
    _only_args_error(tool, json.dumps(value))


@given(TOOLS, st.lists(st.tuples(KEYS, JSONISH), max_size=6), st.sampled_from(["", " ", "x", "}"]))
def test_parse_of_objects_with_repeated_keys_and_trailing_text_raises_only_args_error(
    tool: str, pairs: list[tuple[str, object]], trailing: str
) -> None:
    _only_args_error(tool, _object_text(pairs) + trailing)


@given(TOOLS, st.lists(st.tuples(KEYS, JSONISH), max_size=6), st.integers(0, 200))
def test_parse_of_cut_off_objects_raises_only_args_error(
    tool: str, pairs: list[tuple[str, object]], cut: int
) -> None:
    _only_args_error(tool, _object_text(pairs)[:cut])


# --- the form checks never raise -----------------------------------------------------------------


@given(ANY_TEXT, ANY_TEXT)
def test_the_form_checks_never_raise_on_any_text(a: str, b: str) -> None:
    for check in (valid_path, valid_host, valid_host_pattern, url_host):
        check(a)
    inside(a, b)
    host_matches(a, b)


@given(st.sampled_from(["https://", "https://example.com", "/", "*."]), ANY_TEXT)
def test_the_form_checks_never_raise_on_text_that_starts_well(head: str, tail: str) -> None:
    for check in (valid_path, valid_host, valid_host_pattern, url_host):
        check(head + tail)


@given(ANY_TEXT)
def test_a_url_gives_a_host_only_when_it_is_valid_and_written_right_after_the_scheme(
    url: str,
) -> None:
    host = url_host("https://" + url)
    if host is not None:
        assert valid_host(host)
        assert url.startswith(host)


# --- inside, by whole components -----------------------------------------------------------------

COMPONENT = st.text(alphabet=st.characters(exclude_characters="/"), min_size=1, max_size=4)
COMPONENTS = st.lists(COMPONENT, max_size=4)


def _path(components: list[str]) -> str:
    return "/" + "/".join(components)


@given(COMPONENTS, st.data())
def test_inside_is_true_exactly_for_the_grant_and_paths_under_it_by_components(
    grant: list[str], data: st.DataObject
) -> None:
    near = [
        st.builds(lambda extra: grant + extra, COMPONENTS),  # under it, or itself
        st.just(grant[:-1]),  # its parent
        st.builds(lambda s: [*grant[:-1], grant[-1] + s], COMPONENT) if grant else st.just([]),
        st.builds(lambda s: [*grant[:-1], grant[-1][:-1] or s], COMPONENT)
        if grant
        else st.just([]),
        COMPONENTS,  # anywhere
    ]
    path = data.draw(st.one_of(near))
    assert inside(_path(grant), _path(path)) == (path[: len(grant)] == grant)


# --- round trip ----------------------------------------------------------------------------------

LABEL = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True)
TOP = st.from_regex(r"[a-z]([a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True)
HOSTS = st.builds(
    lambda labels, top: ".".join([*labels, top]), st.lists(LABEL, min_size=1, max_size=3), TOP
)
URLS = st.builds(
    lambda host, port, rest: f"https://{host}{port}{rest}",
    HOSTS,
    st.sampled_from(["", ":443"]),
    st.one_of(
        st.just(""), st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E)).map("/".__add__)
    ),
)
VALID_PATHS = st.lists(
    st.text(st.characters(codec="utf-8", exclude_characters="/\0"), min_size=1, max_size=4).filter(
        lambda c: c not in (".", "..")
    ),
    max_size=4,
).map(_path)


def _field_value(field: Field) -> st.SearchStrategy[object]:
    strategy: st.SearchStrategy[object] = {
        Kind.TEXT: st.text(),
        Kind.PATH: VALID_PATHS,
        Kind.URL: URLS,
        Kind.INT: st.integers(-(2**63), 2**63 - 1),
    }[field.kind]
    if field.optional:
        return st.one_of(st.just(None), strategy)  # None: left out
    return strategy


@st.composite
def valid_calls(draw: st.DrawFn) -> tuple[str, list[tuple[str, object]]]:
    tool = draw(TOOLS)
    spec = BROKERED[tool]
    pairs: list[tuple[str, object]] = []
    fields = spec.fields
    if spec.tag is not None:
        variant = draw(st.sampled_from(spec.variants))
        pairs.append((spec.tag, variant.name))
        fields = fields + variant.fields
    for field in fields:
        value = draw(_field_value(field))
        if value is not None:
            pairs.append((field.name, value))
    return tool, draw(st.permutations(pairs))


@given(valid_calls(), st.booleans())
def test_a_parsed_value_round_trips_through_its_canonical_json(
    call: tuple[str, list[tuple[str, object]]], ascii_only: bool
) -> None:
    tool, pairs = call
    arguments = (
        "{"
        + ",".join(f"{json.dumps(k)}:{json.dumps(v, ensure_ascii=ascii_only)}" for k, v in pairs)
        + "}"
    )
    parsed = parse(tool, arguments)
    canonical = parsed.canonical_json()
    again = parse(tool, canonical)
    assert again == parsed
    assert again.canonical_json() == canonical
    assert json.loads(canonical) == dict(pairs)
    if parsed.url is not None:
        assert parsed.host == url_host(parsed.url)


@given(
    st.lists(st.tuples(st.sampled_from(NAMES), st.one_of(ANY_TEXT, st.integers())), max_size=5),
    st.one_of(st.none(), st.tuples(st.sampled_from(NAMES), ANY_TEXT)),
)
def test_the_canonical_json_is_what_json_writes_of_the_pairs_in_order(
    values: list[tuple[str, str | int]], tagged: tuple[str, str] | None
) -> None:
    """`canonical_json` writes its pairs itself: exactly `json.dumps` of them, compact and not
    escaped to ASCII, lone surrogates and control characters included."""
    values = list(dict(values).items())  # a field once, as parse gives them
    tag, variant = tagged if tagged is not None else (None, None)
    if tag is not None:
        values = [(name, value) for name, value in values if name != tag]
    args = ToolArgs("read_file", tuple(values), tag, variant)
    ordered = dict([(tag, variant)] if tag is not None else [])
    ordered.update(values)
    assert args.canonical_json() == json.dumps(ordered, separators=(",", ":"), ensure_ascii=False)
