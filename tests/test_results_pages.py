"""The numbers in the results page equal the committed JSON/CSV files they summarise.

``docs/results/README.md`` is written by hand from the files the evaluation commands wrote; each of its
tables is read here and every score in it is looked up in its source file, rounded as shown.
"""

import csv
import json
import re
from pathlib import Path

import pytest

from nosink import parse_spec

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
SMOL = RESULTS / "smollm2-135m"
PAGE = (RESULTS / "README.md").read_text()


def tables(text: str) -> list[list[list[str]]]:
    """Every Markdown table of ``text``: rows of cells (header first, the ``---`` row dropped)."""
    out: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if not all(set(c) <= {"-", ":"} for c in cells):
                current.append(cells)
        elif current:
            out.append(current)
            current = []
    return out


def table(first_header: str) -> list[list[str]]:
    found = [t for t in tables(PAGE) if t[0][0] == first_header]
    assert len(found) == 1, f"one table headed {first_header!r} expected, found {len(found)}"
    return found[0]


def number(cell: str) -> float:
    return float(cell.strip("*"))


def spec_in(cell: str) -> str:
    (spec,) = re.findall(r"`([^`]+)`", cell)
    return str(parse_spec(spec))


def sweep(*folders: str) -> list[dict]:
    rows = []
    for folder in folders:
        name = next((SMOL / folder).glob("*_sweep.csv"))
        rows += list(csv.DictReader(name.open()))
    return rows


def by_spec(rows: list[dict], metric: str) -> dict[str, float]:
    return {str(parse_spec(r["spec"])): float(r[metric]) for r in rows}


def shown(value: float, cell: str) -> bool:
    """Whether ``cell`` shows ``value`` rounded to the cell's decimals."""
    decimals = len(cell.strip("*").split(".")[1])
    return f"{value:.{decimals}f}" == cell.strip("*")


NER = sweep("ner")


def test_ner_sweep_table_equals_its_csv():
    rows = table("config")
    ks = [int(h.removeprefix("k=")) for h in rows[0][1:]]
    checked = 0
    for cells in rows[1:]:
        config, _, k0 = cells[0].partition(" k0=")
        for k, cell in zip(ks, cells[1:], strict=True):
            if not re.fullmatch(r"\**\d\.\d+\**", cell):
                continue
            (row,) = [r for r in NER if r["config"] == config and int(r["k"]) == k and r["k0"] == k0]
            assert shown(float(row["f1"]), cell), (config, k, k0, cell, row["f1"])
            checked += 1
        bold = [cell for cell in cells[1:] if cell.startswith("**")]
        swept = [float(r["f1"]) for r in NER if r["config"] == config and r["k0"] == k0]
        assert len(bold) == 1 and shown(max(swept), bold[0]), (config, k0)  # the bold one is the row's best
    assert checked >= 45
    assert f"BASELINE (`F*`) is **{float(NER[0]['f1']):.3f}**" in PAGE


def test_mteb_and_baselines_table_equals_the_summaries():
    rows = table("model / spec")
    sts = json.loads((SMOL / "mteb-sts" / "summary.json").read_text())["tasks"]
    cls = json.loads((SMOL / "mteb-cls" / "summary.json").read_text())["tasks"]
    ner = by_spec(NER, "f1")
    for cells in rows[1:]:
        if cells[0].startswith("SmolLM2"):
            spec = spec_in(cells[0])
            want = [
                sts["STSBenchmark"]["scores"][spec],
                cls["Banking77Classification"]["scores"][spec],
                cls["EmotionClassification"]["scores"][spec],
                ner[spec],
            ]
        else:
            name = cells[0].split()[0]
            base = RESULTS / "baselines" / name
            bsts = json.loads((base / "mteb-sts" / "summary.json").read_text())["tasks"]
            bcls = json.loads((base / "mteb-cls" / "summary.json").read_text())["tasks"]
            want = [
                bsts["STSBenchmark"]["scores"]["(encoder)"],
                bcls["Banking77Classification"]["scores"]["(encoder)"],
                bcls["EmotionClassification"]["scores"]["(encoder)"],
                json.loads((base / "ner" / "ner.json").read_text())["result"]["f1"],
            ]
        for value, cell in zip(want, cells[1:], strict=True):
            assert shown(value, cell), (cells[0], cell, value)
    assert len(rows) == 1 + 7


