"""What is wrong, as one record from the module that finds it to the modules that say it.

A :class:`Problem` is what a check returns instead of a bare string: the module that finds it
(the scan of installed distributions, an entry point's name, torch's distributed backends) words
it once; the modules that read it put its words in their own error or row, chain its cause, or
skip their check where this machine cannot tell.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """What is wrong, in words, with the exception that showed it.

    ``str()`` is :attr:`message`, the clause a reader puts after its subject
    (``"accelerator 'npu' (accelctl-npu 1.0): <problem>"``).
    """

    #: What is wrong and, where the finder knows, what to do
    #: (``"cannot read the metadata of distribution acme (...): ...; reinstall it (...)"``).
    message: str
    #: The exception that showed it, for a reader's error to chain (``--debug`` prints it); None
    #: where no exception did (a malformed line, a reserved name).
    cause: BaseException | None = None
    #: True where this machine cannot tell whether anything is wrong (:attr:`message` says why):
    #: a reader skips its check, or reports a gap, instead of failing.
    skip: bool = False

    def __str__(self) -> str:
        return self.message
