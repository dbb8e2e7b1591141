"""pipeline.config: the pipeline's settings, from code, the environment and the command line."""

from __future__ import annotations

import argparse

import pytest

from pipeline.config import PipelineSettings
from tokmaint.options import add_settings, chosen_settings


def test_the_shared_addresses_come_from_their_own_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOKMAINT_KAFKA", "kafka:9092")
    monkeypatch.setenv("TOKMAINT_REDIS", "redis://cache:6379/1")
    monkeypatch.setenv("TOKMAINT_PIPELINE_DOCS_TOPIC", "news")
    settings = PipelineSettings()
    assert (settings.bootstrap, settings.redis, settings.docs_topic) == ("kafka:9092", "redis://cache:6379/1", "news")
    # Code names a field by its name, over the environment.
    assert PipelineSettings(bootstrap="127.0.0.1:1").bootstrap == "127.0.0.1:1"


def test_options_are_made_from_the_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOKMAINT_PIPELINE_DLQ_TOPIC", "news.bad")
    parser = argparse.ArgumentParser()
    add_settings(parser, PipelineSettings, only=("bootstrap", "docs_topic", "dlq_topic", "commit_steps"))
    help_text = " ".join(parser.format_help().split())
    # --topic sets docs_topic; each option's help names its default and its variable.
    assert "--topic TOPIC the documents' topic (default: docs; TOKMAINT_PIPELINE_DOCS_TOPIC)" in help_text
    assert "(default: 127.0.0.1:9092; TOKMAINT_KAFKA)" in help_text
    settings = chosen_settings(parser, parser.parse_args(["--topic", "news", "--commit-steps", "4"]), PipelineSettings)
    assert (settings.docs_topic, settings.dlq_topic, settings.commit_steps) == ("news", "news.bad", 4)


def test_a_value_out_of_range_is_refused_with_its_option(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="tokmaint pipeline run")
    add_settings(parser, PipelineSettings, only=("commit_steps",))
    with pytest.raises(SystemExit):
        parser.parse_args(["--commit-steps", "0"])
    assert "argument --commit-steps: must be a whole number ≥ 1, got '0'" in capsys.readouterr().err


def test_settings_are_frozen_and_unknown_fields_refused() -> None:
    with pytest.raises(ValueError, match="topic"):
        PipelineSettings(topic="news")
    with pytest.raises(ValueError, match="frozen"):
        PipelineSettings().docs_topic = "news"  # type: ignore[misc]
