"""The error for bad user input, and the bound on what its messages echo. No imports: every
layer can raise it, down to the file readers."""


class ConfigError(ValueError):
    """Bad user input. The message is one line that names the field, the value and the choices."""


def shorten(text: str, limit: int) -> str:
    """Error messages never echo unbounded input."""
    return text if len(text) <= limit else text[: limit - 3] + "..."