@pytest.mark.parametrize(
    "column, folders, metric",
    [
        ("STSBenchmark", ("sts-architectures", "sts-extend", "sts-mask0"), "cosine_spearman"),
        ("NER F1", ("ner-architectures", "ner-extend"), "f1"),
    ],
    ids=["sts", "ner"],
)
def test_best_spec_tables_equal_the_sweeps(column, folders, metric):
    rows = sweep(*folders)
    scores = by_spec(rows, metric)
    found = [t for t in tables(PAGE) if t[0][:3] == ["configuration", "best spec", column]]
    assert len(found) == 1
    for cells in found[0][1:]:
        config, spec, cell = cells[0], spec_in(cells[1]), cells[2]
        assert shown(scores[spec], cell), (config, spec, cell)
        swept = [float(r[metric]) for r in rows if r["config"] == config]
        assert scores[spec] == max(swept), (config, spec)  # the best spec is the best of its config's sweep


def test_suggestion_search_table_equals_its_csv():
    scores = by_spec(NER + sweep("suggestion-search"), "f1")
    rows = table("spec")
    for cells in rows[1:]:
        assert shown(scores[spec_in(cells[0])], cells[1]), cells
    assert len(rows) == 1 + 4


def test_mask0_last_and_mid_line_equals_its_csv():
    scores = by_spec(sweep("mask0-last-mid"), "f1")
    for name, spec in (("MASK0-LAST", "F* | B*4 | M0B*16"), ("MASK0-MID", "F* | B*12 | M0B*8")):
        assert f"{name} `{spec}`: {scores[spec]:.3f}" in PAGE


def test_sink_profile_suggestions_table_equals_profiles_json():
    from nosink.evals.sinks import LayerSinks, suggest_spec

    models = json.loads((RESULTS / "sinks-profiles" / "profiles.json").read_text())["models"]
    rows = table("model")[1:]
    assert [r[0] for r in rows] == list(models)
    for name, depth, start, spec, k, k0 in rows:
        m = models[name]
        assert int(depth) == m["depth"] == len(m["first_token_share"])
        suggestion = m["suggestion"]
        assert (spec_in(spec), int(k), int(k0)) == (
            str(parse_spec(suggestion["spec"])),
            suggestion["k"],
            suggestion["k0"],
        )
        assert start == str(m["depth"] - int(k))  # the layer from which the upper half of the sink mass lies
        # The suggestion recorded by `nosink inspect` is what suggest_spec gives on the recorded profile today.
        profile = [LayerSinks(i, i, "F", "stack", (x,), x >= 0.5) for i, x in enumerate(m["first_token_share"])]
        assert str(suggest_spec(profile, m["depth"]).spec) == str(parse_spec(suggestion["spec"]))


def test_table_reader_sees_escaped_bars_and_drops_rules():
    text = "| a | b |\n|---|---|\n| `F* \\| B` | 0.5 |\n\nprose\n"
    assert tables(text) == [[["a", "b"], ["`F* | B`", "0.5"]]]


STUDY = RESULTS / "study"


def study_baselines(task: str, run: str = "") -> dict:
    """The trained encoders' results on the same task and data, by name (``run``: a full-size run's tag,
    e.g. ``full``, whose encoders' JSON lie under ``baselines/<name>/<run>/``)."""
    pattern = f"*/{run}/{task}.json" if run else f"*/{task}.json"
    return {p.parts[-3 if run else -2]: json.loads(p.read_text()) for p in sorted((STUDY / "baselines").glob(pattern))}


def full_run(folder: str) -> str:
    """The tag of a full-size run's folder (``smollm2-135m-full-choose120``: ``full-choose120``), else ``""``."""
    return folder[folder.index("-full") + 1 :] if "-full" in folder else ""


