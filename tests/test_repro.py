import json
import subprocess

from harness.plan.deployment import Deployment, LaunchSpec
from harness.results.repro import write_bundle


def test_bundle_quotes_everything_and_names_the_rerun(tmp_path):
    evil = "a'b; touch /tmp/ppconf-pwned $(id)"
    launch = LaunchSpec("node0-api", "api", "local", "localhost", ("vllm", "serve", "/m dir/x", "--flag", evil),
                        (("X", evil), ("HF_TOKEN", "hf_secretsecret")), 8000)
    d = Deployment(("c/1",), (launch,), "node0-api")
    log = tmp_path / "api.log"
    log.write_text("\n".join(f"line {i}" for i in range(1, 40)) + "\nValueError: boom\n")
    rec = {"case": "fam/pp2/1,2/none", "suite": "s", "outcome": "FAIL", "reason": "boom",
           "expectation": {"kind": "supported"},
           "observation": {"root_cause": {"log": "node0-api", "line": 40, "text": "ValueError: boom"},
                           "logs": {"node0-api": str(log)}}}
    info = write_bundle(tmp_path, rec, d, tmp_path / "matrices", {"pp": 2})
    script = (tmp_path / "repro" / "fam_pp2_1_2_none" / "commands.sh").read_text()
    assert subprocess.run(["bash", "-n", "-c", script]).returncode == 0
    assert "hf_secretsecret" not in script and "HF_TOKEN='***'" in script
    # the evil value survives as one literal word
    words = subprocess.run(["bash", "-c", script.split("\nvllm serve")[0].split("\n", 3)[-1] + "\nprintf %s \"$X\""],
                           capture_output=True, text=True).stdout
    assert words == evil
    case = json.loads((tmp_path / "repro" / "fam_pp2_1_2_none" / "case.json").read_text())
    assert case["log_excerpts"]["root_cause"][-1] == "ValueError: boom"
    assert info["rerun"].startswith("ppconf run --matrices") and "--case fam/pp2/1,2/none" in info["rerun"]
