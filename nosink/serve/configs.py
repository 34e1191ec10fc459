"""Embedding configurations: several specs, each with an optional early exit and template, served from one model.

A configuration is written as one string, on the command line (``--spec``, repeatable) and in
:func:`~nosink.serve.create_app`'s ``spec`` alike::

    [NAME=]SPEC[ @ exit M][ @ template T]

>>> parse_config("sts=F* | M0B*8 @ exit 20")
('sts', Config(spec='F* | M0B*8', exit_layer=20, template=None))
>>> parse_config("F*|B*4 @ template PromptEOL")[1].template.name
'PromptEOL'

``NAME`` is the model id clients send for it; a configuration without one is served under the model's
own id (the one chat answers to). ``@ exit M`` runs the decoder's first ``M`` layers only
(``EncoderFromDecoder(exit_layer=M)``), and ``@ template T`` puts each text in a preset prompt template
(``encode(template=T)``): PromptEOL, PretendedCoT, KnowledgeEnhancement or Echo. A template of several
prompts (MetaEOL averages eight) is refused: each of its prompts would be a forward of its own per text.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass

from nosink.checks import positive_int, printable
from nosink.layerspec import Spec, SpecError, as_spec
from nosink.models.templates import as_template
from nosink.models.texts import Template

SYNTAX = "[NAME=]SPEC[ @ exit M][ @ template T]"
EXAMPLE = "sts=F* | M0B*8 @ exit 20 @ template PromptEOL"
# A model id clients can type: no spaces, and neither "=" nor "@", which the syntax above reads.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:/+-]*")


@dataclass(frozen=True)
class Config:
    """One embedding configuration: a layer spec, and optionally an early exit and a one-prompt template.

    Attributes:
        spec: the layer spec (a string or a :class:`Spec`; kept as its canonical string).
        exit_layer: run only the decoder's first ``exit_layer`` layers (see :class:`EncoderFromDecoder`).
        template: a :class:`~nosink.models.texts.Template` of one prompt, or a preset's name.

    Raises:
        SpecError: for a malformed spec.
        ValueError: for an exit layer that is not a positive integer, an unknown preset, or a template of
            several prompts.
        TypeError: for a spec or template of another type.
    """

    spec: str
    exit_layer: int | None = None
    template: Template | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.spec, (str, Spec)):
            raise TypeError(f"spec must be a string or a Spec, got {type(self.spec).__name__}")
        object.__setattr__(self, "spec", str(as_spec(self.spec)))
        if self.exit_layer is not None:
            positive_int(self.exit_layer, "exit_layer")
        template = as_template(self.template)
        if template is not None and len(template.formats) > 1:
            raise ValueError(
                f"template {template} averages {len(template.formats)} prompts; the server serves templates of one "
                "prompt (PromptEOL, PretendedCoT, KnowledgeEnhancement, Echo, or a Template of your own)"
            )
        object.__setattr__(self, "template", template)


def parse_config(text: str) -> tuple[str | None, Config]:
    """``(name or None, configuration)`` of ``[NAME=]SPEC[ @ exit M][ @ template T]``.

    Raises:
        ValueError: naming what is wrong and showing the syntax (a :class:`SpecError` for a malformed spec).
        TypeError: if ``text`` is not a string.
    """
    name, config, _ = parse_config_stating(text)
    return name, config


def parse_config_stating(text: str) -> tuple[str | None, Config, frozenset[str]]:
    """:func:`parse_config`'s ``(name, configuration)`` and which of ``exit`` and ``template`` the text states (a
    configuration over a saved encoder keeps the encoder's own for what it leaves out; ``@ template none`` states
    no template).

    Raises:
        ValueError: as :func:`parse_config`.
        TypeError: as :func:`parse_config`.
    """
    if not isinstance(text, str):
        raise TypeError(f"a configuration is a string {SYNTAX}, got {type(text).__name__}")
    shown = printable(repr(text))

    def bad(problem: str) -> ValueError:
        return ValueError(f"configuration {shown}: {problem}; write {SYNTAX}, e.g. '{EXAMPLE}'")

    head, *clauses = text.split("@")
    name: str | None = None
    if "=" in head:
        name, _, head = head.partition("=")
        name = name.strip()
        if not _NAME.fullmatch(name):
            raise bad(f"{printable(repr(name))} is not a name (letters, digits and _ . : / + -, no spaces)")
    if not head.strip():
        raise bad("no spec")
    options: dict[str, str] = {}
    for clause in clauses:
        words = clause.split()
        key = words[0].lower() if words else ""
        if key not in ("exit", "template") or len(words) != 2:
            raise bad(f"'@{printable(clause)}' is neither '@ exit M' nor '@ template T'")
        if key in options:
            raise bad(f"'@ {key}' is given twice")
        options[key] = words[1]
    exit_layer = None
    if "exit" in options:
        if not options["exit"].isdigit() or int(options["exit"]) < 1:
            raise bad(f"the exit layer is a positive integer, got {printable(repr(options['exit']))}")
        exit_layer = int(options["exit"])
    try:
        template = as_template(options["template"]) if "template" in options else None
        return name, Config(head.strip(), exit_layer, template), frozenset(options)
    except SpecError:
        raise  # its message shows the spec, with a caret under the column
    except ValueError as err:
        raise bad(str(err)) from None


def configs_of(spec: str | Spec | Config | Mapping[str, str | Spec | Config], model: str) -> dict[str, Config]:
    """``{name: configuration}`` of :func:`create_app`'s ``spec``; an unnamed one is served under ``model``.

    Raises:
        ValueError: for a malformed configuration, a name given twice, a bad name, or an empty mapping.
        TypeError: for a value of another type.
    """
    if isinstance(spec, Config):
        return {model: spec}
    if isinstance(spec, Spec):
        return {model: Config(spec)}
    if isinstance(spec, str):
        name, config = parse_config(spec)
        return {name or model: config}
    if not isinstance(spec, Mapping):
        raise TypeError(f"spec must be a spec, a Config or a mapping of them by name, got {type(spec).__name__}")
    if not spec:
        raise ValueError("spec is an empty mapping: give at least one configuration")
    configs = {}
    for name, value in spec.items():
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValueError(
                f"configuration name {printable(repr(name))} is not a name (letters, digits and _ . : / + -)"
            )
        if isinstance(value, str):
            given, value = parse_config(value)
            if given is not None and given != name:
                raise ValueError(f"configuration {name!r} names itself {given!r}: leave 'NAME=' out of the value")
        elif isinstance(value, Spec):
            value = Config(value)
        elif not isinstance(value, Config):
            raise TypeError(f"configuration {name!r} must be a spec or a Config, got {type(value).__name__}")
        configs[name] = value
    return configs
