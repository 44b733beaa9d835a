"""Old object versions under a store prefix on a versioned S3 bucket: list, read, delete.

A bucket with versioning keeps every object a write replaced or a delete removed as a
*noncurrent version*, readable by its version id. For erasure that is one more copy of the data:
the residue scanner reads them (:func:`old_versions`, :func:`read_version`), and the erasure
deletes them (:func:`delete_old_versions`) or says in its receipt that it could not.

obstore (like the ``object_store`` crate under it) has no API for versions, so this uses boto3
(the ``s3`` extra: ``pip install 'refold[s3]'``), configured from the same ``storage_options``
(endpoint, region, credentials; missing ones from the environment, as boto3 reads them) with
botocore's own retry mode ("standard": backoff with jitter on throttling and 5xx). Other object
stores (``gs://``, ``az://``) and local folders have no versions here: the functions return
nothing for them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from refold.fold.errors import StoreError

__all__ = ["OldVersion", "delete_old_versions", "old_versions", "read_version", "versioning"]


@dataclass(frozen=True)
class OldVersion:
    """A noncurrent version (or delete marker) of ``key`` (relative to the store root)."""

    key: str
    version_id: str
    delete_marker: bool = False


def _split(uri: str) -> tuple[str, str] | None:
    """(bucket, prefix) of an ``s3://`` URI; None for anything else."""
    scheme, _, rest = uri.partition("://")
    if scheme.lower() not in ("s3", "s3a") or not rest:
        return None
    bucket, _, prefix = rest.partition("/")
    return bucket, prefix.strip("/")


def _client(options: dict[str, str] | None):
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise StoreError("reading or deleting old object versions needs boto3: pip install 'refold[s3]'") from None
    low = {k.lower(): v for k, v in (options or {}).items()}

    def pick(*names: str) -> str | None:
        return next((low[n] for n in names if n in low), None)

    return boto3.client(
        "s3", endpoint_url=pick("aws_endpoint_url", "aws_endpoint", "endpoint_url", "endpoint"),
        region_name=pick("aws_region", "region", "aws_default_region"),
        aws_access_key_id=pick("aws_access_key_id", "access_key_id"),
        aws_secret_access_key=pick("aws_secret_access_key", "secret_access_key"),
        aws_session_token=pick("aws_session_token", "session_token", "token"),
        config=Config(retries={"mode": "standard", "max_attempts": 5}))


def versioning(uri: str, options: dict[str, str] | None = None) -> str | None:
    """The bucket's versioning status ("Enabled", "Suspended") for an ``s3://`` store; None when
    versioning was never turned on or the store is not on S3."""
    where = _split(uri)
    if where is None:
        return None
    try:
        return _client(options).get_bucket_versioning(Bucket=where[0]).get("Status")
    except Exception as exc:  # noqa: BLE001 - botocore's errors: one line naming the URI
        raise StoreError(f"cannot read the versioning of {uri}: {_said(exc)} (on S3 the credentials need "
                         "s3:GetBucketVersioning)") from None


def old_versions(uri: str, options: dict[str, str] | None = None) -> Iterator[OldVersion]:
    """Every noncurrent version and delete marker under the store prefix (nothing when the bucket
    never had versioning)."""
    where = _split(uri)
    if where is None or versioning(uri, options) is None:
        return
    bucket, prefix = where
    client = _client(options)
    try:
        pages = client.get_paginator("list_object_versions").paginate(
            Bucket=bucket, Prefix=f"{prefix}/" if prefix else "")
        for page in pages:
            for entry in page.get("Versions", ()):
                if not entry.get("IsLatest"):
                    yield OldVersion(_relative(entry["Key"], prefix), entry["VersionId"])
            for entry in page.get("DeleteMarkers", ()):
                yield OldVersion(_relative(entry["Key"], prefix), entry["VersionId"], delete_marker=True)
    except Exception as exc:  # noqa: BLE001
        raise StoreError(f"cannot list the old object versions under {uri}: {_said(exc)} (on S3 the "
                         "credentials need s3:ListBucketVersions)") from None


def read_version(uri: str, version: OldVersion, options: dict[str, str] | None = None) -> bytes:
    bucket, prefix = _split(uri) or ("", "")
    key = f"{prefix}/{version.key}" if prefix else version.key
    try:
        return _client(options).get_object(Bucket=bucket, Key=key, VersionId=version.version_id)["Body"].read()
    except Exception as exc:  # noqa: BLE001
        raise StoreError(f"cannot read version {version.version_id} of {uri}/{version.key}: {_said(exc)} "
                         "(on S3 the credentials need s3:GetObjectVersion)") from None


def delete_old_versions(uri: str, options: dict[str, str] | None = None) -> int:
    """Delete every noncurrent version and delete marker under the store prefix; returns how
    many. Raises :class:`StoreError` naming the missing permission when the bucket refuses."""
    where = _split(uri)
    if where is None:
        return 0
    bucket, prefix = where
    doomed = list(old_versions(uri, options))
    client = _client(options)
    for start in range(0, len(doomed), 1000):  # DeleteObjects takes 1,000 keys a call
        batch = [{"Key": f"{prefix}/{v.key}" if prefix else v.key, "VersionId": v.version_id}
                 for v in doomed[start:start + 1000]]
        try:
            answer = client.delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True})
        except Exception as exc:  # noqa: BLE001
            raise StoreError(f"cannot delete old object versions under {uri}: {_said(exc)} (on S3 the "
                             "credentials need s3:DeleteObjectVersion)") from None
        errors = answer.get("Errors", ())
        if errors:
            first = errors[0]
            raise StoreError(f"cannot delete {len(errors)} old object version(s) under {uri}, e.g. "
                             f"{first.get('Key')} ({first.get('Code')}: {first.get('Message')}); the "
                             "credentials need s3:DeleteObjectVersion")
    return len(doomed)


def _relative(key: str, prefix: str) -> str:
    return key[len(prefix) + 1:] if prefix and key.startswith(prefix + "/") else key


def _said(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
