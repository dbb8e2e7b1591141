"""The registry's HTTP API as pydantic models: what ``/v1/tokenizers`` answers (a version, a page
of versions, a lineage, an alias, a model) and the JSON bodies its writes take. The server
answers with them (``registry.api.routes.tokenizers``) and the client reads its answers into them
(``registry.client``), so neither imports the other; the store describes what it keeps with
:class:`VersionInfo` and :class:`ModelInfo`, the bases of the answers, which hold no URL.

A body is read strictly, in JSON's own types (``"3"`` is not an integer, ``true`` is not a number), and a
refusal names every field that is wrong, in words:

>>> VersionCreate.model_validate({"tokenizer": "{}", "kind": None}).kind
'tedtok'
>>> try:
...     VersionCreate.model_validate({"tokenizer": {}, "kind": "x", "parent": "3"})
... except ValidationError as exc:
...     print(*body_problems(VersionCreate, exc), sep="\\n")
'tokenizer' must be a string, got an object
'kind' must be 'tedtok', 'litetoken' or 'import', got 'x'
'parent' must be an integer or null, got a string
"""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from schemas.json_values import json_kind

Item = TypeVar("Item", bound=BaseModel)


class VersionInfo(BaseModel):
    """What the registry knows of one version (its artifacts are fetched by their sha256)."""

    model_config = ConfigDict(frozen=True)

    lineage: str
    number: int
    parent: int | None
    kind: str
    sha256: str
    diff_sha256: str
    vocab_size: int
    id_space: int
    merges: int
    changed_ids: int
    metrics: dict[str, Any]
    created_at: datetime
    created_by: str


class VersionPublic(VersionInfo):
    """A version as the API answers it: what the registry knows of it, and where its
    tokenizer.json and its diff are served."""

    tokenizer_url: str
    diff_url: str

    @classmethod
    def of(cls, info: VersionInfo) -> VersionPublic:
        base = f"/v1/tokenizers/{info.lineage}/versions/{info.number}"
        return cls(**info.model_dump(), tokenizer_url=f"{base}/tokenizer.json", diff_url=f"{base}/diff")


class Page(BaseModel, Generic[Item]):
    """A list the API answers: ``data``, and ``count``, how many there are in all (more than
    ``data`` holds where it is one page of them). Each list is a subclass of its own, which the
    OpenAPI schema names by its own name (``VersionsPublic``, not ``Page[VersionPublic]``).

    >>> LineagesPublic(data=[LineagePublic(name="gpt", latest=3)], count=1).model_dump()
    {'data': [{'name': 'gpt', 'latest': 3}], 'count': 1}
    """

    model_config = ConfigDict(frozen=True)

    data: list[Item]
    count: int


class VersionsPublic(Page[VersionPublic]):
    """A page of a lineage's versions, oldest first; ``count``: how many the lineage has."""


class LineagePublic(BaseModel):
    """A lineage and its latest version's number."""

    model_config = ConfigDict(frozen=True)

    name: str
    latest: int


class LineagesPublic(Page[LineagePublic]):
    """Every lineage."""


class AliasPublic(BaseModel):
    """An alias of a lineage and the version number it points at."""

    model_config = ConfigDict(frozen=True)

    lineage: str
    alias: str
    version: int


class ModelInfo(BaseModel):
    """A model published beside a version: its number in the lineage, the version it was trained
    with, and its files (name -> sha256 and size)."""

    model_config = ConfigDict(frozen=True)

    lineage: str
    number: int
    version: int
    files: dict[str, dict[str, Any]]
    created_at: datetime
    created_by: str


class ModelPublic(ModelInfo):
    """A model as the API answers it, with the Hub repository that serves it."""

    hub_repo: str  # what from_pretrained names it by, with HF_ENDPOINT at the registry

    @classmethod
    def of(cls, info: ModelInfo) -> ModelPublic:
        return cls(**info.model_dump(), hub_repo=f"{info.lineage}-models")


class ModelsPublic(Page[ModelPublic]):
    """A lineage's models, oldest first."""


class RequestBody(BaseModel):
    """A write's JSON body: its fields in JSON's own types (strict: no ``"3"`` for 3, no ``true``
    for 1), a null where a field has a default meaning that default, other keys ignored."""

    model_config = ConfigDict(strict=True, frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_default(cls, data: Any) -> Any:
        # Clients write an absent optional field as null; the server has always taken it so.
        if not isinstance(data, dict):
            return data
        fields = cls.model_fields
        return {k: v for k, v in data.items() if v is not None or k not in fields or fields[k].is_required()}


class LineageCreate(RequestBody):
    """``POST /v1/tokenizers``: a new lineage whose version 1 is ``tokenizer``, a tokenizer.json's
    text (stored and served as it is)."""

    name: str
    tokenizer: str
    kind: Literal["initial", "import"] = "initial"
    metrics: dict[str, Any] = Field(default_factory=dict)


class VersionCreate(RequestBody):
    """``POST /v1/tokenizers/{name}/versions``: a version on top of the latest (or of ``parent``,
    which must be the latest); ``diff``, when given, must equal the diff the registry computes."""

    tokenizer: str
    diff: dict[str, Any] | None = None
    kind: Literal["tedtok", "litetoken", "import"] = "tedtok"
    parent: int | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)


class AliasSet(RequestBody):
    """``PUT /v1/tokenizers/{name}/aliases/{alias}``: the version it points at (a number,
    ``latest`` or another alias)."""

    version: int | str


class RollbackCreate(RequestBody):
    """``POST /v1/tokenizers/{name}/rollback``: the older version whose content is published anew."""

    to: int


@cache
def _properties(model: type[BaseModel]) -> dict[str, Any]:
    """A model's fields as its JSON schema has them (made once a model)."""
    properties: dict[str, Any] = model.model_json_schema()["properties"]
    return properties


_TYPES = {"string": "a string", "integer": "an integer", "object": "an object", "array": "a list", "null": "null"}


def _admits(schema: dict[str, Any]) -> str:
    """What a field's JSON schema admits, in words.

    >>> _admits({"anyOf": [{"type": "integer"}, {"type": "string"}]})
    'an integer or a string'
    """
    if "enum" in schema:
        *some, last = [repr(value) for value in schema["enum"]]
        return f"{', '.join(some)} or {last}" if some else last
    if "anyOf" in schema:
        return " or ".join(_admits(option) for option in schema["anyOf"])
    return _TYPES[schema["type"]]


def body_problems(model: type[BaseModel], exc: ValidationError) -> list[str]:
    """Every field of a body ``model`` refused, once each, as ``'field' must be …, got …``."""
    problems: dict[str, str] = {}
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else ""
        if field in problems:  # a union's members each refuse the same value
            continue
        schema = _properties(model).get(field)
        if schema is None:  # not a field's: the body as a whole
            problems[field] = f"the body: {error['msg']}"
            continue
        value = error["input"]
        if error["type"] == "missing":
            got = "nothing"
        elif "enum" in schema and isinstance(value, str):
            got = repr(value[:40])
        else:
            got = json_kind(value)
        problems[field] = f"'{field}' must be {_admits(schema)}, got {got}"
    return list(problems.values())
