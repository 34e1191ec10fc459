"""MkDocs hooks of the docs site.

- The mask and plan pictures are drawn at build time from the code that runs them: every figure
  below is made by :mod:`nosink.layerspec.draw` from ``build_mask`` and ``resolve``, so a picture
  cannot disagree with the masks the encoder uses. Pages refer to them as ``figures/...svg``.
- The command-line reference shows each command's real ``--help``: a line
  ``<!-- nosink-help: eval ner -->`` in a page becomes the output of ``nosink eval ner --help``.
- A ``|`` inside a code span in a table must be written ``\\|`` in Markdown (GitHub drops the
  backslash, Python-Markdown keeps it): table cells lose that backslash in the built HTML.
- The API reference reads the sources statically (griffe), which looks for ``nosink/evals`` where
  the repository has ``evals/`` (setuptools maps the folders at install time). The hook lays out
  ``build/api-src/nosink`` as the installed package looks, with links to the real files, and
  mkdocs.yml points mkdocstrings there.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
from pathlib import Path

from mkdocs.structure.files import File, Files

from nosink.layerspec import parse_spec
from nosink.layerspec.draw import mask_svg, plan_svg

TOKENS = ["<s>", "The", "cat", "sat", "on", "the", "mat", "."]
PADDED = ["<s>", "A", "dog", "ran", "[pad]", "[pad]"]
LEFT_PADDED = ["[pad]", "[pad]", "<s>", "A", "dog", "ran"]

MASKS = {
    "F": {},
    "B": {},
    "R": {},
    "M0F": {},
    "M0B": {},
    "M1F": {},
    "M1B": {},
    "M6B": {"title": "M6B (= reverse causal here)"},
    "M6F": {"title": "M6F (only the diagonal)"},
}

EXTRA_MASKS = {
    "padding-right-M0B": (
        "M0B",
        {"tokens": PADDED, "attention_mask": [1, 1, 1, 1, 0, 0], "title": "M0B, right padding"},
    ),
    "padding-left-M0B": (
        "M0B",
        {"tokens": LEFT_PADDED, "attention_mask": [0, 0, 1, 1, 1, 1], "title": "M0B, left padding"},
    ),
    "window-F": ("F", {"tokens": TOKENS, "sliding_window": 3, "title": "F, sliding window 3"}),
}

PLANS = {
    "inplace": ("F* | B*2", 6),
    "inplace-back": ("F* | R*2", 6),
    "inter": ("F* | INTER(B*2)", 6),
    "inter-twice": ("F* | INTER(R) | INTER(R)", 6),
    "extra": ("F* | EXTRA(B*2)", 6),
    "extend": ("F* | EXTEND(R*2)", 6),
    "mask0-bidir": ("F* | M0B*2", 6),
    "mask0-and-bidir": ("F* | B*2 | M0B*2", 6),
    "mask0-for": ("F* | M0F*2", 6),
    "mask0-all": ("M0B*", 6),
    "mask0-for-all": ("M0F*", 6),
}


def figures() -> dict[str, str]:
    """Every generated figure: its path under the docs folder -> its SVG text."""
    out = {f"figures/masks/{name}.svg": mask_svg(name, tokens=TOKENS, **opts) for name, opts in MASKS.items()}
    out |= {f"figures/masks/{name}.svg": mask_svg(kind, **opts) for name, (kind, opts) in EXTRA_MASKS.items()}
    out |= {
        f"figures/plans/{name}.svg": plan_svg(parse_spec(spec).resolve(depth), title=f"{spec}  (depth {depth})")
        for name, (spec, depth) in PLANS.items()
    }
    return out


SUBPACKAGES = {"layerspec": "layerspec", "models": "models", "corpus": "corpus", "evals": "evals"}


def stage_api_sources(root: Path) -> Path:
    """Lay out ``build/api-src/nosink`` as the installed package looks (links to the sources)."""
    staged = root / "build" / "api-src" / "nosink"
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir(parents=True)
    for item in (root / "nosink").iterdir():
        if item.name != "__pycache__":
            (staged / item.name).symlink_to(item)
    for name, folder in SUBPACKAGES.items():
        (staged / name).symlink_to(root / folder, target_is_directory=True)
    return staged


# At import: mkdocstrings reads its paths when the plugins start, before any hook event runs.
stage_api_sources(Path(__file__).resolve().parents[2])


def on_files(files: Files, config, **kwargs) -> Files:
    """Add the generated figures to the site's files, where link checks and the build see them."""
    for path, svg in figures().items():
        files.append(File.generated(config, path, content=svg))
    return files


_HELP = re.compile(r"^<!-- nosink-help:(?P<args>[^>]*)-->$", re.M)


def cli_help(args: str) -> str:
    """The ``--help`` text of ``nosink ARGS``, as argparse prints it at 100 columns."""
    from nosink.cli import main

    out = io.StringIO()
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            main([*shlex.split(args), "--help"])
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
    if not out.getvalue().startswith("usage: nosink"):
        raise ValueError(f"'nosink {args} --help' printed no usage")
    return out.getvalue().rstrip()


def on_page_markdown(markdown: str, page, config, files, **kwargs) -> str:
    """Replace ``<!-- nosink-help: ARGS -->`` lines by the help of ``nosink ARGS``."""
    return _HELP.sub(lambda m: "```text\n" + cli_help(m["args"].strip()) + "\n```", markdown)


_CELL = re.compile(r"<t[dh][ >].*?</t[dh]>", re.S)


def on_page_content(html: str, page, config, files, **kwargs) -> str:
    """Drop the backslash of ``\\|`` in table cells, as GitHub renders it."""
    return _CELL.sub(lambda m: m[0].replace("\\|", "|"), html)
