"""The HTML evidence page without JavaScript: every cell an anchor linking to its case's evidence
in a <details>, links to the full logs, the repro bundle and the waiver, and a verified rejection
told apart from a waived crash (pure: the page's structure, parsed)."""

from urllib.parse import unquote

import lxml.html

from harness.outcomes import Outcome
from reports.render import report_run
from tests.test_reports import make_run, rec

WAIVER = "https://github.com/o/r/issues/1"


def _run(tmp_path):
    served = rec("qwen3-tiny/pp2-tp1-mp/auto/none", "PASS")
    served["observation"] = {"logs": {"node0-api": "logs/abc/node0-api.log", "stray": "../../outside.log"}}
    crash = rec(
        "qwen3-tiny/pp2-tp1-mp/0,5/none",
        "KNOWN_ISSUE",
        kind="known-issue",
        partition="0,5",
        reason="failed at startup: ZeroDivisionError",
        link=WAIVER,
        owner="alice",
        until="2099-01-01",
        waives=["startup"],
    )
    crash["repro"] = {"dir": "somewhere/else/repro/q-0_5-1234", "rerun": "ppconf run --case 'q'"}
    hostile = rec(
        "qwen3-tiny/pp2-tp1-mp/auto/eager",
        "FLAKY",
        kind="flaky",
        features=["eager"],
        link="javascript:alert(1)",
        owner="bob",
    )
    rejected = rec(
        "qwen3-tiny/pp2-tp1-mp/1,2/none", "XFAIL", kind="rejected", partition="1,2", error="sum", phase="startup"
    )
    run = make_run(tmp_path / "run", [served, crash, hostile, rejected])
    (run / "logs" / "abc").mkdir(parents=True)
    (run / "logs" / "abc" / "node0-api.log").write_text("INFO ready\n")
    (run / "repro" / "q-0_5-1234").mkdir(parents=True)
    for name in ("commands.sh", "case.json"):
        (run / "repro" / "q-0_5-1234" / name).write_text("x\n")
    (tmp_path / "outside.log").write_text("not the run's\n")
    report_run(run, run / "report")
    page = lxml.html.parse(str(run / "report" / "support.html")).getroot()
    return run, page


def _evidence(page, case):
    (body,) = [b for b in page.xpath("//div[@class='ev-body']") if case in b.getparent().find("summary").text_content()]
    return body


def _target(run, href):
    return (run / "report" / unquote(href)).resolve()


def test_no_script_and_no_event_handler_on_the_page(tmp_path):
    _, page = _run(tmp_path)
    assert not page.xpath("//script")
    assert not [(el.tag, a) for el in page.iter() for a in el.attrib if a.lower().startswith("on")]
    assert not [a for a in page.xpath("//a") if a.get("href", "").lower().startswith("javascript:")]


def test_every_cell_is_an_anchor_linking_to_evidence_inside_details(tmp_path):
    _, page = _run(tmp_path)
    ids = [el.get("id") for el in page.iter() if el.get("id")]
    assert len(ids) == len(set(ids))
    cells = page.xpath("//table[@class='grid']//td")
    assert cells and all(td.get("id", "").startswith("cell-") for td in cells)
    for td in page.xpath("//table[@class='grid']//td[contains(concat(' ', @class, ' '), ' cell ')]"):
        target = page.get_element_by_id(td.find("a").get("href").removeprefix("#"))
        assert target.getparent().tag == "details"  # a browser opens the details to show its target
        back = target.xpath(".//a[starts-with(@href, '#cell-')]")[0].get("href")
        assert back == f"#{td.get('id')}"


def test_evidence_links_the_full_logs_inside_the_run_only(tmp_path):
    run, page = _run(tmp_path)
    body = _evidence(page, "qwen3-tiny/pp2-tp1-mp/auto/none")
    (log,) = [a for a in body.iter("a") if a.text == "node0-api"]
    assert _target(run, log.get("href")) == (run / "logs/abc/node0-api.log").resolve()
    assert "stray (../../outside.log: not in the run directory)" in body.text_content()
    assert not [a for a in body.iter("a") if a.text == "stray"]


def test_a_waived_case_links_its_repro_bundle_and_its_waiver(tmp_path):
    run, page = _run(tmp_path)
    body = _evidence(page, "qwen3-tiny/pp2-tp1-mp/0,5/none")
    links = {a.text: a.get("href") for a in body.iter("a")}
    assert _target(run, links["somewhere/else/repro/q-0_5-1234"]) == (run / "repro/q-0_5-1234").resolve()
    assert _target(run, links["commands.sh"]) == (run / "repro/q-0_5-1234/commands.sh").resolve()
    assert _target(run, links["case.json"]).is_file()
    assert links[WAIVER] == WAIVER and "owner alice, until 2099-01-01" in body.text_content()
    (row,) = [tr for tr in page.xpath("//section[@id='waivers']//tr") if WAIVER in tr.text_content()]
    assert [a.get("href") for a in row.iter("a")][1] == WAIVER and "alice" in row.text_content()
    # a waiver link that is no web address is shown, never followed
    flaky = _evidence(page, "qwen3-tiny/pp2-tp1-mp/auto/eager")
    assert "javascript:alert(1)" in flaky.text_content() and not flaky.xpath(".//a[starts-with(@href, 'javascript')]")


def test_a_verified_rejection_and_a_waived_crash_differ_in_symbol_and_colour(tmp_path):
    _, page = _run(tmp_path)
    (rejected,) = page.xpath("//td[contains(@class, 'o-XFAIL')]")
    (crash,) = page.xpath("//td[contains(@class, 'o-KNOWN_ISSUE')]")
    assert "❌" in rejected.text_content() and "❌" in crash.text_content()  # both not supported, in the legend
    assert Outcome.XFAIL.symbol in rejected.text_content() and Outcome.KNOWN_ISSUE.symbol in crash.text_content()
    assert Outcome.KNOWN_ISSUE.symbol not in rejected.text_content()
    css = page.xpath("//style")[0].text
    assert f".o-XFAIL {{ background: {Outcome.XFAIL.colour}; }}" in css
    assert f".o-KNOWN_ISSUE {{ background: {Outcome.KNOWN_ISSUE.colour}; }}" in css
