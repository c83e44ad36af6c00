"""The smoke run's unbalanced custom partition gets the guide's tuning advice, from what its
stages measured on the real deployment."""


def test_an_unbalanced_partition_is_advised_toward_balance(ppconf_session):
    record = ppconf_session.record("smoke-cpu", "qwen3-tiny/pp2-tp1-mp/1,4/none")
    assert record["outcome"] == "PASS", record["reason"]
    tuning = record["observation"]["tuning"]
    stages = tuning["stages"]
    assert [s["layers"] for s in stages] == [1, 4]
    assert all(s["step_ms"] > 0 and s["peak_mib"] > 0 for s in stages), stages
    assert min(tuning["steps"]) > 0, "no forward pass was timed"
    # four layers and the LM head hold more than one layer and the embeddings: the advice moves
    # a layer from stage 1 to stage 0
    assert stages[1]["peak_mib"] > stages[0]["peak_mib"], stages
    assert tuning["by_memory"]["next"] == "2,3", tuning["by_memory"]
