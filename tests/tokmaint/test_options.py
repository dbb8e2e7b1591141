"""tokmaint/options.py: one --option a settings field, with its help, range and default."""

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
