"""``[hooks.NAME]`` tables: the shipped example, the secret from the environment only, and one
line naming the key for each mistake."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from luna.config import build_config, effective_items, secret_values
from luna.config.cli import set_value
from luna.config.hooks import DEFAULT_PROMPT, HookConfig, secret_var, session_of
from luna.errors import ConfigError
from tests.hook_example import config_with_example
from tests.luna_process import REPO

SECRET = "0d8c2f6e4a1b9d3c7e5f0a2b4c6d8e1f3a5b7c9d0e2f4a6b8c1d3e5f7a9b0c2d"


def test_config_hooks_shipped_example_documents_every_key_with_its_default() -> None:
    data = tomllib.loads(config_with_example())
    door = data["hooks"]["door"]
    for name in HookConfig.model_fields:
        if name != "secret":
            assert name in door, f"the config.toml example does not show hooks.door.{name}"
    cfg = build_config(data, {"LUNA_HOOK_DOOR_SECRET": SECRET}, base_dir=REPO)
    hook = cfg.hooks["door"]
    assert hook.model_dump(exclude={"prompt", "secret"}) == HookConfig().model_dump(
        exclude={"prompt", "secret"}
    )
    assert "{body}" in hook.prompt and hook.secret == SECRET
    assert "hooks" not in tomllib.loads((REPO / "config.toml").read_text())  # off as shipped


def test_config_hooks_secret_comes_from_its_variable_and_is_never_shown(tmp_path: Path) -> None:
    data = {"hooks": {"door": {}, "cron-job": {"secret_env": "MY_CRON_KEY"}}}
    env = {"LUNA_HOOK_DOOR_SECRET": SECRET, "MY_CRON_KEY": SECRET[::-1]}
    cfg = build_config(data, env, base_dir=tmp_path)
    assert cfg.hooks["door"].secret == SECRET and cfg.hooks["cron-job"].secret == SECRET[::-1]
    assert secret_var("cron-job", HookConfig()) == "LUNA_HOOK_CRON_JOB_SECRET"
    assert session_of("door", cfg.hooks["door"]) == "hook-door"
    assert cfg.hooks["door"].prompt == DEFAULT_PROMPT
    assert SECRET in secret_values(cfg) and SECRET[::-1] in secret_values(cfg)
    assert SECRET not in repr(cfg)
    rows = {key: (value, source) for key, value, source in effective_items(cfg)}
    assert rows["hooks.door.secret"] == ("set (64 chars)", "env LUNA_HOOK_DOOR_SECRET")
    assert rows["hooks.cron-job.per_minute"] == (10, "file")
    unset = build_config({"hooks": {"door": {}}}, {}, base_dir=tmp_path)
    assert unset.hooks["door"].secret == ""  # loads; the web's start and doctor refuse it


@pytest.mark.parametrize(
    ("hooks", "says"),
    [
        ({"door": {"secret": "x"}}, r"hooks\.door\.secret is a secret; set LUNA_HOOK_DOOR_SECRET"),
        ({"door": {"per_minute": 0}}, r"hooks\.door\.per_minute is out of range \(allowed: 1"),
        ({"door": {"prompt": "no placeholder"}}, r"hooks\.door\.prompt must contain \{body\}"),
        ({"door": {"promt": "x"}}, r"unknown key hooks\.door\.promt \(did you mean 'prompt'"),
        ({"door": {"deliver_to": 5}}, r"hooks\.door\.deliver_to must be \"owner\""),
        ({"door": {"deliver_to": {"channel_id": "1"}}}, r"must name its frontend"),
        ({"door": {"session": "a b"}}, r"hooks\.door\.session must be 1-128 letters"),
        ({"door": {"secret_env": "not a name"}}, r"secret_env must be an environment variable"),
        ({"do/or": {}}, r"\[hooks\.do/or\]: a hook's name is 1-40 letters"),
        ({"door": "x"}, r"\[hooks\.door\] must be a table"),
        ({"a-b": {}, "a_b": {}}, r"hooks a-b and a_b would both read .* LUNA_HOOK_A_B_SECRET"),
    ],
)
def test_config_hooks_mistake_is_one_line_naming_the_key(
    tmp_path: Path, hooks: dict, says: str
) -> None:
    with pytest.raises(ConfigError, match=says) as caught:
        build_config({"hooks": hooks}, {}, base_dir=tmp_path)
    assert "\n" not in str(caught.value)


def test_config_hooks_set_points_to_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"each webhook is a \[hooks\.NAME\] table"):
        set_value(tmp_path / "config.toml", "hooks.door.per_minute", "5")
