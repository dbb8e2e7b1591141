"""The demo's pipeline where no ``redis-server`` is installed: Ted-Tok's statistics in this
process (``MemoryStatsStore``) instead of Redis, the same steps read from the docs topic
(``pipeline.stream.StepReader``) and driven through Ted-Tok as ``evolve`` drives a corpus
(``tokenizer_service.evolve.replay``), every revision published to the registry as it is made
(``registry.publisher.LineagePublisher``). Nothing survives the process: it is for the demo, not
for production (``tokmaint pipeline run`` is)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pipeline.stream import StepReader
from pipeline.config import PipelineSettings
from registry.client import RegistryClient
from registry.publisher import LineagePublisher
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.evolve import StreamSettings, replay
from tokenizer_service.tedtok import TedTok


class InProcessJob:
    """``PipelineJob``'s interface for the demo: ``run(until_idle=True)`` counts what the topic
    holds and returns the steps, documents and revisions of that call; ``close()``."""

    def __init__(
        self,
        *,
        settings: PipelineSettings,
        stream: StreamSettings,
        registry: RegistryClient,
        lineage: str,
        initial: BPETokenizer,
        wait: float = 2.0,
    ) -> None:
        self.stream = stream
        self.reader = StepReader(settings, wait=wait)
        self.tedtok = TedTok(initial, config=stream.tedtok_config(), lineage=lineage)
        self.publish = LineagePublisher(registry, lineage)
        self.publish.held = 1  # the lineage exists with the initial version
        self.offsets: dict[int, int] = {}

    def run(self, *, until_idle: bool = True) -> dict[str, Any]:
        counted = {"steps": 0, "documents": 0}
        version = self.tedtok.version

        def steps() -> Iterator[list[str]]:
            while True:
                step = self.reader.read(self.offsets, self.stream.step_docs)
                self.offsets = step.end
                if step.documents:
                    counted["steps"] += 1
                    counted["documents"] += len(step.documents)
                    yield [d.text for d in step.documents]
                elif until_idle and not step.dead:
                    return

        replay(self.tedtok, steps(), [self.publish])  # evolve's driver: each revision validated, then published
        return {**counted, "revisions": self.tedtok.version - version}

    def close(self) -> None:
        self.reader.close()
