"""The mail headers a ``git format-patch`` file starts with: author, date, subject, message.

A baked commit keeps them, as ``git am`` does: a diff that carries ``From:``, ``Date:`` and
``Subject:`` becomes a commit by that author with that subject and message. The headers
are read with the standard library's ``email`` parser (folded lines, RFC 2047 encoded
names); a plain ``diff -u`` has none, and its commit keeps bakery's fixed identity. The
``email`` package (about 9 ms to import) is loaded only for a diff that has the headers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import email.message

_FROM_LINE = re.compile(rb"^From [0-9a-f]{40} ")
_PATCH_TAG = re.compile(r"^\[[^\]]*PATCH[^\]]*\]\s*")


@dataclass(frozen=True)
class MailInfo:
    subject: str
    body: str
    #: "Name <email> seconds +zone", as git writes an author; None without From:/Date:.
    author: str | None


def read(data: bytes) -> MailInfo | None:
    """The headers of a format-patch file, or None when data does not start like one."""
    lines = data.split(b"\n")
    if lines and _FROM_LINE.match(lines[0]):
        lines = lines[1:]
    head: list[bytes] = []
    for i, line in enumerate(lines):
        if not line.strip():
            rest = lines[i + 1 :]
            break
        head.append(line)
    else:
        return None
    if not head or not re.match(rb"^(From|Subject|Date):", head[0]):
        return None
    import email
    import email.policy

    msg = email.message_from_bytes(b"\n".join(head) + b"\n\n", policy=email.policy.default)
    subject = " ".join(str(msg.get("Subject") or "").split())
    subject = _PATCH_TAG.sub("", subject)
    if not subject:
        return None
    body: list[str] = []
    for line in rest:
        if line.rstrip(b"\r") == b"---" or line.startswith((b"diff --git ", b"--- ")):
            break
        body.append(line.decode("utf-8", errors="replace").rstrip())
    return MailInfo(subject, "\n".join(body).strip(), _author(msg))


def _author(msg: email.message.Message) -> str | None:
    import email.utils

    sender, date = msg.get("From"), msg.get("Date")
    if not sender or not date:
        return None
    name, address = email.utils.parseaddr(str(sender))
    try:
        when = email.utils.parsedate_to_datetime(str(date))
    except (TypeError, ValueError):
        return None
    if not address or when.tzinfo is None or any(c in name + address for c in "<>\n"):
        return None
    return f"{name or address} <{address}> {int(when.timestamp())} {when.strftime('%z')}"


def commit_message(diff_name: str, sha256: str, info: MailInfo | None) -> str:
    """A baked commit's message: the diff's name as subject (or the mail's subject and
    message, naming the diff in a trailer), and the diff's hash as a trailer."""
    trailer = f"Bakery-Diff-Sha256: {sha256}\n"
    if info is None:
        return f"{diff_name}\n\n{trailer}"
    body = f"{info.body}\n\n" if info.body else ""
    return f"{info.subject}\n\n{body}Bakery-Diff: {diff_name}\n{trailer}"
