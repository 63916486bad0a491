"""Screenshots of ``posttrain view`` for docs/viewer.md, taken in the distribution's headless
Chromium (``bash .ci/browser.sh`` installs it with its chromedriver).

    python tools/viewer_screenshots.py runs/quickstart docs/images

writes ``viewer_curves.png`` (``rl/reward``, smoothed), ``viewer_grid.png`` (every
``rl/eval/`` chart side by side), ``viewer_episodes.png`` (sorted by reward, lowest first) and
``viewer_episode.png`` (the lowest-reward episode, coloured by log-prob). The viewer's browser test
(tests/integration/test_viewer_browser.py) drives the same browser through ``headless_chromium``.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def headless_chromium(width: int = 1280, height: int = 900):
    """A Selenium driver of the system's Chromium through the system's chromedriver (Selenium
    Manager is told to fetch nothing)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},{height}"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)


def main(run: Path, out: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    from posttrain.serve import running
    from posttrain.viewer import create_viewer_app

    driver = headless_chromium()
    wait = WebDriverWait(driver, 60)
    try:
        with running(create_viewer_app([run])) as url:
            driver.get(url.removesuffix("/v1") + "/")
            wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#curve path.series"))
            Select(driver.find_element(By.ID, "metric-select")).select_by_value("rl/reward")
            driver.find_element(By.ID, "smoothing").send_keys("\ue014" * 60)  # right arrow
            driver.save_screenshot(str(out / "viewer_curves.png"))
            driver.find_element(By.ID, "grid-filter").send_keys("rl/eval/")
            wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#curve-grid svg"))
            driver.save_screenshot(str(out / "viewer_grid.png"))
            driver.find_element(By.ID, "grid-filter").clear()
            first = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "tr.episode-row"))[0]
            Select(driver.find_element(By.ID, "sort")).select_by_value("reward")  # worst first
            wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "tr.episode-row")[0] != first)
            driver.execute_script("arguments[0].scrollIntoView()",
                                  driver.find_element(By.ID, "episode-run"))
            driver.save_screenshot(str(out / "viewer_episodes.png"))
            driver.find_elements(By.CSS_SELECTOR, "tr.episode-row")[0].click()
            token = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#episode .token"))
            driver.execute_script("arguments[0].scrollIntoView()",
                                  driver.find_element(By.ID, "episode"))
            assert token
            driver.save_screenshot(str(out / "viewer_episode.png"))
    finally:
        driver.quit()


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
