"""Secrets never leave through what we show, store or log."""

from __future__ import annotations

from urllib.parse import quote, quote_plus

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from verl_async_dapo.redact import MASK, redact, redact_generic, redact_url


def test_known_secret_is_masked_everywhere_also_url_encoded() -> None:
    secret = "s3cr3t/with+odd=chars@!"
    text = f"key {secret} again {secret} url {quote(secret, safe='')} form {quote_plus(secret)}"
    out = redact(text, [secret])
    assert secret not in out
    assert quote(secret, safe="") not in out and quote_plus(secret) not in out
    assert out.count(MASK) == 4
    assert out.startswith("key *** again ***")


def test_empty_and_mask_only_secrets_are_ignored() -> None:
    assert redact("plain text ***", ["", "   ", "***"]) == "plain text ***"


def test_masking_that_splices_a_new_occurrence_is_repeated() -> None:
    # "x" + "x**" → "x***", which contains "x**" again.
    assert "x**" not in redact("xx**", ["x**"])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("export SWANLAB_API_KEY=abc123XYZ", "export SWANLAB_API_KEY=***"),
        ('SWANLAB_API_KEY="a b c" next', 'SWANLAB_API_KEY="***" next'),
        ("HF_TOKEN=hf_abc WANDB_API_KEY=w1 OPENAI_KEY=sk-1", "HF_TOKEN=*** WANDB_API_KEY=*** OPENAI_KEY=***"),
        ("AWS_SECRET_ACCESS_KEY=xyz DB_PASSWORD=pw", "AWS_SECRET_ACCESS_KEY=*** DB_PASSWORD=***"),
        ("overrides: ['+trainer.swanlab_api_key=zzz']", "overrides: ['+trainer.swanlab_api_key=***']"),
        ("swanlab login --api-key KKK123 --host h", "swanlab login --api-key *** --host h"),
        ("cli --token=abc --password pw", "cli --token=*** --password ***"),
        ("swanlab login --relogin -k QQQ", "swanlab login --relogin -k ***"),
        ('{"api_key": "v1", "password": 12345}', '{"api_key": "***", "password": ***}'),
        ("{'secret': 'x y', 'wandb_api_key': None}", "{'secret': '***', 'wandb_api_key': None}"),
        ("password: hunter2", "password: ***"),
        ("authorization: Bearer abc.def", "authorization: Bearer ***"),
        ('headers={"Authorization": "abcdef"}', 'headers={"Authorization": "***"}'),
        ("GET https://api.x/v1?token=ttt&page=2", "GET https://api.x/v1?token=***&page=2"),
        ("http_proxy=http://bob:s3cr@t@proxy.local:3128/", "http_proxy=http://bob:***@proxy.local:3128/"),
        ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.sig_abcdEF end", "jwt *** end"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIE\nabc\n-----END RSA PRIVATE KEY-----\nafter", "***\nafter"),
        ("tail -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk", "tail ***"),
    ],
)
def test_generic_secret_shapes(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "data.prompt_key=prompt data.reward_fn_key=data_source",
        "actor_rollout_ref.model.tokenizer_path=/models/q max_tokens=5 response_length/max_token_len:8192",
        "step:3 - actor/pg_loss:np.float64(0.1) - timing_s/step:50.1",
        "https://proxy.local:3128/path and http://host:8080",
        "Key 'foo' is not in struct",
        "{'swanlab_api_key': None}",
    ],
)
def test_ordinary_verl_text_is_left_alone(text: str) -> None:
    assert redact(text) == text


def test_redact_url_keeps_scheme_user_and_host() -> None:
    assert redact_url("http://user:pass@host:8080") == "http://user:***@host:8080"
    assert redact_url("socks5h://u:p%40ss@10.0.0.1:1080") == "socks5h://u:***@10.0.0.1:1080"
    assert redact_url("https://proxy.corp:3128") == "https://proxy.corp:3128"


def test_generic_redaction_is_idempotent() -> None:
    text = "SWANLAB_API_KEY=abc http://u:p@h:1 authorization: Bearer x"
    once = redact_generic(text)
    assert redact_generic(once) == once


secrets = st.text(min_size=1, max_size=40).filter(lambda s: s.strip() != "" and s.strip("*") != "")
surroundings = st.text(max_size=200)


@settings(max_examples=400, deadline=None)
@given(secret=secrets, before=surroundings, after=surroundings, encoded=st.sampled_from(["raw", "quote", "plus"]))
def test_property_a_random_secret_inserted_anywhere_never_survives(
    secret: str, before: str, after: str, encoded: str
) -> None:
    form = {"raw": secret, "quote": quote(secret, safe=""), "plus": quote_plus(secret)}[encoded]
    out = redact(before + form + after, [secret])
    assert secret not in out
    assert quote(secret, safe="") not in out
    assert quote_plus(secret) not in out


@settings(max_examples=200, deadline=None)
@given(secret=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=6, max_size=30))
def test_property_unknown_values_of_secret_names_are_masked(secret: str) -> None:
    # `--api-key --x` reads as a flag without a value followed by the next flag.
    assume(secret.strip("-_") and not secret.startswith("--"))
    for template in ("SWANLAB_API_KEY={}", "--api-key {}", '"token": "{}"', "http://me:{}@proxy:3128"):
        assert secret not in redact(template.format(secret)), template


def test_swanlab_login_masking_is_linear_on_a_long_hostile_line() -> None:
    """Issue 27 §4: `swanlab login` repeated on one line without `-k` made the mask's lazy scan quadratic (14 KB:
    0.16 s, 56 KB: 1.8 s). Growth is compared, best of five, against the same line four times longer: linear
    grows ~4x, quadratic ~16x; no absolute time. Timed in this thread's CPU time, not wall time: on a busy machine
    a wall-clock sample counts the time other processes held the core (a fresh-clone run measured 12x that way)."""
    import time

    def best(n: int) -> float:
        line = "swanlab login " * n
        runs = []
        for _ in range(5):
            began = time.thread_time()
            redact_generic(line)
            runs.append(time.thread_time() - began)
        return min(runs)

    assert best(8000) / best(2000) < 9
    assert redact_generic("swanlab login --relogin -k abcdef123456SECRET") == "swanlab login --relogin -k ***"