def test_study_tables_are_the_tables_of_its_json():
    """Every table of docs/results/study.md that a study JSON gives is in the page as that JSON renders it."""
    from nosink.evals.study import (
        comparisons_table,
        curves_table,
        exits_table,
        ner_table,
        results_table,
        selection_table,
    )

    page = (RESULTS / "study.md").read_text()
    payloads = [p for p in sorted(STUDY.rglob("*.json")) if "baselines" not in p.relative_to(STUDY).parts]
    assert payloads
    for path in payloads:
        payload = json.loads(path.read_text())
        run = full_run(path.parent.name)  # the full-size runs sit beside their own baselines' runs
        if path.stem == "ner":
            want = [ner_table(payload, study_baselines("ner", run))]
            if "candidates" in payload.get("suggestion", {}):  # the selection stage (--select) on NER
                want.append(selection_table(payload))
            if payload.get("families", ["INPLACE-BIDIR", "MASK0&BIDIR"]) != ["INPLACE-BIDIR", "MASK0&BIDIR"]:
                # the paper's other families: their curves and comparisons
                want += [curves_table(payload), comparisons_table(payload)]
        else:
            want = [results_table(payload, study_baselines(path.stem, run)), comparisons_table(payload)]
            if any(t["exits"] for t in payload["templates"]):
                want.append(exits_table(payload))
            if "candidates" in payload.get("suggestion", {}):  # the selection stage (--select)
                want.append(selection_table(payload))
            if payload.get("report_grid"):  # every grid spec reported: the families' curves over k
                want.append(curves_table(payload))
        for text in want:
            assert text in page, f"{path.relative_to(RESULTS)}: a table is missing or differs from its JSON"


def test_study_page_figures_exist():
    page = (RESULTS / "study.md").read_text()
    figures = re.findall(r"\]\((study/[^)]+\.png)\)", page)
    assert figures
    for figure in figures:
        assert (RESULTS / figure).is_file(), figure


# The later one-core runs (grids cut to F* and the STS-B-chosen specs) state their encoding time in their
# section of the page: the `seconds` field of the JSON, and for STS/classification each template's share.
LATER_RUNS = {
    "gemma-3-270m/emotion.json": "### gemma-3-270m",
    "gemma-3-270m/banking77.json": "### gemma-3-270m",
    "gemma-3-270m/ner.json": "### gemma-3-270m",
    "qwen2.5-coder-0.5b/emotion.json": "### Qwen2.5-Coder-0.5B",
    "qwen2.5-coder-0.5b/banking77.json": "### Qwen2.5-Coder-0.5B",
}
SECTIONS = {"emotion": "## Emotion", "banking77": "## Banking77", "ner": "## CoNLL-2003 NER"}


def whole(seconds: float) -> int:
    """Seconds as the page writes them: rounded half up (284.5 s is 285 s)."""
    return int(seconds + 0.5)


@pytest.mark.parametrize("name", list(LATER_RUNS))
def test_later_runs_state_their_json_seconds(name):
    page = (RESULTS / "study.md").read_text()
    payload = json.loads((STUDY / name).read_text())
    task = page.split(f"\n{SECTIONS[Path(name).stem]}\n", 1)[1].split("\n## ", 1)[0]
    section = " ".join(task.split(f"\n{LATER_RUNS[name]}\n", 1)[1].split("\n### ", 1)[0].split())
    assert f"**{whole(payload['seconds'])} s**" in section, name
    for t in payload.get("templates", []):
        said = "without template" if t["template"] == "instruction" else f"with {t['template']}"
        assert f"{whole(t['seconds'])} s {said}" in section, (name, t["template"])
    assert f"<!-- table: {'ner' if 'ner' in name else 'results'} {name} -->" in section, name


# The runs of the other published templates on STS-B (Echo, Pretended CoT, KE at F* and the model's STS-B
# specs) have a section each under "## STS-B" that states their encoding time; their instruction rows are
# the model's first STS-B run's rows (same pairs, same specs), which is what lets the page read them together.
TEMPLATE_RUNS = {
    "gemma-3-270m-templates/sts.json": ("gemma-3-270m/sts.json", "### gemma-3-270m with Echo, Pretended CoT"),
    "qwen2.5-coder-0.5b-templates/sts.json": (
        "qwen2.5-coder-0.5b/sts.json",
        "### Qwen2.5-Coder-0.5B with Echo, Pretended CoT",
    ),
}


def sts_subsection(heading: str) -> str:
    """The text of the STS-B subsection whose heading starts with ``heading``, whitespace collapsed."""
    page = (RESULTS / "study.md").read_text()
    task = page.split("\n## STS-B\n", 1)[1].split("\n## ", 1)[0]
    return " ".join(task.split(f"\n{heading}", 1)[1].split("\n### ", 1)[0].split())


@pytest.mark.parametrize("name", list(TEMPLATE_RUNS))
def test_template_runs_state_their_json_seconds(name):
    payload = json.loads((STUDY / name).read_text())
    section = sts_subsection(TEMPLATE_RUNS[name][1])
    assert f"**{whole(payload['seconds']):,} s**" in section, name  # as the page writes them: 1,710 s
    for t in payload["templates"]:
        said = "without template" if t["template"] == "instruction" else f"with {t['template']}"
        assert f"{whole(t['seconds']):,} s {said}" in section, (name, t["template"])
    assert f"<!-- table: results {name} -->" in section, name


