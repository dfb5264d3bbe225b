"""Making text from others safe to print: one line, escaped, bounded.

Others are plugins, package metadata, the user's input. One line: runs of white space become one
space. Escaped: other control characters as :func:`repr` does (no escape sequence reaches the
terminal). Bounded: the middle of a longer text is cut, keeping the start (usually the point) and
the end (usually the advice).
"""

from __future__ import annotations

#: A table cell or a single field (a description, a reason, a name).
FIELD_LIMIT = 200
#: A plugin's own message embedded in one of accelctl's (an exception's text, say).
MESSAGE_LIMIT = 1000
#: A whole line accelctl prints (an error, a warning): the last safety net.
LINE_LIMIT = 4000
#: A string inside a ``--json`` document (JSON escapes control characters itself).
JSON_STRING_LIMIT = 4000


def escape_controls(text: str) -> str:
    """Escape every non-printable character of ``text``, as :func:`repr` shows it.

    Non-printable: control, format, separator other than the space, surrogate."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def bound(text: str, limit: int) -> str:
    """Bound ``text`` to about ``limit`` characters, cutting its middle.

    ``text``, or its start and end around a ``[... N characters cut ...]`` marker so that the
    result is about ``limit`` characters long."""
    if len(text) <= limit:
        return text
    keep = max(limit - 40, 2)  # room for the marker
    head = keep * 2 // 3
    tail = keep - head
    cut = len(text) - head - tail
    return f"{text[:head]} [... {cut} characters cut ...] {text[len(text) - tail :]}"


def clean(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """Make ``text`` one printable line of about ``limit`` characters at most.

    See the module's docstring. The bound applies before escaping, which can make it up to four
    times longer."""
    if len(text) <= limit and text.isprintable() and "  " not in text:
        return text  # the common case, at C speed
    return escape_controls(bound(" ".join(text.split()), limit))


def printable_line(text: str, limit: int = LINE_LIMIT) -> str:
    """Make a line composed by accelctl safe to print, as a last resort.

    Each white-space character becomes a space (runs are kept, for alignment), others escaped,
    the length bounded. Others' text in it should have gone through :func:`clean` already."""
    if len(text) <= limit and text.isprintable():
        return text
    spaced = "".join(" " if char.isspace() else char for char in bound(text, limit))
    return escape_controls(spaced)


def quote(value: str, limit: int = 100) -> str:
    """Quote ``value`` with :func:`repr` for a message, bounded.

    A user's 100,000-character input is quoted by its start and a count of the rest."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r} (and {len(value) - limit} more characters)"


def safe_str(value: object) -> str:
    """``str(value)``, or a placeholder when the object's ``__str__`` itself fails."""
    try:
        text = str(value)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # a plugin's object whose __str__ raises (even SystemExit)
        return f"<str() failed: {type(exc).__name__}>"
    return text if isinstance(text, str) else f"<{type(value).__name__}>"


def safe_repr(value: object, limit: int = 80) -> str:
    """``repr(value)``, cleaned and bounded, or a placeholder when ``__repr__`` fails."""
    try:
        text = repr(value)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # a plugin's object whose __repr__ raises (even SystemExit)
        return f"<{type(value).__name__} object, repr() failed: {type(exc).__name__}>"
    if not isinstance(text, str):
        return f"<{type(value).__name__} object>"
    if len(text) <= limit:
        return escape_controls(" ".join(text.split()))
    return escape_controls(" ".join(text[: limit - 3].split())) + "..."


def describe_exception(exc: BaseException, limit: int = MESSAGE_LIMIT) -> str:
    """Describe an exception as ``"TypeName: message"`` in one clean, bounded line.

    Just the type's name when the message is empty or cannot be read."""
    name = type(exc).__name__
    message = clean(safe_str(exc), limit)
    return f"{name}: {message}" if message else name


def one_line(message: BaseException | str, limit: int = LINE_LIMIT) -> str:
    """Return a message in one clean, bounded line.

    An exception's message, or its type's name when the message is empty."""
    text = clean(message if isinstance(message, str) else safe_str(message), limit)
    return text or type(message).__name__


def end_sentence(text: str) -> str:
    """End ``text`` as a sentence, once.

    Its own ``?`` or ``!`` kept, else one full stop (``"Did you mean 'openreg'?"`` before
    another sentence, never ``"...?."``)."""
    text = text.rstrip().rstrip(".")
    return text if text.endswith(("?", "!")) else f"{text}."
