"""The smoke run's unbalanced custom partition gets the guide's tuning advice, from what its
stages measured on the real deployment."""

from harness.outcomes import Outcome


def test_an_unbalanced_partition_is_advised_toward_balance(ppconf_session):
    record = ppconf_session.record("smoke-cpu", "qwen3-tiny/pp2-tp1-mp/1,4/none")
    assert record.outcome is Outcome.PASS, record.reason
    tuning = record.observation.tuning
    assert tuning is not None, "no stage was measured"
    stages = tuning.stages
    assert [s.layers for s in stages] == [1, 4]
    step_ms = [s.step_ms or 0.0 for s in stages]
    peak_mib = [s.peak_mib or 0.0 for s in stages]
    assert all(t > 0 for t in step_ms) and all(m > 0 for m in peak_mib), stages
    assert min(tuning.steps) > 0, "no forward pass was timed"
    # four layers and the LM head hold more than one layer and the embeddings: the advice moves
    # a layer from stage 1 to stage 0
    assert peak_mib[1] > peak_mib[0], stages
    assert tuning.by_memory.next == "2,3", tuning.by_memory
