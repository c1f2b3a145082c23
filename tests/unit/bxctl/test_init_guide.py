"""`bxctl.init_guide`: what the guided init offers (found servers first), where it looks for
a local one (`$OLLAMA_HOST`, `$OPENAI_BASE_URL` as those tools read them), how it reads each
reply (a non-answer is asked again, saying why), and the config it writes: the chosen
`[model]` in the file's one `[model]` table."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bxcore.config.file import parse_config
from bxcore.config.written import COMMENTED_CONFIG
from bxctl import init_guide
from bxctl.init_guide import OTHER, SERVERS, ModelChoice, Retry


@pytest.mark.parametrize(
    ("value", "url"),
    [
        ("", None),
        ("127.0.0.1:11500", "http://127.0.0.1:11500/v1"),
        ("0.0.0.0", "http://127.0.0.1:11434/v1"),
        ("http://gpu-box:11434/", "http://gpu-box:11434/v1"),
        ("https://ollama.example", "https://ollama.example:443/v1"),
        ("[::1]:9000", "http://[::1]:9000/v1"),
        ("http://:bad", None),
    ],
)
def test_ollama_host_is_read_as_ollama_reads_it(value: str, url: str | None) -> None:
    found = init_guide.probed({"OLLAMA_HOST": value})
    named = [s.base_url for s in found if s.family == "Ollama"]
    if url is None or url == "http://127.0.0.1:11434/v1":
        assert named == ["http://127.0.0.1:11434/v1"]
    else:
        assert named == [url, "http://127.0.0.1:11434/v1"]


def test_the_usual_local_ports_are_probed_and_openai_base_url_too() -> None:
    found = init_guide.probed({"OPENAI_BASE_URL": "http://127.0.0.1:9999/v1/"})
    assert [s.base_url for s in found] == [
        "http://127.0.0.1:9999/v1",
        "http://127.0.0.1:11434/v1",
        "http://127.0.0.1:8080/v1",
        "http://127.0.0.1:8000/v1",
        "http://127.0.0.1:1234/v1",
        "http://127.0.0.1:4000/v1",
    ]


def test_the_servers_found_answering_come_first_then_every_other_then_any() -> None:
    vllm = replace(SERVERS[2], models=("Qwen/Qwen2.5-7B-Instruct",))
    offered = init_guide.choices([SERVERS[0], vllm])
    assert offered[0] == vllm and offered[-1] == OTHER
    assert [s.family for s in offered].count("vLLM") == 1
    assert offered[0].shown() == "vLLM at http://127.0.0.1:8000/v1 (answering, 1 model)"


@pytest.mark.parametrize(
    ("reply", "answer"),
    [("", 0), ("3", 2), (" 13 ", 12), ("14", None), ("0", None), ("two", None)],
)
def test_a_choice_is_a_number_in_range_or_nothing_for_the_default(
    reply: str, answer: int | None
) -> None:
    got = init_guide.pick(reply, 13, 0)
    assert got == answer if answer is not None else isinstance(got, Retry)


def test_yes_no_model_and_key_replies() -> None:
    assert init_guide.yes("", True) is True and init_guide.yes("N", True) is False
    assert isinstance(init_guide.yes("maybe", True), Retry)
    assert init_guide.model_name("", ["a", "b"], "a") == "a"
    assert init_guide.model_name("2", ["a", "b"], "a") == "b"
    assert init_guide.model_name("qwen2.5:7b", [], "x") == "qwen2.5:7b"
    assert isinstance(init_guide.model_name("3", ["a", "b"], "a"), Retry)
    assert isinstance(init_guide.model_name("two words", [], "a"), Retry)
    assert init_guide.key_env("", "OPENAI_API_KEY") == "OPENAI_API_KEY"
    assert init_guide.key_env("-", "OPENAI_API_KEY") == ""
    assert init_guide.key_env("$GROQ_API_KEY", "") == "GROQ_API_KEY"
    pasted = init_guide.key_env("sk-proj-abcdefghijklmnopqrstuvwxyz0123", "")
    assert isinstance(pasted, Retry) and "a key itself" in pasted.why
    assert init_guide.base_url("http://10.0.0.5:8080/v1/") == "http://10.0.0.5:8080/v1"
    assert isinstance(init_guide.base_url("10.0.0.5:8080"), Retry)


def test_the_config_sets_the_chosen_model_in_its_one_model_table() -> None:
    choice = ModelChoice("anthropic", "https://api.anthropic.com", "claude-sonnet-4-5", "K")
    text = init_guide.config_text(choice)
    assert text.count("\n[model]\n") == 1
    model = parse_config(text.encode()).model
    assert (model.provider, model.base_url, model.model, model.api_key_env) == (
        "anthropic", "https://api.anthropic.com", "claude-sonnet-4-5", "K",
    )  # fmt: skip
    changed = [line for line in text.split("\n") if line not in COMMENTED_CONFIG.split("\n")]
    assert len(changed) == 4  # the rest stays as init writes it
