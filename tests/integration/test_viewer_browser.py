"""``posttrain view`` as a person sees it: the distribution's headless Chromium (driven by
Selenium through its own chromedriver; nothing downloads a browser) loads the page over two
recorded runs, a curve is drawn for each run, the episode list narrows under a filter, an
episode opens with its sampled tokens coloured and their values on hover, and its group opens
side by side. Screenshots are written next to the test's runs (``POSTTRAIN_SCREENSHOTS``: a
folder to copy them to); docs/viewer.md's come from a quickstart run through
tools/viewer_screenshots.py, which launches the same browser."""

import importlib.util
import os
import shutil
from pathlib import Path

import pytest
from viewer_helpers import recorded_run

from posttrain.serve import running
from posttrain.viewer import create_viewer_app

TOOL = Path(__file__).resolve().parents[2] / "tools" / "viewer_screenshots.py"
spec = importlib.util.spec_from_file_location("viewer_screenshots", TOOL)
SCREENSHOTS = importlib.util.module_from_spec(spec)
spec.loader.exec_module(SCREENSHOTS)
CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not (CHROMIUM and DRIVER),
    reason="no headless Chromium with its chromedriver: `bash .ci/browser.sh` installs the "
           "distribution's chromium and chromium-driver")]


@pytest.fixture
def browser():
    driver = SCREENSHOTS.headless_chromium()
    yield driver
    driver.quit()


