"""Tiny models from a config.json of the user's (``model: zoo:PATH.json``): read, named and hashed
like the built-in ones, made absolute by the matrix loader, and refused with the file and the
reason when they cannot be built."""

import json
import textwrap
from pathlib import Path

import pytest

from harness.cases.expand import expand
from harness.matrix.load import load_matrix
from harness.matrix.schema import Variant
from harness.matrix.source import MatrixError
from harness.target import zoo
from harness.target.model_config import LayerCounts

DATA = Path(__file__).parent / "data" / "zoo"


def test_a_config_json_is_a_spec():
    spec = zoo.spec_from_file(DATA / "llama-file.json")
    assert (spec.name, spec.architecture, spec.num_hidden_layers) == ("llama-file", "LlamaForCausalLM", 4)
    assert (spec.dtype, spec.weights, spec.runner, spec.seed) == ("float32", "random", "generate", 0)
    written = spec.config_json()
    assert written["architectures"] == ["LlamaForCausalLM"] and written["num_hidden_layers"] == 4
    assert "ppconf" not in written


def test_model_dir_names_the_file_and_changes_with_its_content(tmp_path):
    spec = tmp_path / "mine.json"
    spec.write_text((DATA / "llama-file.json").read_text())
    first = zoo.model_dir(str(spec), tmp_path / "cache")
    assert first.name.startswith("mine-") and not first.exists()
    data = json.loads(spec.read_text())
    data["num_hidden_layers"] = 6
    spec.write_text(json.dumps(data))
    assert zoo.model_dir(str(spec), tmp_path / "cache") != first


def test_a_multimodal_config_keeps_its_nested_count(tmp_path):
    spec = tmp_path / "mm.json"
    spec.write_text(
        json.dumps(
            {
                "architectures": ["KimiK3ForConditionalGeneration"],
                "model_type": "kimi_k3",
                "text_config": {"num_hidden_layers": 7, "model_type": "kimi_k3_text"},
                "ppconf": {"weights": "dummy"},
            }
        )
    )
    s = zoo.spec_from_file(spec)
    assert s.num_hidden_layers == 7 and s.weights == "dummy"
    assert "num_hidden_layers" not in s.config_json(), "the count stays where the config put it"


@pytest.mark.parametrize(
    "content, message",
    [
        ("{", "not valid JSON"),
        ("[]", "expected a JSON object"),
        ('{"model_type": "llama", "num_hidden_layers": 2}', '"architectures" must list'),
        ('{"architectures": ["X"], "num_hidden_layers": 2}', '"model_type" is missing'),
        ('{"architectures": ["X"], "model_type": "x"}', 'no "num_hidden_layers"'),
        (
            '{"architectures": ["X"], "model_type": "x", "num_hidden_layers": 2, "ppconf": {"weight": "dummy"}}',
            "got weight",
        ),
        (
            '{"architectures": ["X"], "model_type": "x", "num_hidden_layers": 2, "ppconf": {"weights": "zero"}}',
            "not 'zero'",
        ),
    ],
)
def test_a_bad_spec_names_the_file_and_the_problem(tmp_path, content, message):
    spec = tmp_path / "bad.json"
    spec.write_text(content)
    with pytest.raises(zoo.ZooError) as err:
        zoo.spec_from_file(spec)
    assert str(spec) in str(err.value) and message in str(err.value)


def test_an_unknown_name_says_how_to_bring_a_model():
    with pytest.raises(zoo.ZooError, match=r"zoo:PATH\.json"):
        zoo.spec_of("llama-tyni")


def _matrix(tmp_path: Path, model: str) -> Path:
    root = tmp_path / "m"
    (root / "models").mkdir(parents=True)
    (root / "models" / "llama.json").write_text((DATA / "llama-file.json").read_text())
    (root / "m.yaml").write_text(
        textwrap.dedent(
            f"""\
            platforms:
              cpu: {{title: CPU, device_env: VLLM_CPU_OMP_THREADS_BIND, device_format: cpu-bind}}
            topologies:
              pp2: {{tp: 1, pp: 2}}
            families:
              llama:
                title: Llama from a config.json
                variants:
                  default:
                    architecture: LlamaForCausalLM
                    supports_pp: true
                    model: {model}
                    platforms: [cpu]
            rules:
              - when: family == "llama"
                expect: supported
                why: claimed
            suites:
              s:
                title: a suite
                platform: cpu
                groups:
                  - families: [llama]
                    topologies: [pp2]
                    partitions: [auto, "1,3"]
            """
        )
    )
    return root


def test_the_loader_makes_the_path_absolute_from_the_matrix_file(tmp_path):
    root = _matrix(tmp_path, "zoo:models/llama.json")
    m = load_matrix(root)
    model = m.variant("llama", "default").model
    assert model == f"zoo:{(root / 'models' / 'llama.json').resolve()}"
    # the layer count comes from the file, so a custom partition can be claimed without hidden_layers
    cases = expand(m, "s").cases
    assert {c.partition for c in cases} == {"auto", "1,3"}
    assert LayerCounts()(Variant(architecture="LlamaForCausalLM", supports_pp=True, model=model)) == 4


def test_a_missing_spec_file_is_an_error_at_its_line(tmp_path):
    root = _matrix(tmp_path, "zoo:models/nope.json")
    with pytest.raises(MatrixError) as err:
        load_matrix(root)
    text = str(err.value)
    assert "m.yaml:" in text and "families.llama.variants.default.model" in text and "nope.json" in text
