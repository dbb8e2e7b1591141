"""tokmaint/options.py: one --option a settings field, with its help, range and default."""

import pytest

from tests.support.cli import run


def test_every_settings_option_shows_its_range_and_default(capsys):
    from tokenizer_service.bench.arithmetic import ArithmeticSettings
    from tokenizer_service.bench.drift import DriftSettings
    from tokenizer_service.bench.throughput import ThroughputSettings
    from tokenizer_service.evolve import EvolveSettings

    for argv, settings_type in (
        (["evolve"], EvolveSettings),
        (["bench", "arithmetic"], ArithmeticSettings),
        (["bench", "drift"], DriftSettings),
        (["bench", "throughput"], ThroughputSettings),
    ):
        code, out, _ = run([*argv, "--help"], capsys)
        assert code == 0
        text = " ".join(out.split())
        prefix = settings_type.model_config["env_prefix"]
        for name, field in settings_type.model_fields.items():
            if isinstance(field.default, bool):
                continue
            option = f"--{name.replace('_', '-')} {name.upper()} {field.description}"
            assert option in text, option
            if field.default is None:  # a default made from other settings: the description says which
                assert "(default: " in field.description
                assert f"({prefix}{name.upper()})" in text.split(option, 1)[1][:200]
                continue
            shown = f"{field.default:g}" if isinstance(field.default, float) else str(field.default)
            assert f"(default: {shown}; {prefix}{name.upper()})" in text.split(option, 1)[1][:200]


def test_a_bad_value_names_the_option_or_the_variable_that_gave_it(monkeypatch):
    """By the option a field is set by (--topic for docs_topic), or by its variable: the
    section's, or the one it shares with every part (TOKMAINT_KAFKA)."""
    from pydantic import ValidationError

    from tokenizer_service.settings import Settings, SettingsConfigDict, setting, whole
    from tokmaint.options import settings_errors

    class Steps(Settings):
        model_config = SettingsConfigDict(env_prefix="TOKMAINT_EXAMPLE_", populate_by_name=True)
        docs: int = setting(1, whole(1), "documents", option="count")
        shared: int = setting(1, whole(1), "shared", env="TOKMAINT_EXAMPLE_SHARED_BY_ALL")

    monkeypatch.setenv("TOKMAINT_EXAMPLE_SHARED_BY_ALL", "x")
    with pytest.raises(ValidationError) as caught:
        Steps(docs=0)
    reasons = settings_errors(caught.value, Steps, {"docs": 0}).split("; ")
    assert reasons[0] == "argument --count: Input should be greater than or equal to 1"
    assert reasons[1].startswith("TOKMAINT_EXAMPLE_SHARED_BY_ALL: Input should be a valid integer")
    monkeypatch.setenv("TOKMAINT_EXAMPLE_SHARED_BY_ALL", "2")
    with pytest.raises(ValidationError) as caught:
        Steps(docs=0)
    assert settings_errors(caught.value, Steps) == "TOKMAINT_EXAMPLE_DOCS: Input should be greater than or equal to 1"
