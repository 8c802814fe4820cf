"""ReschedulerArgs are checked like every plugin's args: a bad value is an error naming
the field, and `with_rescheduler` adds the plugin once, after the profile's own
PostFilter plugins."""

from __future__ import annotations

import pytest

from shoal.config import ConfigError, parse_config
from shoal.plugins.rescheduler import with_rescheduler
from shoal.scheduler import default_registry


def config(args: dict[str, object]) -> dict[str, object]:
    return {
        "profiles": [
            {
                "schedulerName": "shoal",
                "plugins": {"postFilter": {"enabled": [{"name": "Rescheduler"}]}},
                "pluginConfig": [{"name": "Rescheduler", "args": args}],
            }
        ]
    }


def test_bad_args_name_the_field() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(config({"maxMovesPerPlan": 0, "holdSeconds": 0}), registry=default_registry())
    text = str(err.value)
    assert "args.maxMovesPerPlan" in text and "args.holdSeconds" in text
    with pytest.raises(ConfigError) as err:
        parse_config(config({"movesPerDay": 3}), registry=default_registry())
    assert "movesPerDay" in str(err.value)


def test_good_args_are_accepted() -> None:
    parsed = parse_config(
        config({"minRunSeconds": 0, "defragIntervalSeconds": 600}), registry=default_registry()
    )
    assert parsed.profiles[0].plugin_config[0].args["defragIntervalSeconds"] == 600


def test_with_rescheduler_enables_it_once_after_the_profiles_post_filters() -> None:
    base = parse_config({"profiles": [{"schedulerName": "a"}, {"schedulerName": "b"}]})
    once = with_rescheduler(base, {"minRunSeconds": 0})
    twice = with_rescheduler(once, {"minRunSeconds": 5})
    for profile in twice.profiles:
        assert [p.name for p in profile.plugins.post_filter.enabled] == ["Rescheduler"]
        assert [c.args for c in profile.plugin_config if c.name == "Rescheduler"] == [
            {"minRunSeconds": 0}
        ]
    assert base.profiles[0].plugins.post_filter.enabled == []  # the input is not changed