def shoot(driver, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"viewer_{name}.png"
    driver.save_screenshot(str(path))
    assert path.stat().st_size > 10_000
    if os.environ.get("POSTTRAIN_SCREENSHOTS"):
        shutil.copy(path, Path(os.environ["POSTTRAIN_SCREENSHOTS"]) / path.name)
    return path


def select_values(browser, element_id: str) -> list[str]:
    """The values of a select's options, read as one rendering (the page may redraw it
    between finding the options and reading them)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    return WebDriverWait(browser, 30, ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda d: [o.get_attribute("value") for o in
                   Select(d.find_element(By.ID, element_id)).options])


def test_the_page_shows_curves_episodes_and_coloured_tokens(browser, tmp_path):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select, WebDriverWait

    runs = [recorded_run(tmp_path / "first"), recorded_run(tmp_path / "second", "seed=1")]
    wait = WebDriverWait(browser, 30)
    with running(create_viewer_app(runs)) as url:
        browser.get(url.removesuffix("/v1") + "/")
        # a curve per run, of the default metric
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#curve path.series")) == 2)
        metrics = select_values(browser, "metric-select")
        assert "rl/reward" in metrics and "rl/eval/accuracy" in metrics
        Select(browser.find_element(By.ID, "metric-select")).select_by_value("rl/entropy")
        wait.until(lambda d: all(p.get_attribute("d") for p in
                                 d.find_elements(By.CSS_SELECTOR, "#curve path.series")))
        shoot(browser, tmp_path, "curves")

        # the episode list, narrowed by a filter
        rows = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "tr.episode-row"))
        assert len(rows) == 12
        assert "12" in browser.find_element(By.ID, "episode-count").text
        step_min = browser.find_element(By.ID, "filter-step-min")
        step_min.send_keys("2")
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "tr.episode-row")) == 6)
        assert "6" in browser.find_element(By.ID, "episode-count").text
        assert select_values(browser, "filter-task") == ["", "addition"]
        shoot(browser, tmp_path, "episodes")

        # one episode: sampled tokens coloured, values on hover
        browser.find_elements(By.CSS_SELECTOR, "tr.episode-row")[0].click()
        tokens = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#episode span.token"))
        sampled = [t for t in tokens if "logprob" in (t.get_attribute("title") or "")]
        assert sampled and len(sampled) < len(tokens)  # the prompt is not coloured by value
        colours = {t.value_of_css_property("background-color") for t in sampled}
        assert colours - {"rgba(0, 0, 0, 0)", "transparent"}
        assert all("version" in t.get_attribute("title") for t in sampled)
        browser.execute_script("arguments[0].scrollIntoView()", sampled[0])
        shoot(browser, tmp_path, "episode")
        def sampled_colours(d):
            return {t.value_of_css_property("background-color")
                    for t in d.find_elements(By.CSS_SELECTOR, "#episode span.token")
                    if "logprob" in (t.get_attribute("title") or "")}

        Select(browser.find_element(By.ID, "colour-by")).select_by_value("loss_mask")
        wait.until(lambda d: len(sampled_colours(d)) == 1)  # every sampled token alike

        # a traced episode (rl.token_stats): advantages and trainer log-probs on hover
        step_min.send_keys(Keys.BACKSPACE)  # as a person clears it (an input event)
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "tr.episode-row")) == 12)
        browser.find_elements(By.CSS_SELECTOR, "tr.episode-row")[0].click()
        Select(browser.find_element(By.ID, "colour-by")).select_by_value("advantage")
        wait.until(lambda d: any("advantage" in (t.get_attribute("title") or "") for t in
                                 d.find_elements(By.CSS_SELECTOR, "#episode span.token")))
        titles = [t.get_attribute("title") for t in
                  browser.find_elements(By.CSS_SELECTOR, "#episode span.token")]
        assert any("mismatch" in t and "trainer logprob" in t and "entropy" in t
                   for t in titles)
        Select(browser.find_element(By.ID, "colour-by")).select_by_value("entropy")
        assert "nats" in browser.find_element(By.ID, "colour-legend").text

        # its group, side by side
        browser.find_element(By.ID, "open-group").click()
        cards = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#group .group-sample"))
        assert len(cards) == 3

        # the group says what it was asked and where its advantages come from (this traced
        # group: the advantages the run used)
        facts = browser.find_element(By.ID, "group-facts").text
        assert "reference" in facts and "advantage recorded" in facts and "What is" in facts

        # filters offer what the run holds; the traced filter keeps the traced episodes
        finishes = select_values(browser, "filter-finish")
        assert finishes[0] == "" and set(finishes[1:]) <= {"stop", "length"} and finishes[1:]
        Select(browser.find_element(By.ID, "filter-traced")).select_by_value("yes")

        def traced_rows_only(d) -> bool:  # read as one rendering (the table may redraw)
            rows = d.find_elements(By.CSS_SELECTOR, "tr.episode-row")
            return 0 < len(rows) < 12 and all(
                r.find_elements(By.TAG_NAME, "td")[7].text == "yes" for r in rows)

        WebDriverWait(browser, 30, ignored_exceptions=(StaleElementReferenceException,)).until(
            traced_rows_only)
        Select(browser.find_element(By.ID, "filter-traced")).select_by_value("")

        # a grid of every rl/eval chart side by side, values on hover, the time axis
        browser.find_element(By.ID, "grid-filter").send_keys("rl/eval/")
        charts = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#curve-grid svg"))
        assert len(charts) >= 3 and not browser.find_element(By.ID, "curve").is_displayed()
        from selenium.webdriver.common.action_chains import ActionChains

        ActionChains(browser).move_to_element(charts[0]).perform()
        wait.until(lambda d: "at step" in d.find_element(By.ID, "readout").text)
        Select(browser.find_element(By.ID, "x-axis")).select_by_value("time")
        wait.until(lambda d: "wall time" in d.find_element(By.ID, "curve-grid").text)
        shoot(browser, tmp_path, "grid")

        # the run's summary.json and config
        browser.find_element(By.CSS_SELECTOR, "#run-files summary").click()
        wait.until(lambda d: '"eval_after_rl"' in d.find_element(By.ID, "run-summary").text)


def test_a_run_without_metrics_waits_and_a_grid_that_matches_nothing_says_so(browser,
                                                                             tmp_path):
    """A run that has written only its config.yaml is listed as waiting for its first
    metrics, and its curve appears once they land; a grid filter that matches no metric says
    so (it showed an empty area)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    run = tmp_path / "started"
    run.mkdir()
    (run / "config.yaml").write_text("stages: [rl]\n")
    wait = WebDriverWait(browser, 30)
    with running(create_viewer_app([run])) as url:
        browser.get(url.removesuffix("/v1") + "/")
        wait.until(lambda d: "waiting for its first metrics" in d.find_element(By.ID, "runs").text)
        (run / "metrics.jsonl").write_text("".join(
            f'{{"stage": "rl", "step": {s}, "reward": {s / 4}}}\n' for s in (1, 2, 3)))
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#curve path.series"))
        wait.until(lambda d: "waiting" not in d.find_element(By.ID, "runs").text)
        browser.find_element(By.ID, "grid-filter").send_keys("eval/")
        wait.until(lambda d: d.find_element(By.ID, "curve-grid").text
                   == 'no metric matches "eval/"')
        assert not browser.find_elements(By.CSS_SELECTOR, "#curve-grid svg")
        browser.find_element(By.ID, "grid-filter").clear()
        browser.find_element(By.ID, "grid-filter").send_keys("rl/")
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#curve-grid svg")) == 1)
