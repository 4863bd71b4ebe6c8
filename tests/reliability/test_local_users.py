"""Another local user (uid 65534, "nobody") against the owner's HTTP server on loopback (issue 20, finding 1).

Seen before the fix: ``serve --transport http --host 127.0.0.1`` without a token; a request from uid 65534 called
``select_container`` with ``create`` mounting ``/`` read-write and joined the owner's session. Now every TCP bind
needs a bearer token, generated 0600 into the owner's config dir when none is set. Here the config dir's parent is
world-traversable (like a home directory at 0755), so the only thing keeping the token from the other user is the
file and directory modes, and the other user really runs as another uid (``os.setuid`` in the child).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest
from rel_helpers import record

from harness.http_server import generated_token, http_server

OTHER_UID = 65534


def _world_python() -> str | None:
    """A Python the other user may run (the suite's own may live under /root, 0700)."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3"):
        path = Path(candidate).resolve()
        if path.is_file() and path.stat().st_mode & 0o001:
            return str(path)
    return None


# The other user's attempts: read the token, then call tools without it, with a guess and with a wrong scheme.
ATTACK = r"""
import http.client, json, os, sys
config, port = sys.argv[1], int(sys.argv[2])
out = {"uid": os.getuid()}
try:
    open(os.path.join(config, "http_token")).read()
    out["read_token"] = True
except OSError as exc:
    out["read_token"] = False
    out["read_error"] = type(exc).__name__
try:
    out["listed"] = os.listdir(config)
except OSError:
    out["listed"] = None
init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
        "capabilities": {}, "clientInfo": {"name": "other-user", "version": "0"}}}
call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "select_container", "arguments": {
        "create": {"name": "pwn", "image": "debian:12", "gpus": "none", "mounts": {"/": "/host"}}}}}
statuses = []
for body, auth in ((init, None), (call, None), (init, "Bearer guess-0123456789-0123456789"), (call, "Basic eDp5")):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    headers = {"Host": f"127.0.0.1:{port}", "Content-Type": "application/json",
               "Accept": "application/json, text/event-stream"}
    if auth:
        headers["Authorization"] = auth
    conn.request("POST", "/mcp", body=json.dumps(body), headers=headers)
    statuses.append(conn.getresponse().status)
    conn.close()
out["statuses"] = statuses
print(json.dumps(out))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="simulating a second local user needs root (os.setuid)")
@pytest.mark.skipif(_world_python() is None, reason="no Python that another user may run")
def test_another_local_user_cannot_call_tools_on_loopback(tmp_path: Path) -> None:
    shared = tmp_path / "home"  # world-traversable, like /home/alice at 0755
    shared.mkdir()
    for path in (tmp_path, *tmp_path.parents):
        if path != Path("/") and not path.stat().st_mode & 0o001:
            os.chmod(path, path.stat().st_mode | 0o001)  # let uid 65534 walk down to it (tmp dirs are 0700)
    os.chmod(shared, 0o755)  # noqa: S103 - the point: a directory other users may traverse
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_ASYNC_DAPO_")}
    env.update(VERL_ASYNC_DAPO_HOME=str(shared / "state"), VERL_ASYNC_DAPO_CONFIG_DIR=str(shared / "config"))
    with http_server("127.0.0.1", env, tmp_path) as port:
        owner_token = generated_token(env)
        proc = subprocess.run(
            [str(_world_python()), "-I", "-c", ATTACK, env["VERL_ASYNC_DAPO_CONFIG_DIR"], str(port)],
            capture_output=True, text=True, timeout=60, check=False, cwd="/",
            preexec_fn=lambda: (os.setgroups([]), os.setgid(OTHER_UID), os.setuid(OTHER_UID)),
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        seen = json.loads(proc.stdout)
        assert seen["uid"] == OTHER_UID
        assert seen["read_token"] is False and seen["read_error"] == "PermissionError", seen
        assert seen["listed"] is None, "the config dir must be 0700"
        assert seen["statuses"] == [401, 401, 401, 401], seen
        # The owner, with the token, is served (the refusals were about the caller, not a broken server).
        import http.client

        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
        conn.request("POST", "/mcp", body=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "owner", "version": "0"}}}),
            headers={"Host": f"127.0.0.1:{port}", "Content-Type": "application/json",
                     "Accept": "application/json, text/event-stream", "Authorization": f"Bearer {owner_token}"})  # fmt: skip
        assert conn.getresponse().status == 200
        conn.close()
    db = shared / "state" / "state.db"
    if db.exists():  # nothing the other user sent changed the owner's state
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn_db:
            assert conn_db.execute("SELECT COUNT(*) FROM answers").fetchone()[0] == 0
    record("http_other_local_user", uid=OTHER_UID, refused_requests=len(seen["statuses"]), token_readable=False)
