"""A JSON key a platform's engine reads beyond the driver's vLLM names the release whose source
reads it (``config_keys`` in platforms.yaml): checked at load, and against the installed engine
where it is that release."""

from __future__ import annotations

import dataclasses

import pytest

from harness.matrix.load import load_matrix
from harness.matrix.source import MatrixError
from harness.plan.validate import Engine, engine_key_report


@dataclasses.dataclass
class PassConfig:
    enable_sp: bool = False


@dataclasses.dataclass
class CompilationConfig:
    pass_config: PassConfig = dataclasses.field(default_factory=PassConfig)


@dataclasses.dataclass
class OtherPassConfig:
    fuse_norm_quant: bool = False


@dataclasses.dataclass
class OtherCompilationConfig:
    pass_config: OtherPassConfig = dataclasses.field(default_factory=OtherPassConfig)


def fake_engine(version: str, cls: type) -> Engine:
    return Engine(None, None, "cpu", {"compilation-config": cls}, {}, frozenset(), version)


def test_the_shipped_sequence_parallelism_key_names_the_release_that_reads_it(shipped):
    key = shipped.platforms["ascend"].config_keys["compilation-config.pass_config.enable_sp"]
    assert (key.engine, key.version, key.read_in) == ("vllm", "0.27.0", "vllm/config/compilation.py")


def test_on_another_release_the_key_passes_on_its_word_with_a_note(shipped):
    report = engine_key_report(shipped, ["ascend"], fake_engine("0.32.0", OtherCompilationConfig))
    assert report.errors == []
    [note] = report.notes
    assert "platforms.yaml:" in note
    assert "passes unchecked on the word of vllm 0.27.0's vllm/config/compilation.py" in note
    assert "installed vLLM is 0.32.0" in note


def test_on_the_named_release_the_key_must_be_a_field(shipped):
    assert engine_key_report(shipped, ["ascend"], fake_engine("0.27.0", CompilationConfig)).ok
    report = engine_key_report(shipped, ["ascend"], fake_engine("0.27.0", OtherCompilationConfig))
    [err] = report.errors
    assert "platforms.yaml:" in err and "says vLLM 0.27.0 reads it" in err
    assert "OtherCompilationConfig does not" in err


@pytest.mark.parametrize(
    "entry,words",
    [
        ("{source: https://example.invalid/doc}", "engine"),
        ("{engine: vllm, version: latest, read_in: vllm/config/compilation.py}", "should match pattern"),
        ("{engine: sglang, version: 0.27.0, read_in: x.py}", "engine"),
    ],
)
def test_a_key_without_its_engine_release_is_an_error_at_load(matrix_dir, entry, words):
    path = matrix_dir.root / "platforms.yaml"
    text = path.read_text()
    start = text.index("      compilation-config.pass_config.enable_sp:")
    end = text.index("  cuda:")
    path.write_text(text[:start] + f"      compilation-config.pass_config.enable_sp: {entry}\n" + text[end:])
    with pytest.raises(MatrixError) as err:
        load_matrix(matrix_dir.root)
    errs = [str(e) for e in err.value.errors]
    assert any("platforms.yaml:" in e and "config_keys" in e and words in e for e in errs), errs
