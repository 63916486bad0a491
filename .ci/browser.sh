#!/usr/bin/env bash
# The viewer's browser test drives the distribution's headless Chromium through its own
# chromedriver (tests/integration/test_viewer_browser.py); nothing downloads a browser. Installs them
# with apt where they are missing (under CI=true a skipped test fails the run: docs/testing.md).
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "no apt-get: install chromium and its chromedriver to run the viewer's browser test"
    exit 1
fi
SUDO=$([ "$(id -u)" = 0 ] && echo "" || echo "sudo")
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver
