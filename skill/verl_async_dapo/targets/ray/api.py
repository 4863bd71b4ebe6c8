"""A small blocking client for the Ray dashboard's Jobs REST API (stdlib only; callers use threads).

Why not ``ray.job_submission.JobSubmissionClient``: it needs the ``ray`` package (hundreds of MB)
in the server, and the REST API is small and stable (docs.ray.io "Ray Jobs REST API"):
``POST /api/jobs/``, ``GET /api/jobs/{id}``, ``GET /api/jobs/{id}/logs``, ``POST /api/jobs/{id}/stop``,
``DELETE /api/jobs/{id}``, ``GET /api/version``, plus the State API's ``/api/v0/nodes`` and
``/api/v0/logs/file`` and the dashboard's ``/api/cluster_status``.

Requests never go through the environment's proxies (the dashboard is on the cluster's network;
``http_proxy`` is for training egress) and never follow redirects (a redirect could move the
request, and the secrets in a submission's runtime_env, to another host). Error messages carry the
status and a short excerpt of the response, never the request body.

Token authentication (Ray >= 2.52, ``RAY_AUTH_MODE=token``): when targets/ray/auth.py finds a token
(RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token) every request carries
``Authorization: Bearer <token>``; since redirects are refused, the header only ever goes to the
configured address. A 401 or 403 becomes RayAuthError, whose message says where the token is looked
for (or which source gave the refused one), never the token itself.
"""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from verl_async_dapo.exceptions import InvalidTargetInput, TargetError, TargetUnavailable
from verl_async_dapo.targets.ray.auth import TOKEN_ENV, TOKEN_PATH_ENV, RayToken, find_token
from verl_async_dapo.untrusted import quoted

DEFAULT_TIMEOUT = 10.0
LOGS_TIMEOUT = 60.0
MAX_RESPONSE_BYTES = 256 << 20  # a driver log can be big; anything larger is refused, not buffered

TERMINAL_STATUSES = frozenset({"STOPPED", "SUCCEEDED", "FAILED"})
ACTIVE_STATUSES = frozenset({"PENDING", "RUNNING"})


