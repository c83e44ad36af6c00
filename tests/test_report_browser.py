"""The evidence page as a person sees it, in a real headless Chromium."""

import shutil

import pytest

from reports.render import report_run
from reports.screenshot import CHROMIUM_ARGS
from tests.test_reports import GOOD, make_run, rec

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [pytest.mark.slow, pytest.mark.needs_browser]


def test_a_click_on_a_cell_opens_its_evidence_with_javascript_off(tmp_path):
    from playwright import sync_api

    failed = rec(
        "qwen3-moe-tiny/pp2-tp1-mp/auto/none",
        "FAIL",
        family="qwen3-moe-tiny",
        reason="outputs differ from the PP=1 baseline",
    )
    failed["observation"] = {
        "accuracy": {
            "equal": False,
            "summary": "1 of 3 prompts differ",
            "diffs": [
                {
                    "prompt": "Hello",
                    "baseline_ids": [1, 2],
                    "observed_ids": [1, 3],
                    "first_token_mismatch": 1,
                    "max_logprob_diff": 0.4,
                }
            ],
        }
    }
    run = make_run(tmp_path / "run", GOOD + [failed])
    out = tmp_path / "run" / "report"
    report_run(run, out)
    problems = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1200, "height": 900}, java_script_enabled=False)
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.goto((out / "support.html").as_uri())
        assert page.locator("script").count() == 0
        assert page.locator("table.grid").count() == 2
        assert page.locator("td.cell").count() == 4
        assert page.locator("details[open]").count() == 0
        failed_cell = page.locator("td.o-FAIL")
        assert failed_cell.count() == 1 and "❌" in failed_cell.inner_text()
        evidence = page.locator("details", has_text="outputs differ from the PP=1 baseline")
        assert not evidence.locator(".ev-body").is_visible()
        failed_cell.locator("a").first.click()
        assert page.url.endswith("#" + failed_cell.locator("a").first.get_attribute("href").lstrip("#"))
        assert page.locator("details[open]").count() == 1
        body = evidence.locator(".ev-body")
        assert body.is_visible() and evidence.get_attribute("open") is not None
        assert "qwen3-moe-tiny/pp2-tp1-mp/auto/none" in evidence.inner_text()
        assert "reference [1, 2]" in body.inner_text() and "observed  [1, 3]" in body.inner_text()
        # and back to the cell it came from
        body.locator("a[href^='#cell-']").click()
        assert page.url.endswith("#" + failed_cell.get_attribute("id"))
        page.screenshot(path=str(out / "support.png"), full_page=True)
        browser.close()
    assert problems == []
    assert (out / "support.png").stat().st_size > 1000