@pytest.mark.parametrize("name", list(TEMPLATE_RUNS))
def test_template_runs_repeat_the_first_runs_instruction_rows(name):
    payload = json.loads((STUDY / name).read_text())
    first = json.loads((STUDY / TEMPLATE_RUNS[name][0]).read_text())
    assert payload["data"] == first["data"] and payload["seed"] == first["seed"], name
    (new,) = [t for t in payload["templates"] if t["template"] == "instruction"]
    (old,) = [t for t in first["templates"] if t["template"] == "instruction"]
    for config, row in new["chosen"].items():
        assert row["spec"] == old["chosen"][config]["spec"], (name, config)
        for key in ("choose", "report", "low", "high"):
            assert row[key] == pytest.approx(old["chosen"][config][key], abs=1e-6), (name, config, key)


# Qwen2.5-Coder-1.5B past the first grid's edge (k up to 28, exits) has its own STS-B subsection that states its
# encoding time; its k = 20 specs are the first run's PromptEOL specs on the same pairs, so their choosing scores
# (and F*'s reported one) must be the first run's: that is what lets the page read the two runs together.
EDGE_RUN = "qwen2.5-coder-1.5b-edge/sts.json"


def test_edge_run_states_its_json_seconds():
    payload = json.loads((STUDY / EDGE_RUN).read_text())
    section = sts_subsection("### Qwen2.5-Coder-1.5B past k = 20")
    assert f"**{whole(payload['seconds']):,} s**" in section
    for t in payload["templates"]:
        assert f"{whole(t['seconds']):,} s with {t['template']}" in section, t["template"]
    assert f"<!-- table: results {EDGE_RUN} -->" in section


def test_edge_run_repeats_the_first_runs_k20_rows():
    payload = json.loads((STUDY / EDGE_RUN).read_text())
    first = json.loads((STUDY / "qwen2.5-coder-1.5b/sts.json").read_text())
    assert payload["data"] == first["data"] and payload["seed"] == first["seed"]
    (new,) = payload["templates"]
    (old,) = [t for t in first["templates"] if t["template"] == new["template"]]
    grid = {row["name"]: row["choose"] for row in new["grid"]}
    for row in old["chosen"].values():
        assert grid[row["name"]] == pytest.approx(row["choose"], abs=1e-6), row["name"]
    for key in ("choose", "report", "low", "high"):
        assert new["chosen"]["F*"][key] == pytest.approx(old["chosen"]["F*"][key], abs=1e-6), key


# The full-size runs (full STS-B test set, 2,000/2,000 NER sentences) have their own section: a time table
# row per JSON file (its `seconds`), and each model run is tabled beside both trained encoders' runs on
# the same data (baselines/<name>/<tag>/, the tag from "-full" on in the run's folder name).
FULL_RUNS = sorted(p.relative_to(STUDY).as_posix() for p in STUDY.glob("*-full*/*.json"))
FULL_BASELINES = sorted(p.relative_to(STUDY).as_posix() for p in STUDY.glob("baselines/*/full*/*.json"))


