from harness.check.verdict.diagnose import diagnose


def test_first_matching_symptom_with_advice(shipped, tmp_path):
    log = tmp_path / "api.log"
    log.write_text(
        "INFO fine\n(Worker_PP1 pid=1) ERROR ... ValueError: sum(partitions)=3 does not match num_hidden_layers=5.\n"
    )
    d = diagnose(shipped.diagnosis, ["failed at startup"], {"node0-api": log})
    assert d["symptom"] == "partition rejected at startup"
    assert "hidden layers" in d["advice"] and "node0-api:2" in d["evidence"]


def test_verdict_text_is_enough_and_unknown_says_so(shipped, tmp_path):
    assert (
        diagnose(shipped.diagnosis, ["request failed: no answer within 60 s"], {})["symptom"] == "first request hangs"
    )
    assert diagnose(shipped.diagnosis, ["something new"], {})["symptom"] == "unclassified"
