"""What every command's parser shares: the parser class, the help layout and the argument types.

Nothing here imports torch or transformers: ``nosink --help`` builds every command's entry from this
module alone, and a command's own arguments are added when that command is parsed or its help shown.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from nosink.checks import printable

DATA_ENV = "NOSINK_DATA"  # a folder of local evaluation data: conll2003/, stsb/, banking77/, ...

EXIT_HELP = "early exit: run the decoder's first M layers only and read the embedding there (1 to its depth)"
MODEL_HELP = "hub id, local folder, saved encoder, or 'demo'"
POOLINGS = ["mean", "weighted_mean", "last", "first"]


class UsageError(ValueError):
    """A command line that parses but does not make sense (``--data`` missing, nothing to encode): exit 2."""


class HelpFormatter(argparse.HelpFormatter):
    """An option's default after its help, unless the help names one (or the default is nothing)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        # The hook argparse's own ArgumentDefaultsHelpFormatter overrides; that one also shows "None" and "False".
        help = action.help or ""
        default = action.default
        if (
            not action.option_strings
            or action.nargs == 0  # a flag: its default is the dest's value without it, not the flag's
            or "default" in help
            or default is None
            or default is False
            or default is argparse.SUPPRESS
            or default == []
        ):
            return help
        shown = " ".join(map(str, default)).replace("%", "%%") if isinstance(default, list) else "%(default)s"
        return f"{help} (default: {shown})".lstrip()


class RawDescriptionHelpFormatter(HelpFormatter, argparse.RawDescriptionHelpFormatter):
    """:class:`HelpFormatter`, with the description and epilog as written (``nosink --help``'s examples)."""


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose arguments are added on first use, and which checks what it parsed.

    Args:
        arguments: adds the parser's arguments; called once, before the first parse or help text, so that
            a command whose arguments need the library (the demo's spec, the study's options) costs
            nothing until it is asked for.
        check: called with what this parser parsed; a :class:`UsageError` from it is argparse's usage
            error (the usage, the message, exit status 2).
    """

    def __init__(
        self,
        *args: Any,
        arguments: Callable[[Parser], None] | None = None,
        check: Callable[[argparse.Namespace], None] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        self._arguments = arguments
        self._check = check

    def _complete(self) -> None:
        if self._arguments is not None:
            arguments, self._arguments = self._arguments, None
            arguments(self)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> tuple[argparse.Namespace, list[str]]:
        self._complete()
        parsed, extra = super().parse_known_args(args, namespace)
        if self._check is not None:
            try:
                self._check(parsed)
            except UsageError as err:
                self.error(str(err))
        return parsed, extra

    def format_usage(self) -> str:
        self._complete()
        return super().format_usage()

    def format_help(self) -> str:
        self._complete()
        return super().format_help()


def number(low: float, high: float, *, low_included: bool, high_included: bool = True) -> Callable[[str], float]:
    """An argparse ``type`` for a finite number in ``[low, high]`` (``(low, ...`` unless ``low_included``,
    ``..., high)`` unless ``high_included``)."""
    if not low_included:
        below = f"at most {high:g}" if high_included else f"below {high:g}"
        wanted = "a positive number" if high == math.inf and low == 0 else f"above {low:g} and {below}"
    else:
        wanted = f"between {low:g} and {high:g}" if high_included else f"at least {low:g} and below {high:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {printable(repr(text))}") from None
        above = value >= low if low_included else value > low
        below = value <= high if high_included else value < high
        if not (above and below and math.isfinite(value)):  # NaN fails every comparison
            raise argparse.ArgumentTypeError(f"the value must be {wanted}, got {printable(repr(text))}")
        return value

    return parse


positive_float = number(0, float("inf"), low_included=False)
fraction = number(0, 1, low_included=True)


def template(text: str) -> str:
    """An argparse ``type`` for ``--template``: a preset's name (any case, ``-`` and ``_`` ignored), as spelt there."""
    from nosink.models.templates import PRESETS, by_name

    try:
        return by_name(text).name
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"unknown template {printable(repr(text))}; the presets are {', '.join(PRESETS)}"
        ) from None


# The names of nosink.models.templates.PRESETS, for --template's help without importing torch (a test keeps
# them equal); the type above checks a given name against the library's own table.
TEMPLATES = ("PromptEOL", "PretendedCoT", "KnowledgeEnhancement", "MetaEOL", "Echo")
TEMPLATE_HELP = f"a prompt template preset: {', '.join(TEMPLATES)}"


def exit_layer(text: str) -> int:
    """An argparse ``type`` for ``--exit-layer``: an integer of at least 1 (the library checks the depth)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {printable(repr(text))}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"an exit layer is from 1 to the model's number of layers, got {value}")
    return value
