"""Exception types whose messages name the file, line or setting at fault."""


class RamenError(Exception):
    """Base class for errors a user can fix by changing input or config."""


class InputFormatError(RamenError):
    """A data file is malformed; the message names the file and line."""

    def __init__(self, path, line: int | None, problem: str, fix: str = ""):
        where = f"{path}:{line}" if line is not None else f"{path}"
        message = f"{where}: {problem}"
        if fix:
            message += f" ({fix})"
        super().__init__(message)
        self.path = str(path)
        self.line = line
        self._arguments = (path, line, problem, fix)

    def __reduce__(self):
        # Rebuilt from its own arguments, so it survives the trip back from a worker process.
        return self.__class__, self._arguments


class ConfigError(RamenError):
    """A config setting is missing or inconsistent; the message names it."""

    def __init__(self, setting: str, problem: str, fix: str = ""):
        message = f"config setting '{setting}': {problem}"
        if fix:
            message += f" ({fix})"
        super().__init__(message)
        self.setting = setting
        self._arguments = (setting, problem, fix)

    def at(self, setting: str) -> "ConfigError":
        """The same problem, named by another (e.g. fuller) key path."""
        return self.__class__(setting, *self._arguments[1:])

    def __reduce__(self):
        return self.__class__, self._arguments