def full_section() -> str:
    page = (RESULTS / "study.md").read_text()
    return page.split("\n## Full-size runs\n", 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize("name", FULL_RUNS + FULL_BASELINES)
def test_full_size_runs_state_their_json_seconds(name):
    payload = json.loads((STUDY / name).read_text())
    assert f"| `study/{name}` | {whole(payload['seconds'])} |" in full_section(), name


@pytest.mark.parametrize("name", FULL_RUNS)
def test_full_size_runs_are_tabled_beside_both_encoders(name):
    task = Path(name).stem
    baselines = study_baselines(task, full_run(Path(name).parent.name))
    assert sorted(baselines) == ["all-MiniLM-L6-v2", "all-mpnet-base-v2"], name
    data = json.loads((STUDY / name).read_text())["data"]
    assert all(base["data"] == data for base in baselines.values()), f"{name}: the encoders ran on other data"
    kind = "ner" if task == "ner" else "results"
    assert f"<!-- table: {kind} {name} -->" in full_section(), name


def test_full_size_runs_total_is_the_sum_of_their_seconds():
    total = sum(whole(json.loads((STUDY / name).read_text())["seconds"]) for name in FULL_RUNS + FULL_BASELINES)
    assert f"| total | {total} ({total / 60:.0f} minutes) |" in full_section()


def test_study_qwen_1_5b_time_table_equals_its_json():
    """The Qwen2.5-Coder-1.5B time table has one row per JSON of its folder, with that file's ``seconds`` field."""
    page = (RESULTS / "study.md").read_text()
    (rows,) = [t for t in tables(page) if t[0][0] == "Qwen2.5-Coder-1.5B run (one process)"]
    files = {}
    for cells in rows[1:]:
        if cells[3]:
            (name,) = re.findall(r"`([^`]+)`", cells[3])
            files[name] = cells[4]
    folder = STUDY / "qwen2.5-coder-1.5b"
    assert set(files) == {str(p.relative_to(RESULTS)) for p in folder.rglob("*.json")}
    seconds = {name: json.loads((RESULTS / name).read_text())["seconds"] for name in files}
    for name, cell in files.items():
        assert shown(seconds[name], cell), (name, cell, seconds[name])
    (total,) = [cells for cells in rows[1:] if cells[0] == "total"]
    assert shown(sum(seconds.values()), total[4]), total


def test_study_at_a_glance_rows_are_each_files_choice_and_its_encoders():
    """Each row of the "At a glance" table is the row of its JSON with the highest choosing score (templates,
    specs, exits), as reported there, beside the trained encoders' runs on the same items."""
    page = (RESULTS / "study.md").read_text()
    section = page[page.index("## At a glance") : page.index("## Plan and budget")]
    (rows,) = tables(section)
    assert rows[0][:4] == ["task, reporting split", "model", "chosen configuration", "score [95% CI]"]

    def ci(row: dict) -> str:
        return f"{row['report']:.3f} [{row['low']:.3f}, {row['high']:.3f}]"

    def candidates(payload: dict):
        if "rows" in payload:  # NER
            yield from ((None, row) for row in payload["rows"])
            return
        for t in payload["templates"]:
            yield from ((t["template"], row) for row in t["chosen"].values())
            yield from ((t["template"], row) for rows in t["exits"].values() for row in rows)

    assert len(rows) > 1
    for task, _, configuration, score, minilm, mpnet, file in rows[1:]:
        (name,) = re.findall(r"`study/([^`]+)`", file)
        payload = json.loads((STUDY / name).read_text())
        template, best = max(candidates(payload), key=lambda c: c[1]["choose"])
        assert configuration == (f"{template}, `{best['name']}`" if template else f"`{best['name']}`"), task
        assert score == ci(best), task
        encoders = study_baselines(Path(name).stem, full_run(Path(name).parent.name))
        assert set(encoders) == {"all-MiniLM-L6-v2", "all-mpnet-base-v2"}, task
        for cell, encoder in ((minilm, "all-MiniLM-L6-v2"), (mpnet, "all-mpnet-base-v2")):
            result = encoders[encoder].get("result") or encoders[encoder]["rows"][0]
            assert encoders[encoder]["data"] == payload["data"], (task, encoder)
            assert cell == ci(result), (task, encoder)


# The MetaEOL runs (STS-B only, one core, each alone) have their own sections: each states the `seconds`
# field of its JSON and holds its tables; the study's first time table lists them with the runs of the budget.
METAEOL_RUNS = {
    "smollm2-135m-metaeol/sts.json": "### SmolLM2-135M with MetaEOL",
    "gemma-3-270m-metaeol/sts.json": "### gemma-3-270m with MetaEOL",
    "qwen2.5-coder-0.5b-metaeol/sts.json": "### Qwen2.5-Coder-0.5B with MetaEOL",
}


@pytest.mark.parametrize("name", list(METAEOL_RUNS))
def test_metaeol_runs_state_their_json_seconds_and_tables(name):
    page = (RESULTS / "study.md").read_text()
    payload = json.loads((STUDY / name).read_text())
    assert [t["template"] for t in payload["templates"]] == ["MetaEOL"], name
    section = page.split(f"\n{METAEOL_RUNS[name]}\n", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    assert f"**{whole(payload['seconds']):,} s**" in " ".join(section.split()), name
    for kind in ("results", "comparisons"):
        assert f"<!-- table: {kind} {name} -->" in section, (name, kind)


def test_study_time_table_rows_are_their_json_seconds():
    """The study's first time table: each row is its file's ``seconds`` (rounded), the total their sum."""
    page = (RESULTS / "study.md").read_text()
    plan = page.split("\n## Plan and budget\n", 1)[1].split("\n### ", 1)[0]
    (rows,) = [t for t in tables(plan) if t[0] == ["file", "seconds"]]
    files = {}
    for cells in rows[1:-1]:
        (name,) = re.findall(r"`(study/[^`]+)`", cells[0])
        files[name] = int(cells[1])
    assert set(METAEOL_RUNS) <= {name.removeprefix("study/") for name in files}
    for name, cell in files.items():
        assert cell == whole(json.loads((RESULTS / name).read_text())["seconds"]), name
    total = sum(files.values())
    assert rows[-1] == ["total", f"{total} ({total / 60:.0f} minutes)"]


# The paper's Findings 1-4 (five families at every k, --report-grid): each model's section states the seconds
# of both its JSON files and holds every table the study renders from them (the curves among them).
FINDINGS = {
    "### Findings on SmolLM2-135M": ("findings/smollm2-135m/sts.json", "findings/smollm2-135m/ner.json"),
    "### Findings on gemma-3-270m": ("findings/gemma-3-270m/sts.json", "findings/gemma-3-270m/ner.json"),
    "### Findings on Qwen2.5-Coder-0.5B": (
        "findings/qwen2.5-coder-0.5b/sts.json",
        "findings/qwen2.5-coder-0.5b-ner/ner.json",
    ),
}


@pytest.mark.parametrize("heading", list(FINDINGS))
def test_findings_sections_state_their_seconds_and_curves(heading):
    from nosink.evals.study import curves_table

    page = (RESULTS / "study.md").read_text()
    start = page.index(heading + "\n")
    end = min(i for i in (page.find("\n### ", start + 1), page.find("\n## ", start + 1)) if i > 0)
    section = page[start:end]
    for name, task in zip(FINDINGS[heading], ("STS-B", "CoNLL-2003 NER"), strict=True):
        payload = json.loads((STUDY / name).read_text())
        assert payload["families"] == ["INPLACE-BIDIR", "INPLACE-BACK", "MASK0-FOR", "MASK0-BIDIR", "MASK0-ALL"]
        assert payload["report_grid"] is True
        assert f"{task} ({whole(payload['seconds']):,} s)" in section, name
        assert f"<!-- table: curves {name} -->\n{curves_table(payload)}" in section, name


# Masks x templates on every task: the section's tables are interplay_table and interplay_counts_table of the runs
# listed in study/interplay-runs.csv (each model's runs on one task, read together), its figure drawn from them.
def interplay_rows() -> dict[str, list[dict]]:
    rows: dict[str, list[dict]] = {}
    with (STUDY / "interplay-runs.csv").open() as f:
        for line in csv.DictReader(f):
            rows.setdefault(line["label"], []).append(json.loads((STUDY / line["run"]).read_text()))
    return rows


def test_interplay_section_is_the_interplay_of_every_run_with_a_template():
    from nosink.evals.study import interplay_counts_table, interplay_table

    page = (RESULTS / "study.md").read_text()
    section = page.split("\n## Masks and templates on every task\n", 1)[1].split("\n## ", 1)[0]
    rows = interplay_rows()
    assert f"<!-- table: interplay -->\n{interplay_table(rows)}\n" in section
    assert f"<!-- table: interplay counts -->\n{interplay_counts_table(rows)}\n" in section
    assert "](study/interplay.png)" in section and (STUDY / "interplay.png").is_file()
    # every study JSON with a prompt template is read here, but for the runs of other grids: the template-exit run
    # (KE's own grid) and Qwen2.5-1.5B past k = 20 (PromptEOL's own grid); the rest have no template
    with (STUDY / "interplay-runs.csv").open() as f:
        read = {line["run"] for line in csv.DictReader(f)}
    skipped = ("suggestion-", "findings/", "full-choose120", "template-exits", "1.5b-edge")
    for path in sorted(STUDY.rglob("*.json")):
        name = str(path.relative_to(STUDY))
        if "baselines" in name or path.stem == "ner" or any(s in name for s in skipped):
            continue
        assert name in read, f"{name}: a study run missing from the masks x templates section"
    # verdict 3 quotes the counts: the mask under a template, the template on top of it, the two adding up
    from nosink.evals.study import NO_TEMPLATE, effect, interplay

    entries = [e for payloads in rows.values() for e in interplay(payloads) if e["template"] != NO_TEMPLATE]
    paired = [e for e in entries if e["prompt"] is not None]
    mask = [effect(e["mask"]) for e in entries]
    said = (
        f"under a template it adds on {mask.count('adds')} of {len(entries)} rows and costs on {mask.count('costs')}; "
        f"the template on top of the mask adds on {[effect(e['prompt']) for e in paired].count('adds')} of "
        f"{len(paired)}; the two add up on {sum(e['verdict'] == 'add up' for e in entries)} rows"
    )
    verdicts = " ".join(page.split("\n## Verdicts\n", 1)[1].split())
    assert said in verdicts
    # the runs added for the section: each time row is its file's seconds, overall and per template
    (times,) = [t for t in tables(section) if t[0] == ["file", "seconds", "per template"]]
    total = 0
    for cells in times[1:-1]:
        (name,) = re.findall(r"`study/([^`]+)`", cells[0])
        payload = json.loads((STUDY / name).read_text())
        total += whole(payload["seconds"])
        assert cells[1] == f"{whole(payload['seconds']):,}", name
        assert cells[2] == ", ".join(f"{t['template']} {whole(t['seconds']):,}" for t in payload["templates"]), name
    assert times[-1][:2] == ["total", f"{total:,} ({total / 60:.0f} minutes)"]


# The midpoint rule scored on NER (run later): each run repeats its model's first NER run (the rows they share are
# the same numbers), and the verdict table's differences are the runs' "suggested vs best swept" comparisons.
MIDPOINT_NER = {
    "SmolLM2-135M": ("suggestion-mid/smollm2-135m/ner.json", "smollm2-135m/ner.json"),
    "Qwen2.5-Coder-0.5B": ("suggestion-mid/qwen2.5-coder-0.5b/ner.json", "qwen2.5-coder-0.5b/ner.json"),
    "gemma-3-270m": ("suggestion-mid/gemma-3-270m/ner.json", "gemma-3-270m/ner.json"),
}
# The selection stage on NER (run later still): the same protocol, the selected spec as the suggestion.
SELECT_NER = {model: (name.replace("suggestion-mid", "suggestion-select"), first) for model, (name, first) in
              MIDPOINT_NER.items()}  # fmt: skip
NER_VERDICTS = {
    "suggestion-mid": "\n### CoNLL-2003 NER (run later): the midpoint rule on the three models\n",
    "suggestion-select": "\n### CoNLL-2003 NER (run later): the selection stage on the three models\n",
}


@pytest.mark.parametrize(("model", "runs"), [(m, MIDPOINT_NER) for m in MIDPOINT_NER] + [(m, SELECT_NER) for m in
                                             SELECT_NER])  # fmt: skip
def test_ner_suggestion_runs_repeat_the_first_runs_and_their_verdict_rows(model, runs):
    name, first_name = runs[model]
    payload, first = (json.loads((STUDY / n).read_text()) for n in (name, first_name))
    assert payload["data"] == first["data"] and payload["seed"] == first["seed"]
    old = {(r["name"], r["exit_layer"]): r for r in first["rows"]}
    shared = [r for r in payload["rows"] if (r["name"], r["exit_layer"]) in old and r["family"] != "SUGGESTED"]
    assert len(shared) >= 3, name
    for row in shared:
        for key in ("choose", "report", "low", "high"):
            assert row[key] == pytest.approx(old[row["name"], row["exit_layer"]][key], abs=1e-9), (name, row["name"])
    page = (RESULTS / "study.md").read_text()
    section = page.split(NER_VERDICTS[name.split("/")[0]], 1)[1]
    (rows,) = [t for t in tables(section.split("\n## ", 1)[0]) if t[0][0] == "model" and "within 1 point" in t[0]]
    (cells,) = [r for r in rows if r[0] == model]
    (c,) = [c for c in payload["comparisons"] if c["comparison"] == "suggested vs best swept"]
    assert cells[1].startswith(f"`{payload['suggestion']['spec']}`")
    (suggested,) = [r for r in payload["rows"] if r["family"] == "SUGGESTED"]
    assert cells[2] == f"{suggested['report']:.3f} [{suggested['low']:.3f}, {suggested['high']:.3f}]"
    assert cells[4] == f"{c['delta']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}]"
    assert cells[5] == ("yes" if c["delta"] >= -0.01 else "no")
