"""The queue-name rule shared by the configuration and by request validation."""

from __future__ import annotations

#: Hard ceiling of ``limits.max_queue_name_bytes``, set by the real server's on-disk key format.
QUEUE_NAME_HARD_CEILING = 65535


def queue_name_problem(name: str) -> str | None:
    """Return why *name* is not a valid queue name (``"must not be empty"``...), or None.

    The length limit is not checked here: it is a separate rejection (``QueueNameTooLong``)
    on enqueue and a separate message on reserve.
    """
    if not name:
        return "must not be empty"
    if name in (".", ".."):
        return "must not be '.' or '..'"
    if "/" in name:
        return "must not contain '/'"
    # Rust's char::is_control, i.e. the Unicode Cc category: C0, DEL and C1.
    if any(c < " " or "\x7f" <= c <= "\x9f" for c in name):
        return "must not contain control characters"
    return None
