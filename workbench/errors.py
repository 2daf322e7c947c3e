"""The one error type that the CLI and the app turn into a one-line message."""

import errno

from workbench.terminal_text import for_terminal


class WorkbenchError(Exception):
    """A user-facing failure: `subject` is the file, run or incident; `problem` says what is wrong."""

    def __init__(self, subject: str, problem: str) -> None:
        super().__init__(f"{subject}: {problem}")
        self.subject = subject
        self.problem = problem

    def one_line(self) -> str:
        """The message on one line, with any control character from the input shown escaped."""
        return for_terminal(" ".join(f"{self.subject}: {self.problem}".split()))


def describe_os_error(exc: OSError, target: str) -> str:
    """The cause of a failed write in words: a full disk or a `target` that refuses writes."""
    if exc.errno == errno.ENOSPC:
        return "no space left on device"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"{target} is not writable"
    return exc.strerror or str(exc)
