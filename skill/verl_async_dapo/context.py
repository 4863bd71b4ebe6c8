"""The application context shared by the MCP server, the CLI and the supervisor.

Holds the state store, the secret store and the environment the process was started with.
Built once per process from embedded defaults (SQLite in the user data dir) so the server
starts and answers on a machine with no Docker, GPUs or verl.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from verl_async_dapo.paths import config_dir, data_dir

if TYPE_CHECKING:  # imported on first use: the MCP server's start needs none of them (bench/RESULTS.md)
    from verl_async_dapo.secret_store import SecretStore
    from verl_async_dapo.store import Store


@dataclass
class AppContext:
    home: Path  # data dir: state.db, secrets/, runs/
    config_home: Path
    env: Mapping[str, str]
    # How long a busy store is retried before "busy, retry": 0 for tools (answer now), long for the supervisor,
    # which must outlast another process's lock rather than exit (issue 20).
    store_busy_retry_seconds: float = 0.0
    store_busy_timeout: float = 5.0  # one wait for another process's lock, then StoreBusy ("busy, retry")

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None) -> AppContext:
        return cls(home=data_dir(), config_home=config_dir(), env=dict(os.environ if env is None else env))

    @cached_property
    def store(self) -> Store:
        from verl_async_dapo.store import Store

        return Store(self.home / "state.db", busy_timeout=self.store_busy_timeout,
                     busy_retry_seconds=self.store_busy_retry_seconds)  # fmt: skip

    @cached_property
    def secrets(self) -> SecretStore:
        from verl_async_dapo.secret_store import SecretStore

        return SecretStore(self.home / "secrets")

    @property
    def notify_config_file(self) -> Path:
        return self.config_home / "notify.json"

    @property
    def swanlab_config_file(self) -> Path:
        return self.config_home / "swanlab.json"

    def run_dir(self, run_id: str) -> Path:
        """``<home>/runs/<run_id>``, both 0700: mkdir(parents=True) gave ``runs/`` the umask's 0755, so every
        user could list the run ids and their files' names (issue 27, finding 6); an older 0755 one is tightened."""
        from verl_async_dapo.secret_store import ensure_private_dir

        runs = self.home / "runs"
        ensure_private_dir(runs)
        if runs.stat().st_mode & 0o077 and runs.stat().st_uid == os.getuid():
            os.chmod(runs, 0o700)
        path = runs / run_id
        ensure_private_dir(path)
        return path

    def known_secrets(self) -> list[str]:
        """Every secret value we hold or were given, for redacting anything we show or log."""
        # No secrets directory = nothing stored: do not create one just to redact (that fails on a full disk).
        stored = "secrets" in self.__dict__ or (self.home / "secrets").is_dir()
        values = list(self.secrets.known_values()) if stored else []
        from verl_async_dapo.notify.config import secret_env_names  # webhook URLs and signing secrets

        for name in ("SWANLAB_API_KEY", *secret_env_names()):
            if self.env.get(name):
                values.append(self.env[name])
        for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
            value = self.env.get(name, "")
            if "@" in value:
                values.append(value)
        values.extend(self._ray_tokens())
        return values

    def _ray_tokens(self) -> list[str]:
        """The Ray cluster token (targets/ray/auth.py) as given and as the file holds it; reads, never writes."""
        from verl_async_dapo.targets.ray.auth import TOKEN_ENV, RayTokenError, find_token

        values = [self.env[TOKEN_ENV]] if self.env.get(TOKEN_ENV, "").strip() else []
        try:
            token = find_token(self.env)
        except (RayTokenError, RuntimeError):  # an unreadable source, or no home directory: nothing to add
            return values
        return [*values, token.value] if token is not None else values

    def scrub(self, text: str) -> str:
        from verl_async_dapo.redact import redact

        return redact(text, self.known_secrets())

    def close(self) -> None:
        if "store" in self.__dict__:
            self.store.close()
