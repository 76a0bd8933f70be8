"""Reading a hosts file: the only place the config package touches the file system."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ddptui.config.model import ConfigError, HostsConfig, Problem
from ddptui.config.parse import parse_hosts, parse_user_config
from ddptui.config.user import NO_USER_DEFAULTS, UserDefaults, user_config_path


def parse_config(text: str, path: str | Path,
                 user: UserDefaults = NO_USER_DEFAULTS) -> HostsConfig:
    """Check a whole hosts file, including that a local ``job.script`` and ``job.project``
    exist on this machine.

    ``path`` is where the text came from: messages name it, and a relative script is taken
    from its directory.
    """
    return parse_hosts(text, path, is_file=Path.is_file, is_dir=Path.is_dir, user=user)


def _read(path: Path) -> str:
    """The file's text; a missing, unreadable or non-UTF-8 file is a ConfigError."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError([Problem(str(path), None, "file", "does not exist.")]) from None
    except IsADirectoryError:
        raise ConfigError([Problem(str(path), None, "file",
                                   "is a directory, not a hosts file.")]) from None
    except OSError as exc:
        raise ConfigError([Problem(str(path), None, "file",
                                   f"cannot be read: {exc.strerror or exc}.")]) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError([Problem(str(path), line, "file",
                                   "is not UTF-8 text; save it as UTF-8.")]) from None


def load_user_config(environ: Mapping[str, str] | None = None) -> UserDefaults:
    """The user-wide defaults (``user.py``); none when the file does not exist."""
    path = user_config_path(environ)
    if not path.exists():
        return NO_USER_DEFAULTS
    return parse_user_config(_read(path), path)


def load_config(path: str | Path, user: UserDefaults = NO_USER_DEFAULTS) -> HostsConfig:
    """Read and check the hosts file; a missing or unreadable file is a ConfigError too.

    ``user`` is the user-wide defaults (``load_user_config``); the CLI passes them, a
    test or library caller gets exactly the file."""
    path = Path(path)
    return parse_config(_read(path), path, user)