class RayApiError(TargetError):
    """The dashboard answered with an error status."""

    def __init__(self, message: str, status: int, body: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class RayAuthError(RayApiError):
    """The dashboard wants a token (401) or refused ours (403); the message says what to do."""


def auth_error_message(address: str, status: int, token: RayToken | None) -> str | None:
    """The actionable text for an authentication failure, or None when ``status`` is not one."""
    if status == 401:
        sent = (
            f" (a token from {token.source} was sent but did not arrive: does a proxy drop the Authorization header?)"
            if token is not None
            else ""
        )
        return (
            f"the Ray cluster at {address} requires a token (token authentication is on){sent}: set {TOKEN_ENV}, "
            f"or {TOKEN_PATH_ENV} to a file holding it, or put it in ~/.ray/auth_token — `ray get-auth-token` "
            "on the head node prints it"
        )
    if status == 403 and token is not None:
        return (
            f"the Ray cluster at {address} refused the token from {token.source}: it is not this cluster's token; "
            f"`ray get-auth-token` on the head node prints the right one ({TOKEN_ENV} wins over {TOKEN_PATH_ENV}, "
            "which wins over ~/.ray/auth_token)"
        )
    return None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        raise urllib.error.HTTPError(req.full_url, code, f"redirect refused ({code})", headers, fp)


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


@dataclass(frozen=True)
class JobInfo:
    """The part of a job's record we use (never its runtime_env: that holds secrets)."""

    submission_id: str
    status: str
    message: str = ""
    driver_exit_code: int | None = None
    driver_node_id: str | None = None
    start_time: int | None = None
    end_time: int | None = None
    entrypoint: str = ""
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JobInfo:
        code = data.get("driver_exit_code")
        metadata = data.get("metadata") or {}
        return cls(
            submission_id=str(data.get("submission_id") or data.get("job_id") or ""),
            status=str(data.get("status") or "").upper(),
            message=str(data.get("message") or ""),
            driver_exit_code=code if isinstance(code, int) else None,
            driver_node_id=data.get("driver_node_id") or None,
            start_time=data.get("start_time"),
            end_time=data.get("end_time"),
            entrypoint=str(data.get("entrypoint") or ""),
            metadata={str(k): str(v) for k, v in metadata.items()} if isinstance(metadata, dict) else {},
        )


def _excerpt(body: str, limit: int = 300) -> str:
    """The informative end of an error body (tracebacks end with the exception line)."""
    lines = [line.strip() for line in body.strip().splitlines() if line.strip() and line.strip() != "."]
    return quoted(lines[-1], limit) if lines else "(no body)"  # the dashboard's words: data, delimited


class RayJobsClient:
    """One dashboard. Blocking; every method raises TargetUnavailable when the dashboard cannot be reached."""

    def __init__(self, address: str, *, timeout: float = DEFAULT_TIMEOUT, token: RayToken | None = None) -> None:
        """Without ``token`` it is looked up now (targets/ray/auth.py; RayTokenError when misconfigured)."""
        if not address.startswith(("http://", "https://")):
            raise InvalidTargetInput(f"a Ray dashboard address must be http(s)://, got {address[:80]!r}")
        self.address = address.rstrip("/")
        self.timeout = timeout
        self._token = token if token is not None else find_token()

    def __repr__(self) -> str:
        return f"RayJobsClient({self.address!r})"

    # -- transport ---------------------------------------------------------------------------

    def _request(
        self, method: str, path: str, body: dict[str, Any] | None = None, *, timeout: float | None = None
    ) -> bytes:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self._token is not None:
            headers["Authorization"] = f"Bearer {self._token.value}"
        # The address was checked to be http(s) (clusters.normalise_address); no file:// or custom schemes.
        request = urllib.request.Request(self.address + path, data=data, method=method, headers=headers)  # noqa: S310
        try:
            with _OPENER.open(request, timeout=timeout or self.timeout) as response:
                raw = response.read(MAX_RESPONSE_BYTES + 1)
        except urllib.error.HTTPError as exc:
            text = exc.read(64 << 10).decode("utf-8", "replace") if exc.fp else ""
            if self._token is not None:  # never echo our own token, whatever the server (or a proxy) answered
                text = text.replace(self._token.value, "***")
            auth = auth_error_message(self.address, exc.code, self._token)
            if auth is not None:
                raise RayAuthError(auth, exc.code, text) from None
            raise RayApiError(
                f"Ray dashboard {self.address}: {method} {path.split('?')[0]} → HTTP {exc.code}: {_excerpt(text)}",
                exc.code,
                text,
            ) from None
        except (TimeoutError, urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise TargetUnavailable(
                f"the Ray dashboard at {self.address} is not reachable ({reason}); check the address and that "
                "the head node's dashboard port (8265 by default) is open to this machine"
            ) from None
        if len(raw) > MAX_RESPONSE_BYTES:
            raise TargetError(f"Ray dashboard {self.address}: response to {path} exceeds {MAX_RESPONSE_BYTES} bytes")
        return raw

    def _json(self, method: str, path: str, body: dict[str, Any] | None = None, **kw: Any) -> Any:
        raw = self._request(method, path, body, **kw)
        try:
            return json.loads(raw.decode("utf-8", "replace"))
        except json.JSONDecodeError:
            raise TargetError(
                f"Ray dashboard {self.address}: {path} did not answer JSON (is this the dashboard port?)"
            ) from None

    @staticmethod
    def _job_path(submission_id: str, suffix: str = "") -> str:
        return f"/api/jobs/{quote(submission_id, safe='')}{suffix}"

    # -- Jobs API --------------------------------------------------------------------------------

    def version(self) -> dict[str, Any]:
        data = self._json("GET", "/api/version")
        if not isinstance(data, dict) or "ray_version" not in data:
            raise TargetError(f"{self.address} answered /api/version without ray_version: not a Ray dashboard?")
        return data

    def submit(
        self,
        entrypoint: str,
        *,
        submission_id: str,
        env_vars: dict[str, str],
        metadata: dict[str, str],
    ) -> bool:
        """True when submitted now; False when a job with this submission_id already exists."""
        body = {
            "entrypoint": entrypoint,
            "submission_id": submission_id,
            "runtime_env": {"env_vars": env_vars},
            "metadata": metadata,
        }
        try:
            self._json("POST", "/api/jobs/", body)
        except RayApiError as exc:
            # Ray answers a duplicate id with 400 or 500 and "...already exists..." in the text.
            if "already exists" in exc.body:
                return False
            raise
        return True

    def job(self, submission_id: str) -> JobInfo | None:
        """The job's record, or None when the cluster has no such job."""
        try:
            data = self._json("GET", self._job_path(submission_id))
        except RayApiError as exc:
            if exc.status == 404:
                return None
            raise
        if not isinstance(data, dict):
            raise TargetError(f"Ray dashboard {self.address}: unexpected job record for {submission_id}")
        return JobInfo.from_json(data)

    def jobs(self) -> list[JobInfo]:
        data = self._json("GET", "/api/jobs/")
        items = data if isinstance(data, list) else (data.get("jobs") or []) if isinstance(data, dict) else []
        return [JobInfo.from_json(item) for item in items if isinstance(item, dict)]

    def logs(self, submission_id: str, driver_node_id: str | None = None) -> bytes:
        """The job's whole driver log as bytes.

        ``/api/jobs/{id}/logs`` decodes the file as UTF-8 on the server and fails with 500 on one
        invalid byte; then the State API's raw file endpoint (needs the driver's node id) answers.
        """
        try:
            data = self._json("GET", self._job_path(submission_id, "/logs"), timeout=LOGS_TIMEOUT)
            return str(data.get("logs", "") if isinstance(data, dict) else "").encode("utf-8")
        except RayApiError as exc:
            if exc.status != 500 or not driver_node_id:
                raise
        query = urlencode({"node_id": driver_node_id, "filename": f"job-driver-{submission_id}.log", "lines": "-1"})
        return self._request("GET", f"/api/v0/logs/file?{query}", timeout=LOGS_TIMEOUT)

    def stop(self, submission_id: str) -> bool:
        """True when a stop was sent; False when the job had already ended or does not exist."""
        try:
            data = self._json("POST", self._job_path(submission_id, "/stop"))
        except RayApiError as exc:
            if exc.status == 404:
                return False
            raise
        return bool(data.get("stopped")) if isinstance(data, dict) else False

    def delete(self, submission_id: str) -> None:
        """Forget a finished job (its record and log); errors are not worth failing over."""
        with contextlib.suppress(TargetError):
            self._request("DELETE", self._job_path(submission_id))

    # -- cluster ---------------------------------------------------------------------------------

    def nodes(self) -> list[dict[str, Any]]:
        """Every node with state and ``resources_total`` (State API, as ``ray list nodes``)."""
        data = self._json("GET", "/api/v0/nodes?limit=10000&detail=false")
        result = data.get("data", {}).get("result", {}) if isinstance(data, dict) else {}
        items = result.get("result") if isinstance(result, dict) else result
        if not isinstance(items, list):
            raise TargetError(f"Ray dashboard {self.address}: unexpected /api/v0/nodes answer")
        return [n for n in items if isinstance(n, dict)]

    def resource_usage(self) -> dict[str, tuple[float, float]]:
        """Cluster-wide ``{resource: (used, total)}`` from the autoscaler report; {} when not yet known."""
        try:
            data = self._json("GET", "/api/cluster_status")
        except RayApiError:
            return {}
        report = (((data or {}).get("data") or {}).get("clusterStatus") or {}).get("loadMetricsReport") or {}
        usage = report.get("usage") or {}
        out: dict[str, tuple[float, float]] = {}
        for name, pair in usage.items():
            if isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, (int, float)) for x in pair):
                out[str(name)] = (float(pair[0]), float(pair[1]))
        return out
