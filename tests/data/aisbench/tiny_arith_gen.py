# A user's own AISBench dataset config (data for tests/test_score_aisbench.py): GSM8K's zero-shot
# prompt and evaluator over tiny_arith/, reported under its own name.
from mmengine.config import read_base

with read_base():
    from ais_bench.benchmark.configs.datasets.gsm8k.gsm8k_gen_0_shot_cot_str import gsm8k_datasets

gsm8k_datasets[0]["abbr"] = "tiny_arith"
