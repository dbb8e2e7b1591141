"""What a model folder must be to be published beside a version: a folder that loads with
``transformers``' ``AutoModelForCausalLM`` exactly as the registry will serve it.

* Plain file names (a flat folder), no two that differ only in case, at most
  ``MAX_MODEL_FILES``; every ``.json`` file is JSON (no ``NaN``: what the Hub serves must parse
  anywhere).
* ``config.json`` is a GPT-2 config (``model_type: gpt2``, what ``tokmaint trainer export``
  writes): every field ``GPT2_FIELDS`` names has its type and range, ``vocab_size`` covers the
  version's ids.
* The weights are ``model.safetensors`` or a ``model.safetensors.index.json`` whose shards are
  files of the folder; each safetensors header (read alone, at most ``MAX_HEADER_BYTES``)
  parses, its tensors tile the file, and together they are the config's tensors, shape for
  shape. A pickle (``pytorch_model.bin``) cannot be checked without running it: refused.
* No tokenizer.json but the version's own (as parsed: an export writes it anew), and a
  ``tokmaint.json`` (the export's stamp) that names this lineage and version.

>>> config_problems({"model_type": "gpt2", "vocab_size": 10**30, "n_positions": "lots", "n_embd": 16,
...                  "n_layer": 1, "n_head": 2}, id_space=300)
['config.json: vocab_size must be an integer from 300 to 16777216, got 1000000000000000000000000000000', \
"config.json: n_positions must be an integer from 1 to 1048576, got 'lots'"]
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import struct
from typing import Any

from schemas.registry_api import VersionInfo
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.errors import InvalidTokenizer

MODEL_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")
MAX_MODEL_FILES = 256  # TOKMAINT_REGISTRY_MAX_MODEL_FILES' default
# A safetensors header lists each tensor in ~150 bytes: a 70B model's fits in 200 KB.
MAX_HEADER_BYTES = 16 * 1024 * 1024
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# Bytes per element of each safetensors dtype (its format's list).
DTYPE_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}
FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")
# transformers' activation functions (ACT2FN's names; a test keeps this list true).
ACTIVATIONS = (
    "gelu",
    "gelu_10",
    "gelu_accurate",
    "gelu_fast",
    "gelu_new",
    "gelu_python",
    "gelu_python_tanh",
    "gelu_pytorch_tanh",
    "hardswish",
    "laplace",
    "leaky_relu",
    "linear",
    "mish",
    "prelu",
    "quick_gelu",
    "relu",
    "relu2",
    "relu6",
    "sigmoid",
    "silu",
    "sqrtsoftplus",
    "swish",
    "tanh",
    "xielu",
)
TORCH_DTYPES = ("float32", "float16", "bfloat16", "float64", "auto")
# GPT-2's config fields: (kind, low, high) for numbers, the choices for strings.
GPT2_FIELDS: dict[str, tuple[Any, ...]] = {
    "vocab_size": ("int", None, 2**24),
    "n_positions": ("int", 1, 2**20),
    "n_embd": ("int", 1, 2**16),
    "n_layer": ("int", 1, 1024),
    "n_head": ("int", 1, 2**16),
    "n_inner": ("int?", 1, 2**20),
    "bos_token_id": ("id?",),
    "eos_token_id": ("id?",),
    "pad_token_id": ("id?",),
    "attn_pdrop": ("float", 0, 1),
    "embd_pdrop": ("float", 0, 1),
    "resid_pdrop": ("float", 0, 1),
    "summary_first_dropout": ("float", 0, 1),
    "layer_norm_epsilon": ("float", 1e-12, 1),
    "initializer_range": ("float", 0, 1),
    "activation_function": ("str", *ACTIVATIONS),
    "dtype": ("str?", *TORCH_DTYPES),
    "torch_dtype": ("str?", *TORCH_DTYPES),
    "scale_attn_weights": ("bool",),
    "use_cache": ("bool",),
    "scale_attn_by_inverse_layer_idx": ("bool",),
    "reorder_and_upcast_attn": ("bool",),
    "tie_word_embeddings": ("bool",),
    "add_cross_attention": ("false",),
    "architectures": ("strs?",),
}
_REQUIRED = ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head")


def strict_json(data: bytes) -> Any:
    """JSON as every reader takes it: UTF-8, and no ``NaN`` or ``Infinity`` (Python writes them,
    JSON has none); ValueError with the reason otherwise.

    >>> strict_json(b'{"a": [1, 2.5]}')
    {'a': [1, 2.5]}
    >>> strict_json(b'{"n": NaN}')
    Traceback (most recent call last):
    ...
    ValueError: NaN is not a JSON number
    """

    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not a JSON number")

    try:
        return json.loads(data.decode("utf-8"), parse_constant=refuse)
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 (byte at offset {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise ValueError("nested too deeply") from None


def safetensors_tensors(data: bytes) -> dict[str, tuple[str, tuple[int, ...]]]:
    """A safetensors file's tensors (name -> dtype and shape) from its header alone (8 bytes of
    little-endian length, then that much JSON; at most ``MAX_HEADER_BYTES``), checked as the
    ``safetensors`` library checks a file it opens: known dtypes, each tensor's bytes its shape's,
    the tensors tiling the data after the header with no gap or overlap. ValueError otherwise.

    >>> header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    >>> safetensors_tensors(struct.pack("<Q", len(header)) + header + bytes(8))
    {'w': ('F32', (2,))}
    >>> safetensors_tensors(b"random bytes, not weights")
    Traceback (most recent call last):
    ...
    ValueError: its header says it is 7070771740165431666 bytes long; the file has 17 after it
    """
    if len(data) < 8:
        raise ValueError(f"{len(data)} bytes: no safetensors header")
    (length,) = struct.unpack("<Q", data[:8])
    if length > len(data) - 8:
        raise ValueError(f"its header says it is {length} bytes long; the file has {len(data) - 8} after it")
    if length > MAX_HEADER_BYTES:
        raise ValueError(f"its header is {length:,} bytes; at most {MAX_HEADER_BYTES:,} are read")
    header = strict_json(bytes(data[8 : 8 + length]))
    if not isinstance(header, dict):
        raise ValueError("its header is not a JSON object")
    tensors, spans = {}, []
    for name, entry in header.items():
        if name == "__metadata__":
            if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
                raise ValueError("its __metadata__ is not an object of strings")
            continue
        if not isinstance(entry, dict) or entry.get("dtype") not in DTYPE_BYTES:
            raise ValueError(f"tensor {name!r} has no dtype safetensors knows ({', '.join(DTYPE_BYTES)})")
        shape, offsets = entry.get("shape"), entry.get("data_offsets")
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise ValueError(f"tensor {name!r}: its shape is not a list of sizes")
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(type(o) is int for o in offsets)
            and 0 <= offsets[0] <= offsets[1]
        ):
            raise ValueError(f"tensor {name!r}: its data_offsets are no [begin, end]")
        if offsets[1] - offsets[0] != math.prod(shape) * DTYPE_BYTES[entry["dtype"]]:
            raise ValueError(
                f"tensor {name!r}: {offsets[1] - offsets[0]} bytes for a {entry['dtype']} of shape {shape}"
            )
        tensors[name] = (entry["dtype"], tuple(shape))
        spans.append((offsets[0], offsets[1], name))
    end = 0
    for begin, stop, name in sorted(spans):
        if begin != end:
            raise ValueError(f"tensor {name!r} starts at byte {begin}, not where the one before it ends ({end})")
        end = stop
    if end != len(data) - 8 - length:
        raise ValueError(f"its tensors hold {end} bytes; the file has {len(data) - 8 - length} after the header")
    return tensors


def _field_problem(name: str, value: Any, rule: tuple[Any, ...], vocab_size: Any) -> str | None:
    """Why ``config.json``'s field ``name`` breaks ``rule`` (GPT2_FIELDS'), or None."""
    kind = rule[0]
    if value is None and kind.endswith("?"):
        return None
    kind = kind.rstrip("?")
    if kind in ("int", "float"):
        low, high = rule[1], rule[2]
        number = type(value) is int or (kind == "float" and type(value) is float and math.isfinite(value))
        if not number or not low <= value <= high:
            what = "an integer" if kind == "int" else "a number"
            return f"{name} must be {what} from {low} to {high}, got {value!r}"
    elif kind == "id":
        ids = value if isinstance(value, list) else [value]
        rows = vocab_size if type(vocab_size) is int else math.inf
        if not ids or not all(type(i) is int and 0 <= i < rows for i in ids):
            return (
                f"{name} must be null or a row of the model (0 to {vocab_size - 1 if rows < math.inf else '…'}), "
                f"got {value!r}"
            )
    elif kind == "str":
        if value not in rule[1:]:
            return f"{name} must be one of {', '.join(rule[1:])}, got {value!r}"
    elif kind == "bool":
        if type(value) is not bool:
            return f"{name} must be true or false, got {value!r}"
    elif kind == "false":
        if value is not False:
            return f"{name} must be false (a causal LM has no cross-attention), got {value!r}"
    elif kind == "strs" and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        return f"{name} must be a list of strings, got {value!r}"
    return None


def config_problems(config: Any, *, id_space: int) -> list[str]:
    """Why ``config.json`` (parsed) is not a GPT-2 config whose rows cover ``id_space`` ids: every
    field with its type and range (GPT2_FIELDS), the heads dividing the width.

    >>> config_problems({"model_type": "gpt2", "vocab_size": 50, "n_positions": 64, "n_embd": 16,
    ...                  "n_layer": 1, "n_head": 3}, id_space=40)
    ['config.json: n_head (3) must divide n_embd (16)']
    """
    if not isinstance(config, dict):
        return ["config.json: not a JSON object"]
    if config.get("model_type") != "gpt2":
        return [
            f"config.json: model_type must be gpt2 (tokmaint trainer export's models: the registry checks "
            f"them tensor for tensor), got {config.get('model_type')!r}"
        ]
    problems = [f"config.json: no {name}" for name in _REQUIRED if name not in config]
    for name, rule in GPT2_FIELDS.items():
        if name not in config:
            continue
        if name == "vocab_size" and type(config[name]) is int and config[name] < id_space:
            problems.append(
                f"config.json: vocab_size: the model has {config[name]} rows; the version has ids up to {id_space - 1}"
            )
            continue
        rule = (rule[0], id_space, rule[2]) if name == "vocab_size" else rule
        if (problem := _field_problem(name, config[name], rule, config.get("vocab_size"))) is not None:
            problems.append(f"config.json: {problem}")
    if not problems and config["n_embd"] % config["n_head"]:
        problems.append(f"config.json: n_head ({config['n_head']}) must divide n_embd ({config['n_embd']})")
    return problems


def gpt2_tensors(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """The shapes of the tensors a GPT-2 model of ``config`` (checked) loads, by name without
    the ``transformer.`` prefix (a base model's file has none; an LM head's has it).

    >>> shapes = gpt2_tensors({"vocab_size": 50, "n_positions": 64, "n_embd": 16, "n_layer": 1, "n_head": 2})
    >>> len(shapes), shapes["wte.weight"], shapes["h.0.mlp.c_fc.weight"]
    (16, (50, 16), (16, 64))
    """
    width, rows, inner = config["n_embd"], config["vocab_size"], config.get("n_inner") or 4 * config["n_embd"]
    shapes = {
        "wte.weight": (rows, width),
        "wpe.weight": (config["n_positions"], width),
        "ln_f.weight": (width,),
        "ln_f.bias": (width,),
    }
    for layer in range(config["n_layer"]):
        block = f"h.{layer}."
        shapes |= {
            block + "ln_1.weight": (width,),
            block + "ln_1.bias": (width,),
            block + "ln_2.weight": (width,),
            block + "ln_2.bias": (width,),
            block + "attn.c_attn.weight": (width, 3 * width),
            block + "attn.c_attn.bias": (3 * width,),
            block + "attn.c_proj.weight": (width, width),
            block + "attn.c_proj.bias": (width,),
            block + "mlp.c_fc.weight": (width, inner),
            block + "mlp.c_fc.bias": (inner,),
            block + "mlp.c_proj.weight": (inner, width),
            block + "mlp.c_proj.bias": (width,),
        }
    if config.get("tie_word_embeddings") is False:
        shapes["lm_head.weight"] = (rows, width)
    return shapes


# Buffers older transformers saved with GPT-2 (attn.bias, attn.masked_bias): loaded as ignored.
_IGNORED = re.compile(r"h\.[0-9]+\.attn\.(bias|masked_bias)")


def tensor_problems(tensors: dict[str, tuple[str, tuple[int, ...]]], config: dict[str, Any]) -> list[str]:
    """Why the weights' ``tensors`` (name -> dtype, shape) are not the config's model's.

    >>> config = {"vocab_size": 50, "n_positions": 64, "n_embd": 16, "n_layer": 0, "n_head": 2}
    >>> tensor_problems({"transformer.wte.weight": ("F32", (40, 16)), "transformer.wpe.weight": ("I8", (64, 16)),
    ...                  "transformer.ln_f.weight": ("F32", (16,))}, config)
    ['model.safetensors: wte.weight is [40, 16]; config.json makes it [50, 16]', \
'model.safetensors: wpe.weight is I8, not a float', 'model.safetensors: no tensor ln_f.bias']
    """
    expected = gpt2_tensors(config)
    problems, seen = [], set()
    for name, (dtype, shape) in tensors.items():
        key = name.removeprefix("transformer.")
        if key == "lm_head.weight" and key not in expected:  # tied: loaded, then tied to wte
            key = "wte.weight"
        elif key not in expected:
            if not _IGNORED.fullmatch(key):
                problems.append(f"model.safetensors: tensor {name!r} is not a GPT-2 weight of config.json's model")
            continue
        seen.add(key)
        if shape != expected[key]:
            problems.append(f"model.safetensors: {key} is {list(shape)}; config.json makes it {list(expected[key])}")
        elif dtype not in FLOAT_DTYPES:
            problems.append(f"model.safetensors: {key} is {dtype}, not a float")
    missing = [name for name in expected if name not in seen]
    if missing:
        problems.append(
            f"model.safetensors: no tensor {', '.join(missing[:3])}"
            + (f" (and {len(missing) - 3} more)" if len(missing) > 3 else "")
        )
    return problems


def weights_problems(files: dict[str, bytes], config: dict[str, Any] | None) -> list[str]:
    """Why the folder's weights do not load as ``config``'s model (None: the config is refused
    already, only the files are read)."""
    given = [name for name in MODEL_WEIGHTS if name in files]
    if "pytorch_model.bin" in files:
        return [
            "pytorch_model.bin: a pickle cannot be checked without running it; publish model.safetensors "
            "(save_pretrained's default)"
        ]
    if len(given) != 1:
        return [f"weights: one of {' or '.join(MODEL_WEIGHTS)}" + (", not both" if given else "")]
    shards = {"model.safetensors": None} if given == ["model.safetensors"] else None
    problems: list[str] = []
    if shards is None:
        try:
            index = strict_json(files["model.safetensors.index.json"])
        except ValueError as exc:
            return [f"model.safetensors.index.json: not JSON: {exc}"]
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict) or not weight_map:
            return ["model.safetensors.index.json: no weight_map (tensor -> file)"]
        shards = {}
        for tensor, shard in weight_map.items():
            if not (
                isinstance(shard, str)
                and _FILE_NAME.fullmatch(shard)
                and shard.endswith(".safetensors")
                and shard in files
            ):
                problems.append(
                    f"model.safetensors.index.json: weight_map names {shard!r} for {tensor!r}, no "
                    ".safetensors file of the folder"
                )
            else:
                shards.setdefault(shard, set()).add(tensor)
        if problems:
            return problems
    tensors: dict[str, tuple[str, tuple[int, ...]]] = {}
    for shard, listed in shards.items():
        try:
            found = safetensors_tensors(files[shard])
        except ValueError as exc:
            problems.append(f"{shard}: no safetensors file: {exc}")
            continue
        if listed is not None and listed != found.keys():
            odd = sorted(listed ^ found.keys())
            problems.append(
                f"{shard}: its tensors are not those model.safetensors.index.json maps to it, e.g. {odd[:3]}"
            )
        tensors |= found
    if not problems and config is not None:
        problems += tensor_problems(tensors, config)
    return problems


def _same_tokenizer(data: bytes, version: VersionInfo, tokenizer: BPETokenizer) -> bool:
    if hashlib.sha256(data).hexdigest() == version.sha256:
        return True
    try:
        return BPETokenizer.from_json(data.decode("utf-8")).sha256 == tokenizer.sha256
    except (InvalidTokenizer, UnicodeDecodeError, ValueError):
        return False


def stamp_problems(stamp: Any, version: VersionInfo, tokenizer: BPETokenizer) -> list[str]:
    """Why ``tokmaint.json`` (the export's stamp: lineage, version, sha256) says the model was
    trained with another version than ``version``."""
    if not isinstance(stamp, dict):
        return ["tokmaint.json: not a JSON object"]
    problems = []
    if "version" in stamp and stamp["version"] != version.number:
        problems.append(
            f"tokmaint.json: the model was trained with version {stamp['version']!r}, not version {version.number}"
        )
    if "lineage" in stamp and stamp["lineage"] != version.lineage:
        problems.append(
            f"tokmaint.json: the model was trained with lineage {stamp['lineage']!r}, not {version.lineage!r}"
        )
    if "sha256" in stamp and stamp["sha256"] not in (version.sha256, tokenizer.sha256):
        problems.append(
            f"tokmaint.json: the model was trained with tokenizer {str(stamp['sha256'])[:12]}, not "
            f"version {version.number}'s"
        )
    return problems


def model_folder_problems(
    files: dict[str, bytes], version: VersionInfo, tokenizer: BPETokenizer, *, max_files: int = MAX_MODEL_FILES
) -> list[str]:
    """Why a model folder (its files by name) cannot be published beside ``version``
    (``tokenizer``, parsed); empty: it can. Every reason, each naming its file and field."""
    problems = [
        f"file name {name!r} is not a plain name (letters, digits, '.', '_', '-')"
        for name in files
        if not _FILE_NAME.fullmatch(name)
    ]
    by_case: dict[str, list[str]] = {}
    for name in sorted(files):
        by_case.setdefault(name.casefold(), []).append(name)
    problems += [
        f"file names {' and '.join(map(repr, names))} differ only in case: a download to a "
        "case-insensitive file system (macOS', Windows') would keep one of them"
        for names in by_case.values()
        if len(names) > 1
    ]
    if len(files) > max_files:
        problems.append(f"the folder has {len(files):,} files; a model folder holds at most {max_files:,}")
    parsed: dict[str, Any] = {}
    for name in sorted(files):
        if name.endswith(".json"):
            try:
                parsed[name] = strict_json(files[name])
            except ValueError as exc:
                problems.append(f"{name}: not JSON: {exc}")
    config = None
    if "config.json" not in files:
        problems.append("no config.json: a Hugging Face model folder has one (tokmaint trainer export writes it)")
    elif "config.json" in parsed:
        config_reasons = config_problems(parsed["config.json"], id_space=version.id_space)
        problems += config_reasons
        config = None if config_reasons else parsed["config.json"]
    problems += weights_problems(files, config)
    if "tokenizer.json" in files and not _same_tokenizer(files["tokenizer.json"], version, tokenizer):
        problems.append(
            f"its tokenizer.json is not version {version.number}'s: the model was trained with another version"
        )
    if "tokmaint.json" in parsed:
        problems += stamp_problems(parsed["tokmaint.json"], version, tokenizer)
    return problems
