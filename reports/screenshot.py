"""Open a rendered page in headless Chromium, save a screenshot, report script errors.

python -m reports.screenshot RUN_DIR/report/support.html [OUT.png]
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def screenshot(html: Path, png: Path) -> list[str]:
    """Script errors seen while loading ``html``; the full-page screenshot goes to ``png``."""
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(html.resolve().as_uri())
            page.screenshot(path=str(png), full_page=True)
        finally:
            browser.close()
    return errors


def main(argv: list[str]) -> int:
    html = Path(argv[0])
    png = Path(argv[1]) if len(argv) > 1 else html.with_suffix(".png")
    if chromium() is None:
        print("no chromium found; install Debian's chromium package", file=sys.stderr)
        return 2
    errors = screenshot(html, png)
    for e in errors:
        print(f"script error: {e}", file=sys.stderr)
    print(png)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
