"""Object-store options in one place: the defaults refold adds, the pyarrow filesystem that reads
a table's data files with the same options, and the one-line error for a store that cannot be
reached.

``storage_options`` are delta-rs's (the ``object_store`` crate's) keys, e.g. for S3
``AWS_ENDPOINT_URL``, ``AWS_REGION``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_SESSION_TOKEN``, ``AWS_ALLOW_HTTP``; what a caller leaves out is read from the same-named
environment variables, by delta-rs and by :func:`arrow_filesystem` alike.

Defaults (:func:`with_defaults`, for object-store URIs only; a caller's own value always wins):

===============================  ====================================================================
``conditional_put: etag``        S3 only: the log's compare-and-append uses the store's conditional
                                 put, so two writers cannot both commit a version (no lock service)
``max_retries: 4``               a failed request (connection error, 5xx, throttling) is retried by
``retry_timeout: 60s``           object_store with exponential backoff and jitter, up to 4 times and
``backoff_config.init_backoff``  within 60 s of the first attempt (first wait 200 ms, at most 10 s);
``: 200ms``, ``max_backoff:10s`` delta-rs's own defaults (10 retries within 180 s) leave a job with
                                 a wrong endpoint hanging for three minutes before it says so
``connect_timeout: 10s``         a host that does not answer fails the attempt after 10 s
===============================  ====================================================================

Reads of data files that refold makes with pyarrow (:mod:`refold.storage.delta.io`,
:mod:`refold.storage.log.reader`, the event-id index) get their filesystem from
:func:`arrow_filesystem`, built from the same options: pyarrow does not see delta-rs's options
and would otherwise read ``s3://`` with its own defaults (no endpoint, other credentials).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from refold.fold.errors import StoreError

__all__ = ["RETRY_DEFAULTS", "arrow_filesystem", "arrow_paths", "cause_of", "is_object_store", "said", "store_error",
           "with_defaults"]

#: object_store's retry and client settings refold sets unless the caller sets them
RETRY_DEFAULTS: Mapping[str, str] = {
    "max_retries": "4",
    "retry_timeout": "60s",
    "backoff_config.init_backoff": "200ms",
    "backoff_config.max_backoff": "10s",
    "connect_timeout": "10s",
}

#: delta-rs's S3 option names (lower-cased) → the setting they give (aliases object_store accepts)
_S3_KEYS = {
    "aws_endpoint_url": "endpoint", "aws_endpoint_url_s3": "endpoint", "aws_endpoint": "endpoint",
    "endpoint_url": "endpoint",
    "endpoint": "endpoint",
    "aws_region": "region", "region": "region", "aws_default_region": "region",
    "aws_access_key_id": "access_key", "access_key_id": "access_key",
    "aws_secret_access_key": "secret_key", "secret_access_key": "secret_key",
    "aws_session_token": "session_token", "aws_token": "session_token", "session_token": "session_token",
    "token": "session_token",
    "aws_allow_http": "allow_http", "allow_http": "allow_http",
    "aws_virtual_hosted_style_request": "virtual_hosted", "virtual_hosted_style_request": "virtual_hosted",
    "max_retries": "max_retries",
}
#: where a setting is read from the environment when the options leave it out (delta-rs does too)
_S3_ENV = {
    "endpoint": ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"),
    "region": ("AWS_REGION", "AWS_DEFAULT_REGION"),
    "access_key": ("AWS_ACCESS_KEY_ID",),
    "secret_key": ("AWS_SECRET_ACCESS_KEY",),
    "session_token": ("AWS_SESSION_TOKEN",),
    "allow_http": ("AWS_ALLOW_HTTP",),
    "virtual_hosted": ("AWS_VIRTUAL_HOSTED_STYLE_REQUEST",),
}


def is_object_store(uri: str) -> bool:
    """Whether ``uri`` names an object store (``s3://``, ``gs://``, ``az://`` …), not a local path."""
    return "://" in uri and not uri.startswith("file://")


def _scheme(uri: str) -> str:
    return uri.split("://", 1)[0].lower() if "://" in uri else "file"


def with_defaults(uri: str, options: Mapping[str, str] | None) -> dict[str, str] | None:
    """``options`` with refold's defaults for the store at ``uri`` added (see the module
    docstring); a local path gets ``options`` unchanged."""
    if not is_object_store(uri):
        return dict(options) if options else None
    out = {str(k): str(v) for k, v in (options or {}).items()}
    given = {k.lower() for k in out}
    defaults = dict(RETRY_DEFAULTS)
    if _scheme(uri) in ("s3", "s3a"):
        defaults["conditional_put"] = "etag"
    for key, value in defaults.items():
        if key.lower() not in given and f"aws_{key.lower()}" not in given:
            out[key] = value
    return out


def _s3_settings(options: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    settings: dict[str, str] = {}
    for key, value in options.items():
        name = _S3_KEYS.get(key.lower())
        if name is not None and value not in (None, ""):
            settings[name] = str(value)
    for name, variables in _S3_ENV.items():
        if name not in settings:
            value = next((env[v] for v in variables if env.get(v)), None)
            if value is not None:
                settings[name] = value
    return settings


def _true(value: str | None) -> bool:
    return str(value or "").strip().lower() in ("1", "true", "yes", "on")


@functools.lru_cache(maxsize=16)
def _s3_filesystem(settings: tuple[tuple[str, str], ...]) -> pafs.FileSystem:
    s = dict(settings)
    kwargs: dict[str, Any] = {}
    endpoint = s.get("endpoint")
    if endpoint:
        scheme, _, host = endpoint.partition("://")
        if not host:  # a bare host: https unless http is allowed
            scheme, host = ("http" if _true(s.get("allow_http")) else "https"), endpoint
        kwargs["endpoint_override"] = host.rstrip("/")
        kwargs["scheme"] = scheme
    if s.get("region"):
        kwargs["region"] = s["region"]
    if s.get("access_key") and s.get("secret_key"):
        kwargs["access_key"] = s["access_key"]
        kwargs["secret_key"] = s["secret_key"]
        if s.get("session_token"):
            kwargs["session_token"] = s["session_token"]
    if "virtual_hosted" in s:
        kwargs["force_virtual_addressing"] = _true(s["virtual_hosted"])
    attempts = int(s.get("max_retries", RETRY_DEFAULTS["max_retries"])) + 1
    kwargs["retry_strategy"] = pafs.AwsStandardS3RetryStrategy(max_attempts=attempts)
    kwargs["connect_timeout"] = 10
    return pafs.S3FileSystem(**kwargs)


def arrow_filesystem(uri: str, options: Mapping[str, str] | None, *,
                     env: Mapping[str, str] | None = None) -> pafs.FileSystem | None:
    """The pyarrow filesystem that reads ``uri`` with the same endpoint, region, credentials and
    retries as delta-rs given ``options`` (missing ones from ``env``, default ``os.environ``).

    None for a local path (pyarrow reads it as is). S3 is mapped key by key; another object store
    (``gs://``, ``az://``) gets pyarrow's own filesystem for the URI, which reads its credentials
    from the environment.
    """
    if not is_object_store(uri):
        return None
    scheme = _scheme(uri)
    if scheme in ("s3", "s3a"):
        settings = _s3_settings(options or {}, os.environ if env is None else env)
        return _s3_filesystem(tuple(sorted(settings.items())))
    try:
        return pafs.FileSystem.from_uri(uri)[0]
    except (pa.ArrowInvalid, OSError) as exc:
        raise StoreError(f"cannot read {uri} with pyarrow: {exc}") from exc


def arrow_paths(uris: Sequence[str], filesystem: pafs.FileSystem | None) -> list[str]:
    """``uris`` as ``filesystem`` names them (``bucket/key`` for an object store, a plain path for
    a local file)."""
    if filesystem is None:
        return [u.removeprefix("file://") for u in uris]
    return [u.split("://", 1)[1] if "://" in u else u for u in uris]


#: phrases in object_store / pyarrow errors → what is missing, and what to do (first match wins)
_CAUSES = (
    (("nosuchbucket", "bucket does not exist"),
     "the bucket does not exist", "create it, or fix the bucket name in the URI"),
    (("invalidaccesskeyid", "signaturedoesnotmatch", "accessdenied", "access denied", "403 forbidden",
      "invalidtoken", "expiredtoken", "invalidclienttokenid"),
     "the credentials were refused (access denied)",
     "check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) in --storage-options "
     "or the job's environment, and that they may list, read and write the prefix"),
    (("authorizationheadermalformed", "permanentredirect", "missing region", "incorrect region"),
     "the region is missing or wrong", "set AWS_REGION to the bucket's region"),
    (("url scheme is not allowed", "builder error"),
     "the endpoint is http:// but plain HTTP is not allowed",
     "set AWS_ALLOW_HTTP=true (a local or private S3 API), or use the https:// endpoint"),
    (("error sending request", "connection refused", "dns error", "timed out", "failed to connect",
      "tcp connect", "failed to lookup address"),
     "the endpoint cannot be reached",
     "set AWS_ENDPOINT_URL (and AWS_ALLOW_HTTP=true for http://) for a store that is not AWS, and "
     "AWS_REGION, in --storage-options or the job's environment; or check the network"),
    (("no credentials", "missing credentials", "credential"),
     "no credentials were found",
     "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in --storage-options or the job's environment"),
)

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def said(exc: BaseException) -> str:
    """The object store's own words, short: the S3 error code and message when the answer has
    them, else the innermost cause of object_store's chain."""
    text = _ANSI.sub("", str(exc))
    code, message = re.search(r"<Code>([^<]*)</Code>", text), re.search(r"<Message>([^<]*)</Message>", text)
    if code:
        return f"{code.group(1)}: {message.group(1)}" if message else code.group(1)
    parts = [" ".join(p.split()) for p in text.split("↳") if p.strip()]
    said = parts[-1] if parts else " ".join(text.split())
    return said if len(said) <= 200 else said[:197] + "..."


def cause_of(exc: BaseException) -> tuple[str, str] | None:
    """(what went wrong, what to do) for an object-store failure refold recognises (bucket,
    credentials, region, endpoint); None otherwise. Shared by the Delta tables' errors
    (:func:`store_error`) and the side files' (:mod:`refold.storage.files.objects`)."""
    text = " ".join(_ANSI.sub("", str(exc)).split()).lower()
    for needles, what, todo in _CAUSES:
        if any(n in text for n in needles):
            return what, todo
    return None


def store_error(uri: str, exc: BaseException) -> StoreError | None:
    """A one-line :class:`StoreError` naming ``uri`` and what is missing when ``exc`` is an
    object-store failure refold recognises; None otherwise (the caller re-raises ``exc``)."""
    cause = cause_of(exc) if is_object_store(uri) else None
    if cause is None:
        return None
    what, todo = cause
    return StoreError(f"cannot open the store at {uri}: {what}; {todo} (the object store said: {said(exc)})")
