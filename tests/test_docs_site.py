"""The docs site builds in strict mode and its key pages render in headless Chromium with every image.

The render check needs Debian's ``chromium`` and ``chromium-driver`` (``.ci/run`` installs them) and
selenium (the ``docs`` extra). Without them these tests skip, unless ``NOSINK_REQUIRE_CHROMIUM=1``
(set by CI), which turns a missing browser into a failure.
"""

import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NAV = re.findall(r":\s+(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), flags=re.M)


def url_of(page: str) -> str:
    """The site-relative URL of a nav page (``guides/using.md`` -> ``guides/using/``)."""
    return page.removesuffix(".md").removesuffix("README").removesuffix("index").rstrip("/") + "/"


# The quickstart and the spec reference first; then every other page of the nav.
FIRST = ["quickstart/", "spec-language/"]
RENDERED = FIRST + [u for u in map(url_of, NAV) if u not in FIRST]


# With pytest-xdist this file's tests run on one worker (--dist loadgroup): one site build, one browser.
pytestmark = pytest.mark.xdist_group("test_docs_site")


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    """The site built by ``mkdocs build --strict`` (broken links, references or figures fail it)."""
    pytest.importorskip("mkdocs", reason="the docs extra is not installed")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    return out


def test_site_builds_with_every_page_of_the_nav(site):
    assert len(NAV) >= 20
    for page in NAV:
        built = site / url_of(page).lstrip("/") / "index.html"
        assert built.is_file(), page


def test_table_cells_show_pipes_without_the_markdown_escape(site):
    source = (ROOT / "docs" / "results" / "README.md").read_text()
    assert "\\|" in source  # specs in table cells are written F* \| B*20 ...
    cells = re.findall(r"<td[^>]*>(.*?)</td>", (site / "results" / "index.html").read_text(), flags=re.S)
    assert any("|" in c for c in cells) and not any("\\|" in c for c in cells)


def test_spec_reference_draws_every_kind_and_combinator(site):
    html = (site / "spec-language" / "index.html").read_text()
    images = set(re.findall(r'<img[^>]+src="([^"]+)"', html))
    for kind in ("F", "B", "R", "M0F", "M0B"):
        assert f"../figures/masks/{kind}.svg" in images, kind
    for plan in ("inplace", "inter", "extra", "extend"):
        assert f"../figures/plans/{plan}.svg" in images, plan
    for image in images:
        assert (site / "spec-language" / image).resolve().is_file(), image


def test_api_reference_is_generated_from_docstrings(site):
    html = (site / "reference" / "models" / "index.html").read_text()
    assert "EncoderFromDecoder" in html and "Embed texts, sentence-transformers style." in html
    layerspec = (site / "reference" / "layerspec" / "index.html").read_text()
    # doctests render as code blocks, Sphinx roles as code spans
    code = re.findall(r'<div class="highlight"><pre>.*?</pre>', layerspec, flags=re.S)
    assert any("&gt;&gt;&gt;" in block and "parse_spec" in block for block in code)
    for page in ("models", "layerspec", "evals"):
        html = (site / "reference" / page / "index.html").read_text()
        assert ":class:`" not in html and "```pycon" not in html


def test_cli_reference_shows_every_commands_real_help(site):
    html = (site / "reference" / "cli" / "index.html").read_text()
    for command in (
        "demo",
        "encode",
        "plan",
        "inspect",
        "eval ner",
        "eval sweep",
        "eval mteb",
        "eval classify",
        "eval study",
    ):
        assert f"usage: nosink {command}" in html, command
    assert "--train-limit" in html and "--threshold" in html


# --- rendering in a real browser ------------------------------------------------------------------


@pytest.fixture(scope="session")
def browser():
    required = os.environ.get("NOSINK_REQUIRE_CHROMIUM") == "1"
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    missing = [name for name, path in (("chromium", chromium), ("chromedriver", driver_path)) if path is None]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing.append("selenium")
    if missing:
        message = f"headless render check needs {', '.join(missing)} (apt-get install chromium chromium-driver)"
        if required:
            pytest.fail(message)
        pytest.skip(message)
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,2000",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def _serve(folder: Path):
    handler = functools.partial(QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def render_problems(driver, url: str) -> list[str]:
    """What a reader of ``url`` would see broken: no content, failed resources, broken images, console errors."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get_log("browser")  # drop what earlier pages logged
    driver.get(url)
    WebDriverWait(driver, 30).until(lambda d: d.execute_script("return document.readyState") == "complete")
    WebDriverWait(driver, 30).until(
        lambda d: d.execute_script("return Array.from(document.images).every(i => i.complete)")
    )
    problems = []
    state = driver.execute_script(
        """
        const article = document.querySelector("article");
        return {
          h1: document.querySelector("article h1") ? document.querySelector("article h1").textContent : null,
          text: article ? article.innerText.length : 0,
          styled: getComputedStyle(document.querySelector(".md-header") || document.body).position,
          images: Array.from(document.images).map(i => [i.getAttribute("src"), i.naturalWidth, i.naturalHeight]),
          failed: performance.getEntriesByType("resource")
                    .filter(e => e.responseStatus >= 400).map(e => e.name + " " + e.responseStatus),
        };
        """
    )
    if not state["h1"] or state["text"] < 200:
        problems.append(f"no page content (h1={state['h1']!r}, {state['text']} characters)")
    if state["styled"] != "sticky":
        problems.append(f"the theme's stylesheet did not apply (header position {state['styled']!r})")
    problems += [f"image {src} did not load" for src, w, h in state["images"] if not (w and h)]
    problems += [f"resource failed: {entry}" for entry in state["failed"]]
    problems += [f"console: {e['message']}" for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    return problems


@pytest.mark.parametrize("page", RENDERED)
def test_page_renders_with_every_image(site, browser, page):
    server = _serve(site)
    try:
        url = f"http://127.0.0.1:{server.server_port}/{page.removeprefix('/')}"
        assert render_problems(browser, url) == []
        images = browser.execute_script("return document.images.length")
        assert images >= (10 if page == "spec-language/" else 0)
    finally:
        server.shutdown()


def test_render_check_catches_a_missing_image(site, browser, tmp_path):
    broken = tmp_path / "site"
    shutil.copytree(site, broken)
    page = broken / "quickstart" / "index.html"
    html = page.read_text()
    page.write_text(html.replace("<article", '<img src="../figures/masks/NOPE.svg" alt="gone"><article', 1))
    server = _serve(broken)
    try:
        found = render_problems(browser, f"http://127.0.0.1:{server.server_port}/quickstart/")
    finally:
        server.shutdown()
    assert any("NOPE.svg" in p for p in found), found
