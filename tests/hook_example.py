"""The webhook example shipped in config.toml (commented out), switched on: what a user who
follows it gets. Tests run it through the loader and through ``python -m luna web``."""

from __future__ import annotations

from tests.luna_process import REPO

EXAMPLE_HEAD = "# [hooks.door]"


def config_with_example() -> str:
    """The repository's config.toml with its ``[hooks.door]`` example uncommented."""
    text = (REPO / "config.toml").read_text()
    head, found, example = text.partition(EXAMPLE_HEAD)
    assert found, f"config.toml has no {EXAMPLE_HEAD!r} example"
    lines = (found + example).splitlines()
    on = [line[2:] if line.startswith("# ") else line.removeprefix("#") for line in lines]
    return head + "\n".join(on) + "\n"
