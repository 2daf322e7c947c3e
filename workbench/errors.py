"""The one error type that the CLI and the app turn into a one-line message."""


class WorkbenchError(Exception):
    """A user-facing failure: `subject` is the file, run or incident; `problem` says what is wrong."""

    def __init__(self, subject: str, problem: str) -> None:
        super().__init__(f"{subject}: {problem}")
        self.subject = subject
        self.problem = problem

    def one_line(self) -> str:
        return " ".join(f"{self.subject}: {self.problem}".split())
