"""Remove secrets from anything we show, store or log (pure).

Two layers. Known secret values (the SwanLab key, a proxy password, …) are replaced
wherever they occur, also URL-encoded. Generic shapes that look secret are masked even when
we were never told the value: `*_API_KEY=…` / `TOKEN` / `SECRET` / `PASSWORD` assignments
(env, CLI, Hydra override, JSON / Python-dict / YAML style), the password in
`scheme://user:pass@host`, `authorization:` headers, JWTs and PEM private keys.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

MASK = "***"

# A name whose last word marks it secret: `SWANLAB_API_KEY`, `hf_token`, `db.password`,
# `AWS_SECRET_ACCESS_KEY`. Not `tokenizer`, `max_tokens` or `prompt_key` (verl's config is
# full of those): a bare `…KEY` counts only in upper case, the env-var convention.
_SENSITIVE_WORD = (
    r"(?i:api[_-]?key|apikey|access[_-]?key(?:[_-]?id)?|secret(?:[_-]?key)?|private[_-]?key"
    r"|(?:access|auth|refresh|bearer|session)[_-]?token|token|passw(?:or)?d|passphrase|pwd|credentials?)"
    r"|[A-Z0-9_]*KEY"
)
# The secret word ends the name and starts one of its words (`_`, `.`, `-` separate words).
_NAME_BODY = rf"[A-Za-z0-9_.-]{{0,64}}?(?<![A-Za-z0-9])(?:{_SENSITIVE_WORD})(?![A-Za-z0-9])"
_SENSITIVE_NAME = rf"(?<![A-Za-z0-9_.-]){_NAME_BODY}"
# A value: quoted (may hold spaces) or bare.
_VALUE = r"(?:\"(?P<dq>[^\"\n]*)\"|'(?P<sq>[^'\n]*)'|(?P<bare>[^\s\"',;}&)\]]+))"

# NAME=value: env (`export NAME="v"`), Hydra override, `--name=value`.
_ASSIGNMENT_RE = re.compile(rf"{_SENSITIVE_NAME}\s*=\s*{_VALUE}")
# `--api-key value`, `--token value` (a value may start with one `-`; `--next` is the next flag).
_CLI_FLAG_RE = re.compile(rf"(?<![\w-])--{_NAME_BODY}\s+(?!--){_VALUE}")
# "name": "value" (JSON), 'name': 'value' (verl's pprinted config), name: value (YAML).
_MAPPING_RE = re.compile(rf"(?P<nq>[\"']?){_SENSITIVE_NAME}(?P=nq)\s*:\s*(?!None\b|null\b){_VALUE}")
_AUTH_HEADER_RE = re.compile(
    r"(?i:\b(?:proxy-)?authorization)[\"']?\s*[:=]\s*[\"']?(?:(?i:bearer|basic|token|digest)\s+)?"
    r"(?P<bare>[^\s\"',}]+)"
)
# scheme://user:password@host → keep scheme, user and host. The password runs to the last `@`
# before the host, so an unencoded `@` inside it does not leak the rest.
_URL_USERINFO_RE = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:(?P<bare>[^\s/]+)(?=@[^\s/@]+)")
# scheme://TOKEN@host: a credential as the user name alone. Only token-like names (16+ characters) are masked in
# free text, so `ssh://git@host` stays readable; a proxy answer masks any lone user (answers.mask_url).
_URL_TOKEN_USER_RE = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://(?P<bare>[A-Za-z0-9._~%+-]{16,})(?=@[^\s/@]+)")
_QUERY_RE = re.compile(
    r"[?&](?i:access_token|token|api[_-]?key|apikey|key|password|secret|sig|signature)=(?P<bare>[^&\s#\"']+)"
)
# `swanlab login -k <key>` (the short flag is too generic to mask everywhere).
# Bounded (a login command line, not a whole log): many "swanlab login" on one long line stay linear (issue 27 §4).
_SWANLAB_LOGIN_RE = re.compile(r"\bswanlab\s{1,20}login\b[^\n]{0,400}?\s-k\s{1,20}(?P<bare>[^\s\"']+)")
_JWT_RE = re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}")
# A PEM key cut off by a log tail has no END line: mask to the end.
_PEM_RE = re.compile(
    r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----.*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|\Z)",
    re.DOTALL,
)
_VALUE_GROUPS = ("dq", "sq", "bare")


def _mask_value(match: re.Match[str]) -> str:
    """The match with only its value group replaced (quotes, names and hosts stay readable)."""
    for group in _VALUE_GROUPS:
        if group in match.re.groupindex and match.group(group) is not None:
            value = match.group(group)
            if value in ("", MASK):
                return match.group(0)
            start, end = match.start(group) - match.start(0), match.end(group) - match.start(0)
            whole = match.group(0)
            return whole[:start] + MASK + whole[end:]
    return match.group(0)


def redact_generic(text: str) -> str:
    """Mask secret-looking things without knowing any secret value."""
    if "-----BEGIN" in text:
        text = _PEM_RE.sub(MASK, text)
    if "eyJ" in text:
        text = _JWT_RE.sub(MASK, text)
    if "://" in text:
        text = _URL_USERINFO_RE.sub(_mask_value, text)
        text = _URL_TOKEN_USER_RE.sub(_mask_value, text)
    if "=" in text:
        text = _ASSIGNMENT_RE.sub(_mask_value, text)
        text = _QUERY_RE.sub(_mask_value, text)
    if "--" in text:
        text = _CLI_FLAG_RE.sub(_mask_value, text)
    if ":" in text:
        text = _MAPPING_RE.sub(_mask_value, text)
    if "uthorization" in text or "UTHORIZATION" in text:
        text = _AUTH_HEADER_RE.sub(_mask_value, text)
    if "login" in text:
        text = _SWANLAB_LOGIN_RE.sub(_mask_value, text)
    return text


def _secret_forms(secrets: Iterable[str]) -> list[str]:
    """Each secret plus its URL-encoded spellings, longest first so none is half-masked."""
    forms: set[str] = set()
    for secret in secrets:
        # Whitespace-only or mask-only values cannot be told apart from ordinary text.
        if not secret or not secret.strip() or not secret.strip("*"):
            continue
        forms.update({secret, quote(secret, safe=""), quote(secret), quote_plus(secret)})
    return sorted(forms, key=len, reverse=True)


def _mask_known(text: str, pattern: re.Pattern[str]) -> str:
    # Masking can splice a new occurrence together ("x" + "x**" → "x***"); repeat until none
    # is left. Each pass removes at least one character that is not "*", so this ends.
    while pattern.search(text):
        text = pattern.sub(MASK, text)
    return text


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every known secret and every secret-looking value replaced by ``***``."""
    forms = _secret_forms(secrets)
    if not forms:
        return redact_generic(text)
    pattern = re.compile("|".join(re.escape(form) for form in forms))
    # Known values first (the generic rules could cut one in half and leave a piece behind),
    # and again after them, in case a generic mask completed a value ("=" + "***").
    return _mask_known(redact_generic(_mask_known(text, pattern)), pattern)


def redact_url(url: str, secrets: Iterable[str] = ()) -> str:
    """A URL (e.g. a proxy) safe to show: `http://user:***@host:3128`, secret query values masked."""
    return redact(url, secrets)
