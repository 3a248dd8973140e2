"""Headless Debian chromium driven by Playwright for Python, for the web front-end's tests.

Invariant: never Playwright's own browser download; a missing chromium (or Playwright) fails
the test with the command that installs it — it never skips.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
INSTALL = "bash .ci/install --dev  (apt-get install chromium; pip: playwright from the dev lock)"


def chromium_path() -> str:
    path = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
    if not path:
        pytest.fail(f"Debian's chromium is not installed; run: {INSTALL}", pytrace=False)
    return path


@contextlib.asynccontextmanager
async def browser_page(viewport: tuple[int, int] = (1400, 900)) -> AsyncIterator[Any]:
    """A fresh browser context and page; script errors and console errors (other than the
    browser's own line for an HTTP error status, which tests provoke) go to ``page.errors``."""
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        pytest.fail(f"Playwright for Python is not installed; run: {INSTALL}", pytrace=False)
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium_path(), args=FLAGS)
        try:
            context = await browser.new_context(
                viewport={"width": viewport[0], "height": viewport[1]}
            )
            page = await context.new_page()
            page.errors = []  # type: ignore[attr-defined]
            page.on("pageerror", lambda e: page.errors.append(str(e)))
            page.on(
                "console",
                lambda m: (
                    page.errors.append(m.text)
                    if m.type == "error" and not m.text.startswith("Failed to load resource")
                    else None
                ),
            )
            yield page
        finally:
            await browser.close()
