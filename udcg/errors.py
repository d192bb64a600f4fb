"""Errors raised for user mistakes in input data, measures or options."""

from __future__ import annotations

from os import PathLike


class UDCGInputError(ValueError):
    """A problem in the user's input, located as ``FILE:LINE: field 'x': what is wrong``.

    Command-line entry points print the message and exit with status 2 instead of showing a
    traceback.

    Examples:
        >>> error = UDCGInputError("expected a number", path="run.txt", line=3, field="score")
        >>> str(error), error.reason
        ("run.txt:3: field 'score': expected a number", 'expected a number')
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | PathLike[str] | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.path = None if path is None else str(path)
        self.line = line
        self.field = field
        self.reason = message
        super().__init__(self._format())

    def _format(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path if self.line is None else f"{self.path}:{self.line}"
            where += ": "
        what = f"field '{self.field}': " if self.field is not None else ""
        return f"{where}{what}{self.reason}"


class UDCGWarning(UserWarning):
    """Something the user should know about a result that still runs (for instance a fit with
    few contexts per parameter). Command-line entry points print it as one line on stderr.

    Examples:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     warnings.warn("only 12 contexts per parameter", UDCGWarning)
        >>> [str(w.message) for w in caught]
        ['only 12 contexts per parameter']
    """


class UDCGServiceError(RuntimeError):
    """A service the toolkit calls (a judge server) failed; commands print its message as one
    line and exit with status 1.

    Examples:
        >>> str(UDCGServiceError("http://localhost:8000/v1 did not answer in 10 s"))
        'http://localhost:8000/v1 did not answer in 10 s'
    """


class LogprobsUnavailable(UDCGServiceError):
    """A judge's server returns no log-probabilities (it ignores ``logprobs``): a caller with a
    text route (Q-CARE's Yes/No checks) may fall back to it; for the others a service error.

    Examples:
        >>> isinstance(LogprobsUnavailable("no log-probs"), UDCGServiceError)
        True
    """
