"""The fleet's shared secret: HMAC-SHA256 over what crosses the broker (task messages and results).

Why an HMAC and not Celery's message signing (``task_serializer="auth"``): Celery's signing needs an
X.509 key pair and a certificate store on every host, signs with RSA/ECDSA (hundreds of µs per
message on each side, a visible share of a ~1 ms tool call), and switches the process-wide serializer
registry. The fleet has one trust domain — the operator who starts the orchestrator and the workers —
so a symmetric key is enough: HMAC-SHA256 costs microseconds, is in the standard library, needs one
secret on each side, and rotates through a window where both are listed (deploy/README.md, "Secrets and rotation").

* ``Keyring``: the secrets, newest first. ``sign`` uses the first; ``verify`` accepts any (rotation).
  A MAC travels as ``"<key id>:<hex>"`` (key id = first 8 hex digits of the secret's SHA-256) so the
  verifier picks the key without trying them all.
* ``load_keyring()``: from ``TOOLFLEET_SECRET`` (secrets separated by commas) or the file named by
  ``TOOLFLEET_SECRET_FILE`` (one secret a line; ``#`` comments). ``MissingSecretError`` if neither.
* ``message_mac`` binds a task message's name and id to its body (the exact bytes on the wire), its
  issue time and its destination queue (replay protection, ``workers.fleet._replay``);
  ``result_mac`` binds a stored result to its task id, status and content (canonical JSON);
  ``outcome_mac`` binds a stage call's outcome (the JSON text as sent) to its call id;
  ``event_mac`` binds a fleet event (``_events``) to the secret: an orchestrator acts only on a signed one.

The secrets are never logged, never in ``repr`` (``celery inspect conf`` shows ``Keyring(1 key, signs
with <key id>)``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from pathlib import Path
from typing import Any

from orchestrator._errors import SetupError

SECRET_ENV = "TOOLFLEET_SECRET"  # noqa: S105 - the variable's name, not a secret
SECRET_FILE_ENV = "TOOLFLEET_SECRET_FILE"  # noqa: S105 - the variable's name
MAC_HEADER = "toolfleet_mac"  # task message header carrying the MAC
ISSUED_HEADER = "toolfleet_iat"  # when the message was signed (seconds since the epoch), under the MAC
DEST_HEADER = "toolfleet_dest"  # the queue it was published to, under the MAC (``_replay``)
RESULT_MAC_FIELD = "toolfleet_mac"  # field of a stored result meta carrying the MAC
MIN_SECRET_BYTES = 16

__all__ = ["Keyring", "MissingSecretError", "load_keyring", "SECRET_ENV", "SECRET_FILE_ENV"]


class MissingSecretError(SetupError, RuntimeError):
    """No fleet secret configured (or one too short to be a secret)."""


class Keyring:
    def __init__(self, secrets: list[bytes]) -> None:
        if not secrets:
            raise MissingSecretError("a keyring needs at least one secret")
        short = [s for s in secrets if len(s) < MIN_SECRET_BYTES]
        if short:
            raise MissingSecretError(f"The fleet secret is too short: each secret in {SECRET_ENV} (or its file) must "
                                     f"be at least {MIN_SECRET_BYTES} bytes long, e.g. `export {SECRET_ENV}=$(python3 "
                                     "-c 'import secrets; print(secrets.token_hex(32))')`.")
        # One keyed HMAC state per key, copied per message: OpenSSL 3 looks the digest up again on
        # every one-shot call (hmac.digest), which costs far more than the hashing under load.
        self._keys = {hashlib.sha256(s).hexdigest()[:8]: hmac.new(s, digestmod=hashlib.sha256) for s in secrets}
        self._signing_id = hashlib.sha256(secrets[0]).hexdigest()[:8]
        # The signing key's id (a hash prefix, not the secret) is part of the repr on purpose: kombu's
        # process-wide connection pools key on repr(transport_options), so apps with different
        # keyrings must not share a pooled producer (it would sign with the other app's key).
        # Computed once: kombu takes it on every producer acquire.
        plural = "s" if len(self._keys) != 1 else ""
        self._repr = f"Keyring({len(self._keys)} key{plural}, signs with {self._signing_id})"

    def __repr__(self) -> str:
        return self._repr

    def __json__(self) -> str:
        # kombu's JSON encoder asks for this: `celery inspect stats` reports the broker's transport options,
        # which hold the keyring. It reports the repr: key count and signing id, never a secret.
        return self._repr

    @property
    def signing_id(self) -> str:
        """The id of the key this keyring signs with (a hash prefix of the secret, never the secret)."""
        return self._signing_id

    @property
    def ids(self) -> list[str]:
        """The ids of every key it verifies with (a worker's heartbeat lists them: see ``HostRecord.keys``)."""
        return list(self._keys)

    def sign(self, *parts: bytes) -> str:
        return f"{self._signing_id}:{self._digest(self._keys[self._signing_id], parts)}"

    def verify(self, mac: Any, *parts: bytes) -> bool:
        if not isinstance(mac, str) or ":" not in mac:
            return False
        key_id, _, digest = mac.partition(":")
        key = self._keys.get(key_id)
        return key is not None and hmac.compare_digest(digest, self._digest(key, parts))

    @staticmethod
    def _digest(keyed: Any, parts: tuple[bytes, ...]) -> str:
        # Length-prefixed, so no two different part lists hash the same bytes.
        mac = keyed.copy()
        mac.update(b"".join(len(part).to_bytes(8, "big") + part for part in parts))
        digest: str = mac.hexdigest()
        return digest


def _split(text: str, sep: str | None) -> list[bytes]:
    items = text.split(sep) if sep else text.splitlines()
    return [s.strip().encode() for s in items if s.strip() and not s.strip().startswith("#")]


def load_keyring(secret: str | None = None, secret_file: str | None = None) -> Keyring:
    """The fleet keyring: an explicit ``secret`` or ``secret_file`` first, else ``TOOLFLEET_SECRET``,
    else ``TOOLFLEET_SECRET_FILE``."""
    if not secret and not secret_file:
        secret = os.environ.get(SECRET_ENV) or None
        secret_file = None if secret else os.environ.get(SECRET_FILE_ENV)
    if secret:
        return Keyring(_split(secret, ","))
    if secret_file:
        try:
            return Keyring(_split(Path(secret_file).read_text(), None))
        except OSError as exc:
            raise MissingSecretError(f"cannot read the fleet secret file {secret_file}: {exc.strerror}") from exc
    raise MissingSecretError(
        f"No fleet secret: set {SECRET_ENV} (or {SECRET_FILE_ENV}, or --secret-file) to the same value on the "
        "orchestrator and every worker, e.g. `export TOOLFLEET_SECRET=$(python3 -c 'import secrets; "
        "print(secrets.token_hex(32))')`."
    )


def _bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    return str(value if value is not None else "").encode("utf-8", "surrogatepass")


def message_mac(keyring: Keyring, task: Any, task_id: Any, body: Any, issued: Any, dest: Any) -> str:
    """Binds a task message's name, id and body to when it was issued and the queue it was sent to,
    so a captured copy cannot be replayed later or elsewhere (``workers.fleet._replay``)."""
    return keyring.sign(b"toolfleet-task-v2", _bytes(task), _bytes(task_id), _bytes(body), _bytes(issued), _bytes(dest))


def verify_message(keyring: Keyring, mac: Any, task: Any, task_id: Any, body: Any, issued: Any, dest: Any) -> bool:
    return keyring.verify(mac, b"toolfleet-task-v2", _bytes(task), _bytes(task_id), _bytes(body), _bytes(issued),
                          _bytes(dest))


def canonical(value: Any) -> bytes:
    """JSON both sides produce identically after a JSON round trip: ASCII, compact, keys in their
    order (JSON objects keep it through Celery's encoding and ``json.loads``)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True).encode()


def result_mac(keyring: Keyring, task_id: Any, status: Any, result: Any) -> str:
    return keyring.sign(b"toolfleet-result-v1", _bytes(task_id), _bytes(status), canonical(result))


def verify_result(keyring: Keyring, meta: dict[str, Any], task_id: str) -> bool:
    """Whether a stored result meta was written by a worker holding the secret, for this task id."""
    return keyring.verify(meta.get(RESULT_MAC_FIELD), b"toolfleet-result-v1", _bytes(task_id),
                          _bytes(meta.get("status")), canonical(meta.get("result")))


def cancel_mac(keyring: Keyring, call_ids: list[str]) -> str:
    """The MAC a ``toolfleet_cancel`` control command carries (control messages are otherwise unsigned)."""
    return keyring.sign(b"toolfleet-cancel-v1", "\n".join(call_ids).encode())


def verify_cancel(keyring: Keyring, mac: Any, call_ids: list[str]) -> bool:
    return keyring.verify(mac, b"toolfleet-cancel-v1", "\n".join(call_ids).encode())


def outcome_mac(keyring: Keyring, call_id: Any, outcome_json: Any) -> str:
    """Binds a stage call's outcome (its JSON text, exactly as sent) to the call id (``workers.fleet._replies``)."""
    return keyring.sign(b"toolfleet-outcome-v1", _bytes(call_id), _bytes(outcome_json))


def verify_outcome(keyring: Keyring, mac: Any, call_id: Any, outcome_json: Any) -> bool:
    return keyring.verify(mac, b"toolfleet-outcome-v1", _bytes(call_id), _bytes(outcome_json))


EVENT_MAC_FIELD = "mac"  # the field of a fleet event carrying its MAC (over the rest, in order)


def event_mac(keyring: Keyring, event: dict[str, Any]) -> str:
    """Binds a fleet event (``workers.fleet._events``: every field but the MAC, in order) to the fleet secret."""
    return keyring.sign(b"toolfleet-event-v1", canonical(event))


def verify_event(keyring: Keyring, event: dict[str, Any]) -> bool:
    """Whether a fleet event (as parsed) was published by a worker holding this secret."""
    rest = {k: v for k, v in event.items() if k != EVENT_MAC_FIELD}
    return keyring.verify(event.get(EVENT_MAC_FIELD), b"toolfleet-event-v1", canonical(rest))
